"""Wrong implementations of Chapter 14 that the graders must reject.

The mistakes people make when they first write speculative decoding from the papers:
an acceptance probability left uncapped, a rejected token resampled from p instead of
the residual max(0, p - q), the bonus token forgotten or taken from the wrong row, the
accepted prefix off by one, argmax ties broken the other way, the expected count with
alpha**gamma, the draft priced as if it read the whole context, pages another sequence
shares freed on a rollback, and a draft cache whose positions drift after one.

``RULES`` maps every bullet under "Graded rules:" in each exercise's docstring to the bugs
that break it, so that no stated rule is left without a graded case that fails on it.
"""

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    "14.1": "The rule that makes it exact",
    "14.2": "The rule that makes it exact",
    "14.3": "Draft, then verify",
    "14.4": "The rule that makes it exact",
    "14.5": "How many tokens a verification buys",
    "14.6": "What a step costs at long context",
    "14.7": "Rolling back the caches",
    "14.8": "Rolling back the caches",
}

ACCEPT_RETURN = "return torch.where(q > 0, ratio.clamp(max=1.0), 1.0)"
ACCEPT_RATIO = "ratio = p / torch.where(q > 0, q, 1.0)"
TO_FP64 = "    p, q = p.to(torch.float64), q.to(torch.float64)\n"
PROB_CHECKS = '    _check_probs("p", p, 1)\n    _check_probs("q", q, 1)\n'
EXCESS = "excess = (p - q).clamp(min=0.0)"
GREEDY_EMIT = "emitted.append(drafted[:n] + [wanted[n]])"
GREEDY_ARGMAX = "target = target_logits.argmax(dim=-1).tolist()"
SAMPLED_REJECT = "return ids[:i] + [sample(residual_distribution(p[i], q[i]), sample_uniform)]"
SAMPLED_BONUS = "return ids + [sample(p[gamma], sample_uniform)]"
SAMPLED_TEST = "if not accept_uniforms[i].item() < acceptance_probs(p[i], q[i])[x].item():"
TOKENS_FORMULA = "return -math.expm1((gamma + 1) * math.log(alpha)) / (1 - alpha)"
KEEP = "keep = -(-new_len // page_size)"
FREE = "        if counts[page] == 0:\n            freed.append(page)"
ROLLBACK_CHECK = "if first_shown < new_length and first_shown < self.lowest:"
SHOWN_SLOTS = "slots = (others - self.num_sink) % self.capacity\n        k = torch.cat("

BUGS = [
    # -- 14.1: the acceptance probability
    Bug("accept_ratio_uncapped", "14.1", "returns p[x] / q[x] without capping it at 1, so a token the target likes "
        "more than the draft gets an 'acceptance probability' above 1 and the first token's distribution no longer "
        "sums to p", old=ACCEPT_RETURN, new="return torch.where(q > 0, ratio, 1.0)"),
    Bug("accept_zero_where_q_is_zero", "14.1", "gives probability 0 to a token the draft never proposes (q[x] == 0), "
        "where the rule's min(1, p / 0) is 1", old=ACCEPT_RETURN,
        new="return torch.where(q > 0, ratio.clamp(max=1.0), 0.0)"),
    Bug("accept_ratio_inverted", "14.1", "divides the draft's probability by the target's, q / p, instead of p / q",
        old=ACCEPT_RATIO, new="ratio = q / torch.where(p > 0, p, 1.0)"),
    Bug("accept_in_input_dtype", "14.1", "computes in the inputs' dtype, so float32 probabilities give a float32 "
        "result instead of float64", old=TO_FP64, new=""),
    Bug("accept_skips_validation", "14.1", "checks none of its arguments, so a list, an integer tensor or a vector "
        "that is not a probability vector fails deep inside (or not at all) with a message that does not name it",
        old=PROB_CHECKS, new=""),
    # -- 14.2: the residual distribution
    Bug("residual_is_p", "14.2", "resamples a rejected token from p itself instead of the residual max(0, p - q): "
        "tokens the draft already proposed often are counted twice", old=EXCESS, new="excess = p.clone()"),
    Bug("residual_q_minus_p", "14.2", "takes max(0, q - p), the draft's excess over the target, instead of "
        "max(0, p - q)", old=EXCESS, new="excess = (q - p).clamp(min=0.0)"),
    Bug("residual_not_normalised", "14.2", "returns max(0, p - q) without dividing by its sum, which is not a "
        "probability vector", old="    return excess / total", new="    return excess"),
    Bug("residual_unclipped", "14.2", "normalises p - q without max(0, .): the negative entries cancel the positive "
        "ones, and the sum it divides by is rounding noise", old=EXCESS, new="excess = p - q"),
    Bug("residual_zero_when_p_equals_q", "14.2", "returns the all-zero max(0, p - q) when p == q instead of p",
        old="        return p.clone()", new="        return excess"),
    Bug("residual_skips_validation", "14.2", "leaves p and q unchecked, so a vector that does not sum to 1 or holds "
        "a negative entry is normalised as if it were a distribution, and a list fails with a message that does not "
        "name it",
        old=PROB_CHECKS, new=""),
    # -- 14.3: greedy verification
    Bug("greedy_counts_every_match", "14.3", "counts every drafted token that equals its row's argmax, also after "
        "the first mismatch, instead of the longest matching prefix",
        old="        n = 0\n        while n < gamma and drafted[n] == wanted[n]:\n            n += 1",
        new="        n = sum(d == w for d, w in zip(drafted, wanted))"),
    Bug("greedy_keeps_the_rejected_token", "14.3", "keeps the first mismatching drafted token too (an off-by-one in "
        "the accepted prefix) before the target's correction", old=GREEDY_EMIT,
        new="emitted.append(drafted[:n + 1] + [wanted[n]])"),
    Bug("greedy_forgets_the_bonus", "14.3", "adds the target's own token only after a rejection: when every drafted "
        "token is accepted, the bonus token the verification already computed is dropped", old=GREEDY_EMIT,
        new="emitted.append(drafted[:n] + [wanted[n]] if n < gamma else drafted[:n])"),
    Bug("greedy_bonus_from_the_last_draft_row", "14.3", "takes the bonus token from the row of the last drafted token "
        "(gamma - 1) instead of the row after it (gamma), so it repeats the last drafted token", old=GREEDY_EMIT,
        new="emitted.append(drafted[:n] + [wanted[min(n, max(gamma - 1, 0))]])"),
    Bug("greedy_ties_to_the_highest_index", "14.3", "breaks argmax ties toward the highest token id instead of the "
        "lowest", old=GREEDY_ARGMAX,
        new="target = (target_logits.shape[-1] - 1 - target_logits.flip(-1).argmax(dim=-1)).tolist()"),
    Bug("greedy_returns_tensors", "14.3", "returns torch scalars instead of Python ints", old=GREEDY_EMIT,
        new="emitted.append([torch.tensor(t) for t in drafted[:n] + [wanted[n]]])"),
    Bug("greedy_skips_row_check", "14.3", "does not check that target_logits has gamma + 1 rows, so a mismatched "
        "pair is verified against the wrong rows or fails with an IndexError",
        old="    if rows != gamma + 1:\n", new="    if False:\n"),
    # -- 14.4: sampled verification
    Bug("sampled_resamples_from_p", "14.4", "resamples a rejected token from the target's p[i] instead of the "
        "residual max(0, p[i] - q[i]) normalised, which skews the output toward what the draft proposes",
        old=SAMPLED_REJECT, new="return ids[:i] + [sample(p[i], sample_uniform)]"),
    Bug("sampled_keeps_the_rejected_token", "14.4", "emits the rejected drafted token too (an off-by-one in the "
        "accepted prefix) before the resampled one", old=SAMPLED_REJECT,
        new="return ids[:i + 1] + [sample(residual_distribution(p[i], q[i]), sample_uniform)]"),
    Bug("sampled_forgets_the_bonus", "14.4", "returns the accepted drafted tokens alone when all are accepted, "
        "dropping the bonus token sampled from p[gamma]", old=SAMPLED_BONUS, new="return ids"),
    Bug("sampled_bonus_from_p_gamma_minus_1", "14.4", "samples the bonus token from p[gamma - 1], the row of the last "
        "drafted token, instead of p[gamma], the row after it", old=SAMPLED_BONUS,
        new="return ids + [sample(p[max(gamma - 1, 0)], sample_uniform)]"),
    Bug("sampled_accepts_at_equality", "14.4", "accepts when the uniform equals the acceptance probability (<=), so a "
        "uniform of 0 accepts a token the target gives probability 0", old=SAMPLED_TEST,
        new="if not accept_uniforms[i].item() <= acceptance_probs(p[i], q[i])[x].item():"),
    Bug("sampled_cumsum_at_equality", "14.4", "samples the first token whose running sum is >= u instead of > u, so "
        "a uniform of 0 picks a token with no probability", old="above = (u < cumulative).nonzero()",
        new="above = (u <= cumulative).nonzero()"),
    Bug("sampled_last_index_past_the_total", "14.4", "returns the last token id when u is above the rounded total, "
        "instead of the last token that has any probability", old="(d > 0).nonzero()[-1].item()",
        new="len(d) - 1"),
    Bug("sampled_accepts_what_q_never_proposes", "14.4", "does not check that q gives each drafted token some "
        "probability, so a token the draft cannot have drawn is accepted with probability 1",
        old="    if any(q[i, x] == 0 for i, x in enumerate(ids)):\n", new="    if False:\n"),
    Bug("sampled_returns_tensors", "14.4", "returns the sampled token as a torch tensor instead of a Python int",
        old="return above[0].item() if len(above)", new="return above[0, 0] if len(above)"),
    Bug("sampled_skips_uniform_checks", "14.4", "does not check that the accept uniforms lie in [0, 1)",
        old="    if not ((accept_uniforms >= 0) & (accept_uniforms < 1)).all():  # NaN fails both\n",
        new="    if False:\n"),
    # -- 14.5: expected tokens per verification
    Bug("tokens_alpha_to_the_gamma", "14.5", "uses (1 - alpha**gamma) / (1 - alpha), forgetting the token the target "
        "adds after the drafted ones (the correction or the bonus)", old=TOKENS_FORMULA,
        new="return -math.expm1(gamma * math.log(alpha)) / (1 - alpha)"),
    Bug("tokens_accepted_drafts_only", "14.5", "counts only the accepted drafted tokens, alpha (1 - alpha**gamma) / "
        "(1 - alpha), not the token every verification adds", old=TOKENS_FORMULA,
        new="return -math.expm1((gamma + 1) * math.log(alpha)) / (1 - alpha) - 1"),
    Bug("tokens_divides_by_zero_at_one", "14.5", "applies the closed form at alpha == 1 too, where 1 - alpha is 0",
        old="    if alpha == 1:\n        return float(gamma + 1)\n", new=""),
    Bug("tokens_int_at_one", "14.5", "returns the int gamma + 1 at alpha == 1 instead of a float",
        old="return float(gamma + 1)", new="return gamma + 1"),
    Bug("tokens_accepts_bad_alpha", "14.5", "does not check that alpha lies in [0, 1]",
        old="    if not 0 <= alpha <= 1:  # NaN fails too\n", new="    if False:\n"),
    # -- 14.6: the modelled speedup
    Bug("speedup_draft_reads_the_whole_context", "14.6", "prices the draft as if it read the whole context, "
        "seconds(N, 1), instead of its own cache of min(N, draft_budget) tokens",
        old="draft = seconds(min(context_len, draft_budget), 1)", new="draft = seconds(context_len, 1)"),
    Bug("speedup_verify_gamma_tokens", "14.6", "verifies gamma tokens instead of gamma + 1: the target also computes "
        "the row after the last drafted token", old="verify = seconds(context_len, gamma + 1)",
        new="verify = seconds(context_len, gamma)"),
    Bug("speedup_gamma_plus_one_draft_steps", "14.6", "charges gamma + 1 draft steps per verification instead of "
        "gamma", old="(gamma * draft + verify)", new="((gamma + 1) * draft + verify)"),
    Bug("speedup_weights_per_sequence", "14.6", "reads the weights once per sequence of the batch instead of once "
        "per forward pass", old="moved = weight_bytes + batch_size * cache_bytes * (L + n)",
        new="moved = batch_size * (weight_bytes + cache_bytes * (L + n))"),
    Bug("speedup_cache_without_new_tokens", "14.6", "reads L cached tokens per sequence and not the n new ones "
        "written beside them", old="moved = weight_bytes + batch_size * cache_bytes * (L + n)",
        new="moved = weight_bytes + batch_size * cache_bytes * L"),
    Bug("speedup_adds_the_roofline", "14.6", "adds the memory time and the compute time instead of taking the "
        "larger, as if the GPU could not overlap them", old="return max(moved / bandwidth, flops / peak_flops)",
        new="return moved / bandwidth + flops / peak_flops"),
    Bug("speedup_every_draft_accepted", "14.6", "counts gamma + 1 tokens per verification, as if every drafted token "
        "were accepted, instead of expected_tokens(alpha, gamma)", old="tokens = expected_tokens(alpha, gamma)",
        new="tokens = float(gamma + 1)"),
    Bug("speedup_torch_scalars", "14.6", "returns the speedup as a torch scalar instead of a Python float",
        old="tokens = expected_tokens(alpha, gamma)", new="tokens = torch.tensor(expected_tokens(alpha, gamma))"),
    Bug("speedup_accepts_a_zero_budget", "14.6", "does not check draft_budget",
        old='    _check_int("draft_budget", draft_budget, 1)\n', new=""),
    # -- 14.7: rolling back pages
    Bug("rollback_frees_shared_pages", "14.7", "frees every page past the new end, also a page another sequence "
        "still holds (its count above 0 after this sequence drops its reference)", old=FREE,
        new="        freed.append(page)"),
    Bug("rollback_floor_pages", "14.7", "keeps floor(new_len / page_size) pages instead of the ceiling, freeing the "
        "page that holds the last kept tokens when new_len is mid-page", old=KEEP, new="keep = new_len // page_size"),
    Bug("rollback_frees_the_last_kept_page", "14.7", "keeps the pages before the one holding token new_len - 1, so "
        "the page holding the last kept token is freed", old=KEEP, new="keep = max(0, (new_len - 1) // page_size)"),
    Bug("rollback_drops_only_freed_references", "14.7", "decrements only the pages it frees, leaving this "
        "sequence's reference on a shared page", old="        counts[page] -= 1  # this sequence's reference only: "
        "others may still hold the page\n        if counts[page] == 0:",
        new="        if counts[page] == 1:\n            counts[page] = 0"),
    Bug("rollback_freed_sorted", "14.7", "lists the freed pages sorted by id instead of in block-table order",
        old="counts, freed\n", new="counts, sorted(freed)\n"),
    Bug("rollback_changes_refcounts_in_place", "14.7", "decrements the caller's refcounts list in place instead of "
        "a new one", old="counts = list(refcounts)", new="counts = refcounts"),
    Bug("rollback_skips_length_check", "14.7", "does not check that block_table holds ceil(seq_len / page_size) pages",
        old="    if len(block_table) != -(-seq_len // page_size):\n", new="    if False:\n"),
    # -- 14.8: the draft's rollable sink-and-window cache
    Bug("draft_rollback_keeps_the_length", "14.8", "forgets nothing on a rollback: len() and the next append's "
        "position keep counting the rolled-back tokens, so positions drift by n after every rollback",
        old="        self.length = new_length\n", new=""),
    Bug("draft_rollback_to_n", "14.8", "reads rollback(n) as 'roll back to n tokens' instead of 'forget the last n'",
        old="new_length = self.length - n", new="new_length = n"),
    Bug("draft_rollback_past_the_evicted_tokens", "14.8", "rolls back even when the window of the shorter sequence "
        "was already evicted, so keys_values then shows stale slots of the ring",
        old=ROLLBACK_CHECK, new="if False:"),
    Bug("draft_rollback_limited_to_max_rollback", "14.8", "refuses any rollback of more than max_rollback tokens "
        "and allows any other, instead of checking which tokens the window needs: it refuses a rollback into the "
        "sinks, and allows one after an earlier rollback used the margin up",
        old=ROLLBACK_CHECK, new="if n > self.capacity - self.window:"),
    Bug("draft_refuses_rollback_into_the_sinks", "14.8", "refuses a rollback whose shorter sequence lies within the "
        "sinks, where the window shows no token at all", old=ROLLBACK_CHECK, new="if first_shown < self.lowest:"),
    Bug("draft_shows_ring_order", "14.8", "returns the window in the ring's slot order instead of position order",
        old=SHOWN_SLOTS, new=SHOWN_SLOTS.replace("\n", "\n        slots = slots.sort().values\n", 1)),
    Bug("draft_float_positions", "14.8", "returns the positions as a float tensor instead of int64",
        old="return k, v, torch.cat([sinks, others])", new="return k, v, torch.cat([sinks, others]).double()"),
    Bug("draft_keeps_every_token", "14.8", "keeps every appended chunk beside the ring, in case a rollback needs "
        "it: the values are right, but the cache grows with the stream instead of holding num_sink + window + "
        "max_rollback tokens", old="        self.length += T\n",
        new="        self.length += T\n        self.__dict__.setdefault('kept', []).append((k.clone(), v.clone()))\n"),
    Bug("draft_accepts_another_dtype", "14.8", "does not compare a later append with the first one's H_kv, d and "
        "dtype, so a float32 chunk is silently cast into a float64 cache",
        old="        elif (H_kv, d, k.dtype) != (self.ring_k.shape[0], self.ring_k.shape[2], self.ring_k.dtype):\n",
        new="        elif False:\n"),
    Bug("draft_accepts_a_negative_rollback", "14.8", "does not check n, so rollback(-1) grows the sequence",
        old='        _check_int("n", n, 0)\n', new=""),
]

RULES: dict[str, dict[str, tuple[str, ...]]] = {
    "14.1": {
        "The result is a float64 tensor of shape (V,): a[x] = min(1, p[x] / q[x]), computed in float64.":
            ("accept_ratio_uncapped", "accept_ratio_inverted", "accept_in_input_dtype"),
        "Where q[x] == 0 the probability is 1: the draft never proposes x.": ("accept_zero_where_q_is_zero",),
        "Bad arguments raise the errors below, each naming the argument.": ("accept_skips_validation",),
    },
    "14.2": {
        "The result is a float64 tensor of shape (V,): max(0, p - q) divided by its sum, computed in float64.":
            ("residual_q_minus_p", "residual_not_normalised", "residual_unclipped"),
        "When max(0, p - q) is zero everywhere (p == q: no rejection can happen) the result is p, in float64.":
            ("residual_zero_when_p_equals_q",),
        "With a = acceptance_probs(p, q), the first emitted token's distribution q[x] a[x] + (1 - sum_y q[y] a[y]) "
        "r[x] equals p[x] within a total variation of 1e-12, zeros in p or in q included.":
            ("residual_is_p", "residual_q_minus_p", "residual_not_normalised"),
        "Bad arguments raise the errors below, each naming the argument.": ("residual_skips_validation",),
    },
    "14.3": {
        "Sequence b keeps draft_tokens[b, :n], n the length of the longest prefix whose tokens equal the argmax of "
        "their rows, and then appends argmax(target_logits[b, n]): the correction when n < gamma, the bonus token "
        "when n == gamma.": ("greedy_counts_every_match", "greedy_keeps_the_rejected_token", "greedy_forgets_the_bonus",
                             "greedy_bonus_from_the_last_draft_row"),
        "Ties in the argmax go to the lowest token id.": ("greedy_ties_to_the_highest_index",),
        "The result is a list of B lists of Python ints, each of 1 to gamma + 1 tokens; gamma may be 0.":
            ("greedy_returns_tensors", "greedy_forgets_the_bonus"),
        "Bad arguments raise the errors below, each naming the argument.": ("greedy_skips_row_check",),
    },
    "14.4": {
        "Drafted token i, x = draft_tokens[i], is accepted iff accept_uniforms[i] < min(1, p[i, x] / q[i, x]); the "
        "verification stops at the first rejection.": ("sampled_accepts_at_equality",),
        "After a rejection at i the result is draft_tokens[:i] followed by one token sampled from "
        "residual_distribution(p[i], q[i]) with sample_uniform.":
            ("sampled_resamples_from_p", "sampled_keeps_the_rejected_token"),
        "When all gamma drafted tokens are accepted, they are followed by a bonus token sampled from p[gamma] with "
        "sample_uniform.": ("sampled_forgets_the_bonus", "sampled_bonus_from_p_gamma_minus_1"),
        "Sampling from d with u takes the smallest t with u < cumsum(d)[t], the sum in float64, or the last t with "
        "d[t] > 0 when u is not below the rounded total.":
            ("sampled_cumsum_at_equality", "sampled_last_index_past_the_total"),
        "The result is a list of 1 to gamma + 1 Python ints.": ("sampled_returns_tensors", "sampled_forgets_the_bonus"),
        "A drafted token to which q gives probability 0 raises ValueError naming draft_tokens: the draft cannot have "
        "proposed it.": ("sampled_accepts_what_q_never_proposes",),
        "Bad arguments raise the errors below, each naming the argument.": ("sampled_skips_uniform_checks",),
    },
    "14.5": {
        "The result is a Python float within a relative 1e-12 of the exact mean (1e-6 for alpha within 1e-6 of 1).":
            ("tokens_alpha_to_the_gamma", "tokens_accepted_drafts_only", "tokens_int_at_one"),
        "alpha == 1 gives gamma + 1: every drafted token and the bonus.": ("tokens_divides_by_zero_at_one",),
        "Bad arguments raise the errors below, each naming the argument.": ("tokens_accepts_bad_alpha",),
    },
    "14.6": {
        "plain_step is seconds(N, 1), draft_step seconds(min(N, draft_budget), 1) and verify_step seconds(N, "
        "gamma + 1), with N = context_len.": ("speedup_draft_reads_the_whole_context", "speedup_verify_gamma_tokens",
                                              "speedup_adds_the_roofline"),
        "A forward pass reads the weights once, whatever batch_size and n, and each sequence's whole cache.":
            ("speedup_weights_per_sequence", "speedup_cache_without_new_tokens"),
        "tokens_per_verify is expected_tokens(alpha, gamma), and speedup = tokens_per_verify * plain_step / (gamma * "
        "draft_step + verify_step); gamma == 0 gives 1.":
            ("speedup_gamma_plus_one_draft_steps", "speedup_every_draft_accepted", "speedup_verify_gamma_tokens"),
        "The values are Python floats within a relative 1e-12.": ("speedup_torch_scalars",),
        "Bad arguments raise the errors below, each naming the argument.": ("speedup_accepts_a_zero_budget",),
    },
    "14.7": {
        "The sequence keeps its first ceil(new_len / page_size) pages: the page holding the last kept token stays.":
            ("rollback_floor_pages", "rollback_frees_the_last_kept_page"),
        "Each page after them loses one reference, and is freed only when its count reaches 0: a page another "
        "sequence still holds is never freed.": ("rollback_frees_shared_pages", "rollback_drops_only_freed_references"),
        "freed lists the freed page ids in block-table order.": ("rollback_freed_sorted",),
        "The results are new lists of Python ints; block_table and refcounts are left unmodified.":
            ("rollback_changes_refcounts_in_place",),
        "Bad arguments raise the errors below, each naming the argument.": ("rollback_skips_length_check",),
    },
    "14.8": {
        "Positions are 0, 1, 2, ... in the order appended; after rollback(n) the next append gets position len - n: "
        "positions never drift.": ("draft_rollback_keeps_the_length", "draft_rollback_to_n"),
        "keys_values() returns the first num_sink tokens of the sequence (all of them when it is shorter) and the "
        "last window of the others, in position order, with int64 positions.":
            ("draft_shows_ring_order", "draft_float_positions"),
        "rollback(n) forgets the last n tokens as if they had never been appended, and raises ValueError naming n "
        "when n > len or when a token the window would show after it is no longer held.":
            ("draft_rollback_past_the_evicted_tokens", "draft_rollback_limited_to_max_rollback",
             "draft_refuses_rollback_into_the_sinks"),
        "The cache holds the sinks and the last window + max_rollback of the other tokens, never more: its memory, "
        "measured from outside the notebook's process, stays bounded on a long stream of appends.":
            ("draft_keeps_every_token",),
        "An append with another H_kv, d or dtype than the first append's, or with k not 3-D, raises ValueError "
        "naming k.": ("draft_accepts_another_dtype",),
        "Bad arguments raise the errors below, each naming the argument.": ("draft_accepts_a_negative_rollback",),
    },
}
