"""Wrong implementations of Chapter 13 that the graders must reject.

The mistakes people make when they first write MLA from DeepSeek-V2's equations, fold
its weights, count its cache, and shard it across ranks: the scale of the wrong width,
RoPE where it cannot go, a weight transposed, a cache counted per head, a window that
outgrows its sequence, shards cut in pieces instead of dealt round-robin, and a
log-sum-exp merge that overflows.

``RULES`` maps every bullet under "Graded rules:" in each exercise's docstring to the bugs
that break it, so that no stated rule is left without a graded case that fails on it.
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
POSITIONS = "q_pos, k_pos = torch.arange(N - N_q, N), torch.arange(N)"
MLA_CHECK = "    _check_mla(q_nope, q_pe, c_kv, k_pe, w_uk, w_uv)\n"
# What a student who never thought of absorption writes in 13.2: 13.1's keys and values, built per head.
UP_PROJECTED = """\
_check_mla(q_nope, q_pe, c_kv, k_pe, w_uk, w_uv)
B, H, N_q, d_nope = q_nope.shape
N, d_rope = c_kv.shape[1], q_pe.shape[-1]
q_pos, k_pos = torch.arange(N - N_q, N), torch.arange(N)
k = torch.cat([torch.einsum("bnr,hdr->bhnd", c_kv, w_uk),
               apply_rope(k_pe, k_pos)[:, None].expand(B, H, N, d_rope)], dim=-1)
v = torch.einsum("bnr,hvr->bhnv", c_kv, w_uv)
q = torch.cat([q_nope, apply_rope(q_pe, q_pos)], dim=-1)
scores = q @ k.transpose(-1, -2) / math.sqrt(d_nope + d_rope)
scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], -math.inf)
return torch.softmax(scores, dim=-1) @ v
"""

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
    Bug("naive_query_positions_local", "13.1", "places the queries at positions 0..N_q-1, for their rotation and "
        "for the mask alike, instead of at the end of the sequence, N - N_q .. N - 1: a decoded token then sees "
        "only the start of the cache, rotated as if it were there",
        old=POSITIONS, new="q_pos, k_pos = torch.arange(N_q), torch.arange(N)"),
    Bug("naive_skips_validation", "13.1", "checks none of its arguments, so a tensor of the wrong shape fails deep "
        "inside the computation (or not at all) with a message that does not name it",
        old=MLA_CHECK, new=""),
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
    Bug("absorbed_query_positions_local", "13.2", "places the queries at positions 0..N_q-1, for their rotation "
        "and for the mask alike, instead of at the end of the sequence, N - N_q .. N - 1",
        old=POSITIONS, new="q_pos, k_pos = torch.arange(N_q), torch.arange(N)"),
    Bug("absorbed_up_projects_the_cache", "13.2", "builds every head's keys and values from the latent cache, as "
        "Exercise 13.1 does, instead of attending over the latents: the right result, at the memory and the work "
        "of multi-head attention", code=UP_PROJECTED),
    Bug("absorbed_skips_validation", "13.2", "folds the weights without checking the arguments first, so a tensor "
        "of the wrong shape fails inside an einsum (or not at all) with a message that does not name it",
        old=MLA_CHECK, new=""),
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
    Bug("cost_gqa_flops_per_kv_head", "13.3", "counts GQA's attention once per KV head; every query head computes "
        "its own scores and its own weighted sum, G of them over each KV head",
        old="return 2 * s * H * N * d * 2, 2 * N * H_kv * d * dtype_bytes",
        new="return 2 * s * H_kv * N * d * 2, 2 * N * H_kv * d * dtype_bytes"),
    Bug("cost_naive_scores_forget_rope", "13.3", "counts the naive scores over the d_nope channels of the "
        "up-projected keys only and forgets their d_rope RoPE channels",
        old="attention = 2 * s * H * N * (d_nope + d_rope) + 2 * s * H * N * d_v",
        new="attention = 2 * s * H * N * d_nope + 2 * s * H * N * d_v"),
    Bug("cost_absorbed_forgets_folds", "13.3", "counts only the attention of the absorbed form and leaves out the "
        "folds of W_UK into every query and of W_UV onto every output",
        old="fold = 2 * s * H * d_nope * r + 2 * s * H * r * d_v", new="fold = 0"),
    Bug("cost_mla_sizes_unchecked", "13.3", "reads the latent's rank from the config without checking it, so a "
        "float there gives a float count instead of an error that names the key",
        old='r = _config_int(config, "kv_lora_rank")', new='r = config["kv_lora_rank"]'),
    Bug("cost_config_values_unchecked", "13.3", "reads the number of heads from the config without checking it, so "
        "a config of 0 heads gets a cost of 0 instead of an error that names the key",
        old='H = _config_int(config, "num_attention_heads")', new='H = config["num_attention_heads"]'),
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
    Bug("stack_dtype_bytes_unchecked", "13.4", "does not check dtype_bytes, so 0 bytes per number gives caches of "
        "0 bytes instead of an error that names it", old='    _check_int("dtype_bytes", dtype_bytes, 1)\n    if not '
        'isinstance(layers, list)', new="    if not isinstance(layers, list)"),
    Bug("stack_full_keys_only", "13.4", "counts only the keys of a full layer, not its values",
        old='numbers.append(2 * layer["num_kv_heads"] * layer["head_dim"] * seq_len)',
        new='numbers.append(layer["num_kv_heads"] * layer["head_dim"] * seq_len)'),
    Bug("stack_batch_size_ignored", "13.4", "counts one sequence whatever batch_size says",
        old="return [n * batch_size * dtype_bytes for n in numbers]", new="return [n * dtype_bytes for n in numbers]"),
    Bug("stack_negative_source_accepted", "13.4", "accepts a negative source and reads it from the end of the list, "
        "as Python's indexing does (source -2 is the layer before last), where a source is an index counted from 0",
        old='            _check_int(key, layer[key], 0 if key == "source" else 1)',
        new='            _check_int(key, layer[key], -len(layers) if key == "source" else 1)'),
    Bug("stack_shared_of_shared_accepted", "13.4", "lets a shared layer read another shared layer, which stores "
        "nothing to read", old='if source >= index or layers[source].get("kind") == "shared":',
        new="if source >= index:"),
    Bug("stack_layer_items_unchecked", "13.4", "checks that layers is a list but not that each layer is a dict, so "
        "a layer of another type fails on its first key with an error that does not name layers",
        old="    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):",
        new="    if not isinstance(layers, list):"),
    Bug("stack_batch_size_unchecked", "13.4", "does not check batch_size, so a batch of 0 sequences gets 0 bytes "
        "instead of an error that names it", old='    _check_int("batch_size", batch_size, 1)\n', new=""),
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
    Bug("rank_dcp_divides_tp", "13.5", "accepts any dcp_size that divides tp_size; the ranks that split the tokens "
        "must hold the same cache, so dcp_size divides the duplication factor, 1 for GQA with as many KV heads as "
        "ranks", old="if duplication % dcp_size:", new="if tp_size % dcp_size:"),
    Bug("rank_tp_divisibility_unchecked", "13.5", "accepts a tp_size that neither divides the number of KV heads nor "
        "is divided by it, where the heads cannot be split evenly",
        old='            raise ValueError(f"tp_size {tp_size}: one of num_key_value_heads {H_kv} and tp_size '
            'must divide the other")\n', new="            pass\n"),
    Bug("rank_dtype_bytes_unchecked", "13.5", "does not check dtype_bytes, so 0 bytes per number gives ranks of 0 "
        "bytes instead of an error that names it", old='    _check_int("dtype_bytes", dtype_bytes, 1)\n', new=""),
    Bug("rank_config_type_unchecked", "13.5", "reads the config without checking that it is a dict, so a list "
        "fails with an AttributeError that names no argument, where the statement says TypeError naming config",
        old='    if not isinstance(config, dict):\n'
            '        raise TypeError(f"config must be a dict, got {type(config).__name__}")\n'
            '    attention = config.get("attention")',
        new='    attention = config.get("attention")'),
    Bug("rank_config_read_unchecked", "13.5", "reads MLA's sizes from the config by indexing it, so a missing key "
        "raises a KeyError that names no argument, where the statement says ValueError naming config",
        old='per_token = _config_int(config, "kv_lora_rank") + _config_int(config, "qk_rope_head_dim")',
        new='per_token = config["kv_lora_rank"] + config["qk_rope_head_dim"]'),
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
    Bug("dcp_scale_from_row_width", "13.6", "divides the scores by the square root of the rows' width r + d_rope "
        "instead of multiplying them by the scale it is given, which is the model's 1/sqrt(d_nope + d_rope)",
        old="scores = (q @ kv[:, None].transpose(-1, -2)) * scale",
        new="scores = (q @ kv[:, None].transpose(-1, -2)) / math.sqrt(D)"),
    Bug("dcp_nan_on_empty_shard", "13.6", "normalises a rank's partial scores with a softmax even where a query sees "
        "none of the rank's rows: a softmax of nothing but -inf is NaN, and the merge turns every output NaN, "
        "where that partial result is an output of 0 with a log-sum-exp of -inf",
        old="weights = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse)[..., None])  # 0 where masked",
        new="weights = torch.softmax(scores, dim=-1)"),
    Bug("dcp_no_process_group_check", "13.6", "does not check for a process group, so without one it fails inside "
        "torch.distributed with its own error instead of the RuntimeError the statement names",
        old='    if not dist.is_available() or not dist.is_initialized():  # only the rows of this rank need '
            'the group\n'
            '        raise RuntimeError("dcp_attention needs an initialised torch.distributed process group")\n',
        new=""),
    Bug("dcp_skips_argument_checks", "13.6", "checks none of q, kv and seq_len, so a wrong argument fails inside "
        "the computation, or inside torch.distributed, with a message that does not name it",
        old='    _check_tensor("q", q, 4)\n    _check_tensor("kv", kv, 3)\n    _check_int("seq_len", seq_len, 1)\n',
        new=""),
]


# Each exercise's "Graded rules:" bullets, verbatim, and the bugs that break each.
RULES: dict[str, dict[str, tuple[str, ...]]] = {
    "13.1": {
        "Query i sits at position N - N_q + i: its RoPE part is rotated there, and it sees the keys at positions "
        "<= N - N_q + i.": ("naive_query_rope_at_local_positions", "naive_mask_local_indices", "naive_no_causal_mask",
                            "naive_query_positions_local"),
        "Head h's key for token j is [w_uk[h] @ c_kv[b, j], k_pe[b, j] rotated to position j]; its value is "
        "w_uv[h] @ c_kv[b, j].": ("naive_key_rope_not_rotated",),
        "Only the RoPE parts are rotated: q_nope and the up-projected keys enter the scores as they are.":
            ("naive_rope_on_the_nope_part_too",),
        "The scores are divided by sqrt(d_nope + d_rope), the width of the whole query-key product.":
            ("naive_scale_nope_only",),
        "Bad arguments raise the errors below, each naming the argument.": ("naive_skips_validation",),
    },
    "13.2": {
        "The result is mla_attention_naive's: the same positions, causal mask, rotations and scale "
        "1/sqrt(d_nope + d_rope).": ("absorbed_query_positions_local", "absorbed_rope_before_absorption",
                                     "absorbed_scale_latent_width", "absorbed_forgets_rope_score"),
        "w_uk and w_uv keep their meaning: head h's key part is w_uk[h] @ c_kv[b, j] and its value "
        "w_uv[h] @ c_kv[b, j].": ("absorbed_w_uk_transposed", "absorbed_w_uv_transposed",
                                  "absorbed_output_through_w_uk"),
        "The value is the latent alone: the RoPE key takes part in the scores only.":
            ("absorbed_value_includes_rope",),
        "On float32 inputs whose up-projected keys alone would be 128 MiB, the call uses at most 80 MiB "
        "(measured outside).": ("absorbed_up_projects_the_cache",),
        "Bad arguments raise the errors below, each naming the argument.": ("absorbed_skips_validation",),
    },
    "13.3": {
        '"naive" up-projects every cached latent to every head\'s key part and value, once per step whatever s.':
            ("cost_naive_up_projection_per_query", "cost_naive_forgets_up_projection"),
        '"naive" attention scores keys of d_nope + d_rope channels and sums values of d_v channels.':
            ("cost_naive_scores_forget_rope",),
        '"absorbed" folds w_uk into every query and w_uv onto every output, for each query token and head.':
            ("cost_absorbed_forgets_folds",),
        '"absorbed" attention scores cache rows of r + d_rope channels and sums their r latent channels.':
            ("cost_absorbed_scores_nope_width",),
        '"gqa" attention runs every query head, not every KV head, over keys and values of d channels.':
            ("cost_gqa_flops_per_kv_head",),
        "MLA reads r + d_rope numbers per cached token, shared by every head; GQA reads K and V of its H_kv heads.":
            ("cost_latent_bytes_per_head", "cost_rope_key_per_head", "cost_bytes_forget_rope",
             "cost_gqa_counts_only_k"),
        "Bad arguments raise the errors below, each naming the argument.": ("cost_config_values_unchecked",
                                                                            "cost_mla_sizes_unchecked"),
    },
    "13.4": {
        "A full layer keeps the keys and values of its KV heads for every token.": ("stack_full_keys_only",),
        "A sliding layer keeps the keys and values of its last window tokens, never of more tokens than the "
        "sequence has.":
            ("stack_sliding_not_capped",),
        "A latent layer keeps one latent and one RoPE key per token, one copy for all its heads.":
            ("stack_latent_counts_k_and_v",),
        "A shared layer keeps nothing: it reads the cache of layer source, which is counted once, in that layer.":
            ("stack_shared_counted_twice",),
        "A recurrent layer keeps one state of num_heads x key_dim x value_dim numbers per sequence, whatever "
        "seq_len.": ("stack_recurrent_grows_with_tokens",),
        "Every count is for batch_size sequences, in bytes of dtype_bytes.": ("stack_batch_size_ignored",),
        "source is the index, counted from 0, of an earlier layer that is not shared; a negative source is an "
        "error.": ("stack_negative_source_accepted", "stack_shared_of_shared_accepted"),
        "Bad arguments raise the errors below, each naming the argument.": ("stack_batch_size_unchecked",
                                                                            "stack_layer_items_unchecked",
                                                                            "stack_dtype_bytes_unchecked"),
    },
    "13.5": {
        "Under GQA a rank holds K and V of the KV heads its query heads read: at least one whole KV head.":
            ("rank_heads_floored",),
        "Under MLA every rank holds the whole latent and RoPE key of its tokens: every head reads all of it.":
            ("rank_mla_latent_split",),
        "Rank t holds the tokens i with i % dcp_size == t % dcp_size: dealt round-robin, every token on some rank.":
            ("rank_contiguous_shards", "rank_tokens_floored"),
        "dcp_size divides D, and one of tp_size and H_kv divides the other: anything else is an error.":
            ("rank_dcp_divides_tp", "rank_tp_divisibility_unchecked"),
        "Bad arguments raise the errors below, each naming the argument.": ("rank_config_read_unchecked",
                                                                            "rank_config_type_unchecked",
                                                                            "rank_dtype_bytes_unchecked"),
    },
    "13.6": {
        "out and lse are those of the whole cache: every rank's rows, each at its own position for the causal "
        "mask.": ("dcp_contiguous_positions", "dcp_no_causal_mask", "dcp_average_outputs",
                  "dcp_weights_not_normalised"),
        "The scores are multiplied by scale as given (the model's), not by 1/sqrt(D) of the rows' width.":
            ("dcp_scale_from_row_width",),
        "Scores of a few hundred, whose exponential overflows float32, still give finite, exact results.":
            ("dcp_merge_without_max",),
        "A rank may hold no row that a query sees, or no row at all (seq_len < P): the result is still the whole "
        "cache's.": ("dcp_nan_on_empty_shard",),
        "Every rank returns the log-sum-exp over the whole cache, not the one over its own rows.":
            ("dcp_returns_local_lse",),
        "q, kv, seq_len and kv_lora_rank are checked before the process group: bad ones raise the errors below, "
        "each naming the argument, with or without a group.": ("dcp_skips_argument_checks",),
        "Without an initialised process group the call raises RuntimeError.": ("dcp_no_process_group_check",),
    },
}
