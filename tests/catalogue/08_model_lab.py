"""Wrong implementations of Chapter 8 that the graders must reject."""

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '8.1': 'The model and our decode loop',
    '8.2': 'Chapter 3 on a real model: quantized keys and values',
}

BUGS = [
    Bug("growth_forgets_old_tokens", "8.1", "allocates the bigger buffer but does not copy what was there",
        old="                new[:, :, : self.length] = old[:, :, : self.length]\n", new="", tests="growing_cache"),
    Bug("grows_by_one_chunk_not_doubling", "8.1", "grows capacity to exactly the tokens needed (quadratic copying)",
        old="            while self.length + T > self.capacity:\n                self.capacity *= 2\n",
        new="            self.capacity = self.length + T\n", tests="growing_cache"),
    Bug("returns_the_whole_buffer", "8.1", "hands back the unfilled tail of the buffer too",
        old="return self.k[:, :, : self.length], self.v[:, :, : self.length]", new="return self.k, self.v"),
    Bug("values_written_to_keys", "8.1", "writes the values into the key buffer",
        old="self.v[:, :, self.length : self.length + T] = v", new="self.k[:, :, self.length : self.length + T] = v"),
    Bug("no_shift", "8.2", "scores each position's own token instead of the next one",
        old="targets = token_ids[1:].long()", new="targets = token_ids[:-1].long()", tests="nll"),
    Bug("log_base_2", "8.2", "uses bits (log base 2) for the log-likelihood",
        old="return torch.logsumexp(z, dim=-1) - z.gather(1, targets[:, None])[:, 0]",
        new="return (torch.logsumexp(z, dim=-1) - z.gather(1, targets[:, None])[:, 0]) / math.log(2)", tests="nll"),
    Bug("softmax_in_fp32", "8.2", "takes log(softmax) in fp32, which underflows for large logits",
        old="z = logits[:-1].double()", new="z = logits[:-1].float()", tests="nll"),
    Bug("perplexity_mean_in_float32", "8.2", "takes the mean of the losses in float32, not in float64",
        old="math.exp(float(nll.double().mean()))", new="math.exp(float(nll.float().mean()))",
        tests="nll"),
]
