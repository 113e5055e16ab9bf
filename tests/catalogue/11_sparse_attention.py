"""Wrong implementations of Chapter 11 that the graders must reject: the mistakes people
make when they first write top-k masses, eviction scores, page bounds and block gates."""

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '11.1': 'Attention is sparse: measure it',
    '11.2': 'Eviction at prompt time: H2O',
    '11.3': 'Eviction at prompt time: SnapKV',
    '11.4': 'Selection at decode time: Quest',
    '11.5': 'Selection at decode time: Quest',
    '11.6': 'Reading the selected pages',
    '11.7': 'Trained selection: MoBA, NSA and DSA',
    '11.8': 'Trained selection: MoBA, NSA and DSA',
    '11.9': 'Trained selection: MoBA, NSA and DSA',
}

BUGS = [
    # 11.1: top-k mass
    Bug("mass_softmax_before_mask", "11.1",
        "takes the softmax over every key and masks afterwards, so hidden keys still take their share of the mass",
        old="""    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    p = torch.softmax(s, dim=-1)  # (..., N_q, N_k); masked keys get exactly 0""",
        new="""    p = torch.softmax(s, dim=-1)  # (..., N_q, N_k)
    if mask is not None:
        p = p.masked_fill(~mask, 0.0)"""),
    Bug("mass_softmax_over_queries", "11.1",
        "takes the softmax over the queries (dim=-2) instead of over each query's keys, so a row's probabilities do "
        "not sum to 1",
        old="p = torch.softmax(s, dim=-1)  # (..., N_q, N_k); masked keys get exactly 0",
        new="p = torch.softmax(s, dim=-2)  # (..., N_q, N_k)"),
    Bug("mass_topk_of_scores_not_probabilities", "11.1",
        "adds up the k largest raw scores instead of their softmax probabilities",
        old="top = p.topk(min(k, N_k), dim=-1).values  # (..., N_q, k)",
        new="top = s.masked_fill(s == -math.inf, 0.0).topk(min(k, N_k), dim=-1).values  # (..., N_q, k)"),
    # 11.2: H2O
    Bug("h2o_no_causal_mask", "11.2", "lets every query vote for every key, the future ones included (no causal mask)",
        old="p = p.masked_fill(keys[None, :] > rows[:, None], 0.0)  # causal: query i sees keys j <= i",
        new="pass"),
    Bug("h2o_tile_softmax", "11.2",
        "normalises each tile's scores with the tile's own softmax instead of the given lse",
        old="p = torch.exp(s - lse[:, :, rows, None])  # (B, H, T, N): probabilities from the given lse\n"
            "        p = p.masked_fill(keys[None, :] > rows[:, None], 0.0)  # causal: query i sees keys j <= i",
        new="p = torch.softmax(s.masked_fill(keys[None, :] > rows[:, None], -math.inf), dim=-1)  # (B, H, T, N)"),
    Bug("h2o_lse_base2", "11.2", "takes the lse as a base-2 log (exp2), as Triton's tutorial stores it",
        old="p = torch.exp(s - lse[:, :, rows, None])", new="p = torch.exp2(s - lse[:, :, rows, None])"),
    Bug("h2o_mask_strict", "11.2", "hides a key from its own query (j < i instead of j <= i), losing the diagonal",
        old="p = p.masked_fill(keys[None, :] > rows[:, None], 0.0)",
        new="p = p.masked_fill(keys[None, :] >= rows[:, None], 0.0)"),
    # 11.3: SnapKV
    Bug("snapkv_no_pooling", "11.3",
        "keeps the raw votes without the max-pool, so the neighbours of a chosen token are lost",
        old="pooled = padded.unfold(-1, kernel_size, 1).amax(dim=-1)  # (B, H_kv, N - w)", new="pooled = votes"),
    Bug("snapkv_window_scores_itself", "11.3",
        "lets the window's own keys compete for the budget, so window tokens are chosen twice and prompt tokens are "
        "lost",
        old="votes = torch.softmax(s, dim=-1).sum(dim=2)[..., : N - w]  # (B, H_kv, N - w): candidates only",
        new="votes = torch.softmax(s, dim=-1).sum(dim=2)[..., w:]  # (B, H_kv, N - w)"),
    Bug("snapkv_per_query_head", "11.3",
        "chooses with the votes of the first query head of each group instead of the whole group's under GQA",
        old="votes = torch.softmax(s, dim=-1).sum(dim=2)[..., : N - w]",
        new="votes = torch.softmax(s, dim=-1)[:, :, :w].sum(dim=2)[..., : N - w]"),
    Bug("snapkv_ties_to_later_position", "11.3", "breaks ties between equal votes in favour of the later position",
        old="order = torch.sort(pooled, dim=-1, descending=True, stable=True).indices  # ties: lower position first",
        new="order = (pooled.shape[-1] - 1) - torch.sort(pooled.flip(-1), dim=-1, descending=True, "
            "stable=True).indices"),
    Bug("snapkv_no_causal_mask", "11.3",
        "lets each window query see the window tokens after it (no causal mask in the window)",
        old="s = s.masked_fill(torch.arange(N)[None, :] > q_pos[:, None], -math.inf)", new="pass"),
    Bug("snapkv_group_positions_interleaved", "11.3",
        "gives the grouped query heads' rows their window positions in the wrong order (repeat_interleave where the "
        "rows run head by head), so under GQA a query is masked as if it stood elsewhere in the window",
        old="q_pos = torch.arange(N - w, N).repeat(G)", new="q_pos = torch.arange(N - w, N).repeat_interleave(G)"),
    Bug("snapkv_pools_window_votes", "11.3",
        "max-pools the votes of every position and only then cuts off the window, so the window's own votes leak into "
        "the last candidates",
        old="""votes = torch.softmax(s, dim=-1).sum(dim=2)[..., : N - w]  # (B, H_kv, N - w): candidates only
    r = kernel_size // 2
    padded = torch.nn.functional.pad(votes, (r, r), value=-math.inf)  # (B, H_kv, N - w + 2r)
    pooled = padded.unfold(-1, kernel_size, 1).amax(dim=-1)  # (B, H_kv, N - w)""",
        new="""votes = torch.softmax(s, dim=-1).sum(dim=2)  # (B, H_kv, N)
    r = kernel_size // 2
    padded = torch.nn.functional.pad(votes, (r, r), value=-math.inf)  # (B, H_kv, N + 2r)
    pooled = padded.unfold(-1, kernel_size, 1).amax(dim=-1)[..., : N - w]  # (B, H_kv, N - w)"""),
    Bug("snapkv_heads_grouped_modulo", "11.3",
        "splits the H query heads as (G, H_kv) instead of (H_kv, G), so KV head j counts the votes of heads j, j + "
        "H_kv, j + 2 H_kv, ... (h % H_kv) instead of its own G consecutive heads",
        old="q_rows = q_obs.to(torch.float64).reshape(B, H_kv, G * w, d)",
        new="q_rows = q_obs.to(torch.float64).reshape(B, G, H_kv, w, d).transpose(1, 2).reshape(B, H_kv, G * w, d)",
        kind="heads_grouped_modulo"),
    Bug("snapkv_topk_ties", "11.3",
        "takes the candidates with torch.topk, which returns equal pooled votes in no fixed order (neither the lower "
        "nor the higher position first), where a tie goes to the lower position",
        old="""    order = torch.sort(pooled, dim=-1, descending=True, stable=True).indices  # ties: lower position first
    chosen = order[..., : budget - w]  # (B, H_kv, budget - w)""",  # noqa: E501
        new="""    chosen = pooled.topk(budget - w, dim=-1).indices  # (B, H_kv, budget - w)"""),
    Bug("snapkv_window_one_position_early", "11.3",
        "places the window's queries at N - w - 1 .. N - 2, one position early, so no query sees its own key",
        old="q_pos = torch.arange(N - w, N).repeat(G)", new="q_pos = torch.arange(N - w - 1, N - 1).repeat(G)"),
    # 11.4: page bounds
    Bug("quest_bound_from_max_only", "11.4", "uses q . max alone, which is not an upper bound where q is negative",
        old="u = qq.clamp_min(0) @ hi + qq.clamp_max(0) @ lo  # (B, H_kv, G, P)", new="u = qq @ hi  # (B, H_kv, G, P)"),
    Bug("quest_bound_min_of_products", "11.4",
        "takes min(q m, q M) per channel: a lower bound, the sign convention upside down",
        old="u = qq.clamp_min(0) @ hi + qq.clamp_max(0) @ lo  # (B, H_kv, G, P)",
        new="u = qq.clamp_min(0) @ lo + qq.clamp_max(0) @ hi  # (B, H_kv, G, P)"),
    Bug("quest_bound_abs_q", "11.4",
        "multiplies |q| by max |k|, an upper bound but a loose one: not the bound of the statement",
        old="u = qq.clamp_min(0) @ hi + qq.clamp_max(0) @ lo  # (B, H_kv, G, P)",
        new="u = qq.abs() @ torch.maximum(lo.abs(), hi.abs())  # (B, H_kv, G, P)"),
    Bug("page_bounds_zero_padding", "11.4",
        "pads the last partial page with zeros, so its min and max count keys that do not exist",
        old="lo = torch.nn.functional.pad(keys, (0, 0, 0, pad), value=math.inf)  # (B, H_kv, P*page_size, d)\n"
            "    hi = torch.nn.functional.pad(keys, (0, 0, 0, pad), value=-math.inf)",
        new="lo = torch.nn.functional.pad(keys, (0, 0, 0, pad))  # (B, H_kv, P*page_size, d)\n"
            "    hi = torch.nn.functional.pad(keys, (0, 0, 0, pad))"),
    Bug("quest_bound_in_input_dtype", "11.4", "returns the bound in the input's dtype instead of float64",
        old="return u.reshape(B, H, P)", new="return u.reshape(B, H, P).to(q.dtype)"),
    # 11.5: page selection
    Bug("quest_drops_last_page", "11.5",
        "chooses all budget pages by bound and does not keep the sequence's own last page",
        old="""    order = torch.sort(bound[..., : P - 1], dim=-1, descending=True, stable=True).indices  # ties: lower page first
    chosen = order[..., : budget - 1]  # (B, H, budget - 1)
    last = torch.full((B, H, 1), P - 1, dtype=torch.long)
    return torch.cat([chosen, last], dim=-1).sort(dim=-1).values""",  # noqa: E501
        new="""    order = torch.sort(bound, dim=-1, descending=True, stable=True).indices
    return order[..., :budget].sort(dim=-1).values"""),
    Bug("quest_unsorted_pages", "11.5", "returns the pages in order of bound, not ascending",
        old="return torch.cat([chosen, last], dim=-1).sort(dim=-1).values",
        new="return torch.cat([last, chosen], dim=-1)"),
    Bug("quest_ties_to_higher_page", "11.5", "breaks ties between equal bounds in favour of the higher page",
        old="order = torch.sort(bound[..., : P - 1], dim=-1, descending=True, stable=True).indices"
            "  # ties: lower page first",
        new="order = (P - 2) - torch.sort(bound[..., : P - 1].flip(-1), dim=-1, descending=True, stable=True).indices"),
    Bug("quest_per_kv_head_with_first_query_head", "11.5",
        "selects with the bound of the group's first query head for every head of the group",
        old="bound = quest_upper_bound(q, page_min, page_max)  # (B, H, P) float64",
        new="G = q.shape[1] // page_min.shape[1]\n"
            "    bound = quest_upper_bound(q, page_min, page_max)[:, ::G].repeat_interleave(G, dim=1)  # (B, H, P)"),
    # 11.6: sparse paged decode
    Bug("sparse_decode_logical_pages", "11.6", "reads logical page p from physical page p, ignoring the block table",
        old="phys = table[pos // page_size]  # (H, S*page_size) physical page of each token",
        new="phys = pos // page_size  # (H, S*page_size)"),
    Bug("sparse_decode_reads_past_seq_len", "11.6", "reads the whole last page, garbage after seq_len included",
        old="read = (pos < n) & ~again.repeat_interleave(page_size, dim=1)  # the tokens that exist, once each",
        new="read = ~again.repeat_interleave(page_size, dim=1)  # (H, S*page_size)"),
    Bug("sparse_decode_kv_head_modulo", "11.6", "maps query head h to KV head h % H_kv instead of h // (H // H_kv)",
        old="kv_head = (torch.arange(H) // G)[:, None]  # (H, 1): query head h reads KV head h // G",
        new="kv_head = (torch.arange(H) % H_kv)[:, None]  # (H, 1)", kind="heads_grouped_modulo"),
    Bug("sparse_decode_no_scale", "11.6", "forgets the 1 / sqrt(d) of the scores",
        old="s = (keys @ q[b, :, :, None]).squeeze(-1) / math.sqrt(d)  # (H, S*page_size)",
        new="s = (keys @ q[b, :, :, None]).squeeze(-1)  # (H, S*page_size)"),
    Bug("sparse_decode_repeated_page_read_twice", "11.6",
        "reads a page listed twice twice, so its tokens weigh double in the softmax",
        old="read = (pos < n) & ~again.repeat_interleave(page_size, dim=1)  # the tokens that exist, once each",
        new="read = pos < n  # (H, S*page_size)"),
    # 11.7: MoBA
    Bug("moba_selects_future_blocks", "11.7", "lets a query choose blocks after its own (no causal mask on the gate)",
        old="past = torch.arange(C)[None, :] < own[:, None]  # (N, C)",
        new="past = torch.arange(C)[None, :] != own[:, None]  # (N, C)"),
    Bug("moba_scores_own_block", "11.7",
        "lets the own block compete for the top_k instead of always reading it on top of top_k - 1",
        old="best = order[..., : min(top_k - 1, C)]  # (B, H, N, top_k - 1)",
        new="best = order[..., : min(top_k, C)]  # (B, H, N, top_k)"),
    Bug("moba_own_block_competes", "11.7",
        "lets the own block, scored by a mean that holds future keys, take one of the top_k - 1 places of the past "
        "blocks",
        old="past = torch.arange(C)[None, :] < own[:, None]  # (N, C)",
        new="past = torch.arange(C)[None, :] <= own[:, None]  # (N, C)"),
    Bug("moba_heads_grouped_modulo", "11.7",
        "repeats the block means with repeat instead of repeat_interleave, so query head h scores the blocks of KV "
        "head h % H_kv instead of h // G",
        old="means = means.repeat_interleave(G, dim=1)  # (B, H, C, d)",
        new="means = means.repeat(1, G, 1, 1)  # (B, H, C, d)",
        kind="heads_grouped_modulo"),
    Bug("moba_ties_to_higher_block", "11.7", "breaks ties between equal gate scores in favour of the higher block",
        old="order = torch.sort(score, dim=-1, descending=True, stable=True).indices  # ties: lower block first",
        new="order = (C - 1) - torch.sort(score.flip(-1), dim=-1, descending=True, stable=True).indices"),
    # 11.8: NSA
    Bug("nsa_counts_overlap_twice", "11.8", "adds the window to the selected tokens, counting the tokens in both twice",
        old='"total": compressed + len(tokens)}', new='"total": compressed + selected + len(recent)}'),
    Bug("nsa_compressed_n_over_stride", "11.8",
        "counts N / stride compressed keys, as if every block started before N were complete",
        old="compressed = (seq_len - compress_block) // compress_stride + 1 if seq_len >= compress_block else 0",
        new="compressed = seq_len // compress_stride"),
    Bug("nsa_selected_full_blocks", "11.8",
        "counts every selected block as select_block tokens, the partial last one too",
        old="tokens.update(range(c * select_block, min((c + 1) * select_block, seq_len)))",
        new="tokens.update(range(c * select_block, (c + 1) * select_block))"),
    Bug("nsa_compressed_negative_when_short", "11.8",
        "drops the else 0 of short sequences, so a sequence shorter than a compression block minus a stride reads a "
        "negative number of compressed keys",
        old="compressed = (seq_len - compress_block) // compress_stride + 1 if seq_len >= compress_block else 0",
        new="compressed = (seq_len - compress_block) // compress_stride + 1"),
    # 11.9: DSA's lightning indexer
    Bug("indexer_relu_after_head_sum", "11.9",
        "applies the ReLU once to the weighted sum over the heads, instead of to each head's dot product before its "
        "weight",
        old="score = (weights.to(torch.float64)[..., None] * dots.clamp_min(0)).sum(dim=1)"
            "  # (B, T, N): ReLU, then weight",
        new="score = (weights.to(torch.float64)[..., None] * dots).sum(dim=1).clamp_min(0)  # (B, T, N)"),
    Bug("indexer_weight_inside_relu", "11.9",
        "multiplies each head's dot product by its weight before the ReLU, so a negative weight turns a key's penalty "
        "into a vote",
        old="score = (weights.to(torch.float64)[..., None] * dots.clamp_min(0)).sum(dim=1)"
            "  # (B, T, N): ReLU, then weight",
        new="score = (weights.to(torch.float64)[..., None] * dots).clamp_min(0).sum(dim=1)  # (B, T, N)"),
    Bug("indexer_no_causal_mask", "11.9",
        "lets a query select keys at positions after its own (no causal mask on the index scores)",
        old="score = score.masked_fill(~visible, -math.inf)", new="pass"),
    Bug("indexer_causal_from_the_start", "11.9",
        "places query t at position t instead of N - T + t, so a decode step or a chunk at the end of the cache sees "
        "only the first keys",
        old="pos = torch.arange(N - T, N)  # (T,): each query's position", new="pos = torch.arange(T)  # (T,)"),
    Bug("indexer_ties_to_higher_position", "11.9",
        "breaks ties between equal index scores in favour of the later position",
        old="order = torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :K]"
            "  # (B, T, K): ties to the lower",
        new="order = (N - 1) - torch.sort(score.flip(-1), dim=-1, descending=True, stable=True).indices[..., :K]"
            "  # (B, T, K)"),
    Bug("indexer_score_order", "11.9",
        "returns the selected positions in order of decreasing score (as topk does), not sorted ascending",
        old="    order = order.sort(dim=-1).values\n", new=""),
    Bug("indexer_pads_with_future_keys", "11.9",
        "fills the places a short row cannot fill with the highest-scored masked positions instead of -1",
        old="    return order.masked_fill(order == N, -1)",
        new="    return torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :K].sort(dim=-1).values"),
    Bug("h2o_scores_summed_in_float32", "11.2", "accumulates the column sums in float32 whatever q's dtype",
        old="scores = torch.zeros(B, H, N, dtype=q.dtype)", new="scores = torch.zeros(B, H, N)"),
    Bug("sparse_decode_out_in_float32", "11.6", "builds the output in float32 whatever q's dtype",
        old="out = torch.zeros(B, H, d, dtype=q.dtype)  # (B, H, d)", new="out = torch.zeros(B, H, d)  # (B, H, d)"),
]
