"""Wrong implementations of Chapter 13 that the graders must reject.

The mistakes people make when they first write MLA from DeepSeek-V2's equations, fold
its weights, count its cache, and shard it across ranks: the scale of the wrong width,
RoPE where it cannot go, a weight transposed, a cache counted per head, a window that
outgrows its sequence, shards cut in pieces instead of dealt round-robin, and a
log-sum-exp merge that overflows.
"""

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    "13.1": "MLA from its definition",
    "13.2": "Weight absorption",
    "13.3": "FLOPs and bytes of one decode step",
    "13.4": "Caches shared across layers",
    "13.5": "What tensor parallelism duplicates",
    "13.6": "Decode context parallelism",
}

NAIVE_MASK = "scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], -math.inf)\n    return torch.softmax"
DCP_MASK = "    scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], -math.inf)\n    lse = torch.logsumexp"

BUGS = [
    # -- 13.1: the naive layer
    Bug("naive_scale_nope_only", "13.1", "divides the scores by sqrt(d_nope), the width of the part without position, "
        "instead of sqrt(d_nope + d_rope), the width of the whole query-key product",
        old="k.transpose(-1, -2) / math.sqrt(d_nope + d_rope)", new="k.transpose(-1, -2) / math.sqrt(d_nope)"),
    Bug("naive_query_rope_at_local_positions", "13.1", "rotates the queries at positions 0..N_q-1 instead of their "
        "real positions N - N_q .. N - 1 at the end of the sequence",
        old="q = torch.cat([q_nope, apply_rope(q_pe, q_pos)], dim=-1)",
        new="q = torch.cat([q_nope, apply_rope(q_pe, torch.arange(N_q))], dim=-1)"),
    Bug("naive_mask_local_indices", "13.1", "masks with the query's index among the queries (j > i) instead of its "
        "position in the sequence, so the last queries cannot see the cache before them",
        old=NAIVE_MASK, new=NAIVE_MASK.replace("k_pos[None, :] > q_pos[:, None]",
                                               "torch.arange(N)[None, :] > torch.arange(N_q)[:, None]")),
    Bug("naive_no_causal_mask", "13.1", "leaves out the causal mask, so a query sees the tokens after it",
        old=NAIVE_MASK, new="return torch.softmax"),
    Bug("naive_rope_on_the_nope_part_too", "13.1", "rotates the part of the keys and queries without position as "
        "well, which MLA keeps unrotated so that W_UK can be folded into the query",
        old="k = torch.cat([k_nope, k_rope], dim=-1)",
        new="k = torch.cat([apply_rope(k_nope, k_pos), k_rope], dim=-1)\n"
            "    q = torch.cat([apply_rope(q_nope, q_pos), q[..., d_nope:]], dim=-1)"),
    Bug("naive_key_rope_not_rotated", "13.1", "uses the shared RoPE key as it is cached, without rotating it to its "
        "position, so the score no longer depends on the distance between query and key",
        old="k_rope = apply_rope(k_pe, k_pos)[:, None].expand(B, H, N, d_rope)",
        new="k_rope = k_pe[:, None].expand(B, H, N, d_rope)"),
    # -- 13.2: absorption
    Bug("absorbed_rope_before_absorption", "13.2", "rotates the query's part without position before folding W_UK "
        "into it: a rotation that depends on the position cannot pass through the latent keys, which are never rotated",
        old="    q_lat = torch.einsum(", new="    q_nope = apply_rope(q_nope, q_pos)\n    q_lat = torch.einsum("),
    Bug("absorbed_scale_latent_width", "13.2", "divides the scores by the square root of the absorbed head's width "
        "r + d_rope instead of the width the model was trained with, d_nope + d_rope: folding W_UK changes the "
        "shapes, not the scores",
        old="/ math.sqrt(d_nope + q_pe.shape[-1])", new="/ math.sqrt(q.shape[-1])"),
    Bug("absorbed_w_uk_transposed", "13.2", "folds W_UK into the query transposed (w_uk[h] q instead of w_uk[h]^T q)",
        old='torch.einsum("bhqd,hdr->bhqr", q_nope, w_uk)', new='torch.einsum("bhqd,hrd->bhqr", q_nope, w_uk)'),
    Bug("absorbed_w_uv_transposed", "13.2", "applies W_UV to the attended latent transposed (w_uv[h]^T o instead of "
        "w_uv[h] o)",
        old='torch.einsum("bhqr,hvr->bhqv", o_lat, w_uv)', new='torch.einsum("bhqr,hrv->bhqv", o_lat, w_uv)'),
    Bug("absorbed_output_through_w_uk", "13.2", "brings the attended latent back to the head's width with W_UK "
        "instead of W_UV: the output belongs to the values' up-projection",
        old='torch.einsum("bhqr,hvr->bhqv", o_lat, w_uv)', new='torch.einsum("bhqr,hvr->bhqv", o_lat, w_uk)'),
    Bug("absorbed_value_includes_rope", "13.2", "attends over the whole cache row as the value, RoPE channels "
        "included, where the value is the latent alone",
        old="o_lat = torch.softmax(scores, dim=-1) @ kv[..., :r]", new="o_lat = torch.softmax(scores, dim=-1) @ kv"),
    Bug("absorbed_forgets_rope_score", "13.2", "scores with the latent channels only and drops the RoPE part of the "
        "score, so the attention no longer sees positions",
        old="scores = q @ kv.transpose(-1, -2)", new="scores = q[..., :r] @ kv[..., :r].transpose(-1, -2)"),
    # -- 13.3: costs
    Bug("cost_latent_bytes_per_head", "13.3", "counts the latent cache once per query head, as if every head had its "
        "own; one latent per token serves all heads",
        old="cache_bytes = N * (r + d_rope) * dtype_bytes", new="cache_bytes = H * N * (r + d_rope) * dtype_bytes"),
    Bug("cost_rope_key_per_head", "13.3", "counts a RoPE key per head in the cache, as multi-head attention would "
        "store one; MLA's RoPE key is shared by every head, like its latent",
        old="cache_bytes = N * (r + d_rope) * dtype_bytes", new="cache_bytes = N * (r + H * d_rope) * dtype_bytes"),
    Bug("cost_bytes_forget_rope", "13.3", "counts only the latent in the cache and forgets the RoPE key stored "
        "beside it (d_rope numbers per token)",
        old="cache_bytes = N * (r + d_rope) * dtype_bytes", new="cache_bytes = N * r * dtype_bytes"),
    Bug("cost_naive_up_projection_per_query", "13.3", "repeats the up-projection of the cache for every query token; "
        "it is done once per step, whatever the number of queries",
        old="up_projection = 2 * N * r * H * (d_nope + d_v)", new="up_projection = 2 * s * N * r * H * (d_nope + d_v)"),
    Bug("cost_naive_forgets_up_projection", "13.3", "leaves out the up-projection of every cached latent to keys and "
        "values, the term that makes naive decode expensive",
        old="up_projection = 2 * N * r * H * (d_nope + d_v)", new="up_projection = 0"),
    Bug("cost_absorbed_scores_nope_width", "13.3", "counts the absorbed scores over d_nope + d_rope channels; after "
        "the fold they run over the latent's r + d_rope",
        old="attention = 2 * s * H * N * (r + d_rope) + 2 * s * H * N * r",
        new="attention = 2 * s * H * N * (d_nope + d_rope) + 2 * s * H * N * r"),
    Bug("cost_gqa_counts_only_k", "13.3", "counts only the keys of the GQA cache, not the values",
        old="return 2 * s * H * N * d * 2, 2 * N * H_kv * d * dtype_bytes",
        new="return 2 * s * H * N * d * 2, N * H_kv * d * dtype_bytes"),
    # -- 13.4: a mixed stack
    Bug("stack_sliding_not_capped", "13.4", "counts a sliding layer's whole window even when the sequence is shorter "
        "than the window", old='min(layer["window"], seq_len)', new='layer["window"]'),
    Bug("stack_shared_counted_twice", "13.4", "counts a shared layer's cache again, though it reads its source's",
        old="numbers.append(0)  # it reads the source's keys and values", new="numbers.append(numbers[source])"),
    Bug("stack_recurrent_grows_with_tokens", "13.4", "multiplies a recurrent layer's state by the number of tokens; "
        "the state has one size whatever the length",
        old='numbers.append(layer["num_heads"] * layer["key_dim"] * layer["value_dim"])',
        new='numbers.append(layer["num_heads"] * layer["key_dim"] * layer["value_dim"] * seq_len)'),
    Bug("stack_latent_counts_k_and_v", "13.4", "counts the latent twice, once for K and once for V; one latent "
        "serves as both",
        old='numbers.append((layer["kv_lora_rank"] + layer["rope_head_dim"]) * seq_len)',
        new='numbers.append(2 * (layer["kv_lora_rank"] + layer["rope_head_dim"]) * seq_len)'),
    # -- 13.5: tensor parallelism
    Bug("rank_heads_floored", "13.5", "gives each rank H_kv // tp_size KV heads, which is 0 when there are more ranks "
        "than KV heads; a rank always needs a whole head",
        old="per_token = 2 * max(1, H_kv // tp_size) * d", new="per_token = 2 * (H_kv // tp_size) * d"),
    Bug("rank_mla_latent_split", "13.5", "splits MLA's latent across the ranks like heads; every head reads the "
        "whole latent, so every rank holds all of it",
        old='per_token = _config_int(config, "kv_lora_rank") + _config_int(config, "qk_rope_head_dim")',
        new='per_token = (_config_int(config, "kv_lora_rank") + _config_int(config, "qk_rope_head_dim")) // tp_size'),
    Bug("rank_contiguous_shards", "13.5", "gives each rank a contiguous piece of ceil(N / P) tokens instead of "
        "dealing token i to rank i mod P",
        old="tokens = [len(range(t % dcp_size, seq_len, dcp_size)) for t in range(tp_size)]",
        new="chunk = -(-seq_len // dcp_size)\n"
            "    tokens = [max(0, min(chunk, seq_len - (t % dcp_size) * chunk)) for t in range(tp_size)]"),
    Bug("rank_tokens_floored", "13.5", "gives every rank seq_len // dcp_size tokens and loses the remainder",
        old="tokens = [len(range(t % dcp_size, seq_len, dcp_size)) for t in range(tp_size)]",
        new="tokens = [seq_len // dcp_size for t in range(tp_size)]"),
    # -- 13.6: decode context parallelism on gloo
    Bug("dcp_merge_without_max", "13.6", "merges with exp(lse_r) as written, without subtracting the largest lse "
        "first, which overflows to inf for large logits",
        old="m = lse_all.amax(dim=0)", new="m = torch.zeros_like(lse_all[0])"),
    Bug("dcp_average_outputs", "13.6", "averages the ranks' partial outputs instead of weighting them by their "
        "softmax mass exp(lse_r)",
        old="merged = (w[..., None] * torch.stack(outs)).sum(dim=0) / total[..., None]",
        new="merged = torch.stack(outs).mean(dim=0)"),
    Bug("dcp_weights_not_normalised", "13.6", "weights the partial outputs by exp(lse_r - m) without dividing by "
        "their sum", old="(w[..., None] * torch.stack(outs)).sum(dim=0) / total[..., None]",
        new="(w[..., None] * torch.stack(outs)).sum(dim=0)"),
    Bug("dcp_contiguous_positions", "13.6", "takes the rank's rows for a contiguous piece of the sequence instead of "
        "the positions rank, rank + P, ..., so the causal mask hides the wrong keys",
        old="k_pos = torch.arange(rank, seq_len, world_size)  # token i lives on rank i mod P",
        new="n_r = len(range(rank, seq_len, world_size))\n    k_pos = torch.arange(rank * n_r, (rank + 1) * n_r)"),
    Bug("dcp_no_causal_mask", "13.6", "leaves out the causal mask, so the earlier of several queries see the later "
        "tokens", old=DCP_MASK, new="    lse = torch.logsumexp"),
    Bug("dcp_returns_local_lse", "13.6", "returns the merged output with the rank's own partial log-sum-exp instead "
        "of the merged one", old="return merged, m + torch.log(total)", new="return merged, lse"),
]
