"""Wrong implementations of Chapter 4 that the graders must reject."""

from dataclasses import replace

from grading.notebook.catalogue import Bug

# Each bug runs only against the graders of its own exercise (and the ones that
# build on it), which keeps `pytest --prove` to a few seconds.
GRADERS = {"4.1": "sliding_window_mask", "4.2": "test_ring", "4.3": "test_sink_cache",
           "4.4": "apply_rope", "4.5": "rope_decode_step"}

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '4.1': 'Prefill: the sliding-window causal mask',
    '4.2': 'A ring buffer',
    '4.3': 'Attention sinks',
    '4.4': 'Where positions live',
    '4.5': 'Where positions live',
}

BUGS = [
    # 4.1: the sliding-window mask
    Bug("window_off_by_one", "4.1", "lets each query see window + 1 keys (distance <= window)",
        old="(distance < window)", new="(distance <= window)"),
    Bug("queries_aligned_to_the_start", "4.1", "puts query i at position i, which is wrong whenever q_len < kv_len",
        old="q_pos = torch.arange(kv_len - q_len, kv_len)[:, None]", new="q_pos = torch.arange(q_len)[:, None]"),
    Bug("sinks_see_the_future", "4.1", "lets every query see the sinks, even sinks after its own position",
        old="return (distance >= 0) & ((distance < window) | (k_pos < num_sink))",
        new="return ((distance >= 0) & (distance < window)) | (k_pos < num_sink)"),
    # 4.2: the ring buffer
    Bug("ring_wrong_order_after_wrap", "4.2",
        "returns the buffer in slot order, so after a wrap the newest tokens come first",
        old="k = torch.cat([self.k[:, :, oldest:], self.k[:, :, :oldest]], dim=2)", new="k = self.k"),
    Bug("ring_rolled_the_wrong_way", "4.2", "rolls the buffer by +oldest instead of -oldest",
        old="""        k = torch.cat([self.k[:, :, oldest:], self.k[:, :, :oldest]], dim=2)  # (B, H_kv, W, d)
        v = torch.cat([self.v[:, :, oldest:], self.v[:, :, :oldest]], dim=2)  # (B, H_kv, W, d)""",
        new="""        k = torch.roll(self.k, oldest, dims=2)
        v = torch.roll(self.v, oldest, dims=2)"""),
    Bug("ring_is_concatenate_and_slice", "4.2", "keeps the right tokens but reallocates the window on every append",
        old="""        self.k[:, :, slot:slot + first] = k[:, :, :first]
        self.v[:, :, slot:slot + first] = v[:, :, :first]
        self.k[:, :, :n - first] = k[:, :, first:]  # the rest wraps to the front
        self.v[:, :, :n - first] = v[:, :, first:]""",
        new="""        self.k = torch.cat([self.k, k], dim=2)[:, :, -W:].clone()
        self.v = torch.cat([self.v, v], dim=2)[:, :, -W:].clone()"""),
    Bug("ring_long_chunk_positions_not_shifted", "4.2",
        "drops all but the last W tokens of a long chunk but writes them where the chunk started",
        old="            start += T - W\n", new=""),
    Bug("ring_positions_off_by_one", "4.2", "reports positions one too early after the window fills",
        old="return torch.arange(max(0, self.num_seen - self.window), self.num_seen)",
        new="return torch.arange(max(0, self.num_seen - self.window - 1), self.num_seen - 1 if self.num_seen > "
            "self.window else self.num_seen)"),
    # 4.3: the sink cache
    Bug("sinks_evicted", "4.3", "keeps the sinks in the same ring as the window, so they are overwritten once it wraps",
        old="to_sinks = max(0, min(T, self.num_sink - self.num_seen))", new="to_sinks = 0"),
    Bug("sinks_only_from_the_first_chunk", "4.3",
        "fills the sinks from the first chunk only, so a short first chunk leaves sinks empty",
        old="to_sinks = max(0, min(T, self.num_sink - self.num_seen))",
        new="to_sinks = min(T, self.num_sink) if self.num_seen == 0 else 0"),
    Bug("sink_positions_not_offset", "4.3", "reports the ring's positions without the sinks before them",
        old="self.recent.positions() + self.num_sink", new="self.recent.positions()"),
    # 4.4: RoPE
    Bug("rope_interleaved_pairs", "4.4",
        "rotates adjacent pairs (2i, 2i+1), the GPT-J pairing, instead of (i, i + d/2)",
        old="x1, x2 = x[..., :half], x[..., half:]  # (..., T, d/2)",
        new="x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d/2)"),
    Bug("rope_angles_in_float32", "4.4", "computes the angles in float32, which drift at large positions",
        old="angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]",
        new="angles = (positions.to(torch.float32)[:, None] * inv_freq.float()[None, :]).double()"),
    Bug("rope_sin_sign_flipped", "4.4", "rotates by -p theta (the transpose of the rotation)",
        old="[x1 * cos - x2 * sin, x2 * cos + x1 * sin]", new="[x1 * cos + x2 * sin, x2 * cos - x1 * sin]"),
    # 4.5: positions and the cache
    Bug("rope_applied_twice", "4.5",
        "rotates the cached keys again at read time, though they were rotated before caching",
        old="keys, values = cache.keys_values()  # (B, H_kv, C, d), already rotated",
        new="keys, values = cache.keys_values()\n        keys = apply_rope(keys, cache.positions(), base)"),
    Bug("pre_rope_absolute_positions", "4.5",
        "rotates by absolute positions in the pre-RoPE cache, so sinks sit far beyond the trained distances",
        old="""    keys = apply_rope(keys, torch.arange(C), base)  # positions within the cache
    return attend(apply_rope(q, torch.tensor([C - 1]), base), keys, values)""",
        new="""    keys = apply_rope(keys, cache.positions(), base)
    return attend(apply_rope(q, torch.tensor([pos]), base), keys, values)"""),
    Bug("pre_rope_query_one_past_the_end", "4.5", "rotates the query at C instead of C - 1, one step past its own key",
        old="apply_rope(q, torch.tensor([C - 1]), base)", new="apply_rope(q, torch.tensor([C]), base)"),
    Bug("post_rope_key_not_rotated", "4.5", "caches the raw key and rotates only the query",
        old="cache.append(apply_rope(k, torch.tensor([pos]), base), v)", new="cache.append(k, v)"),
]
BUGS = [replace(bug, tests=GRADERS[bug.exercise]) for bug in BUGS]
