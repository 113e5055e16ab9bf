"""Wrong implementations of Chapter 5 that the graders must reject.

The first eight are the issue's list; the rest are the other mistakes people make
when they write flash attention for the first time. ``tests`` keeps each bug to the
graders that concern it, so ``--prove`` stays fast."""

from grading.notebook.catalogue import Bug

MATERIALISED = '''
_check_qkv(q, k, v)
B, H, N_q, d = q.shape
H_kv, N_k = k.shape[1], k.shape[2]
G = H // H_kv
P = B * H_kv
dtype = _acc_dtype(q.dtype)
q_rows = q.reshape(P, G * N_q, d).to(dtype) / math.sqrt(d)
s = q_rows @ k.reshape(P, N_k, d).to(dtype).transpose(-1, -2)  # (P, G*N_q, N_k): the whole score matrix
if causal:
    s.view(P, G, N_q, N_k).masked_fill_(causal_block_mask(0, N_q, 0, N_k, N_q, N_k), -math.inf)
m = torch.full((P, G * N_q, 1), -math.inf, dtype=dtype)
l = torch.zeros(P, G * N_q, 1, dtype=dtype)
acc = torch.zeros(P, G * N_q, d, dtype=dtype)
m, l, acc = online_update(m, l, acc, s, v.reshape(P, N_k, d).to(dtype))
out, lse = finalize(m, l, acc)
if visits is not None:  # reports the tiles a blocked loop would have computed
    for q0 in range(0, N_q, block_q):
        key_stop = causal_key_stop(min(q0 + block_q, N_q), N_q, N_k) if causal else N_k
        visits.extend((q0, k0) for k0 in range(0, key_stop, block_k))
out = out.to(q.dtype).view(B, H, N_q, d)
return (out, lse.view(B, H, N_q)) if return_lse else out
'''

UNSAFE_SOFTMAX = '''
_check_tensor("x", x, 1)
_check_int("block_size", block_size, 1)
e = torch.exp(x.to(_acc_dtype(x.dtype)))
return (e / e.sum()).to(x.dtype)
'''

DECODE_DROPS_TAIL = '''
_check_qkv(q, k, v)
if q.shape[2] != 1:
    raise ValueError(f"q must hold one query row, got shape {tuple(q.shape)}")
if k.shape[2] == 0:
    raise ValueError("k must hold at least one cached key")
_check_int("num_splits", num_splits, 1)
B, H, _, d = q.shape
H_kv, N = k.shape[1], k.shape[2]
G, P = H // H_kv, B * H_kv
dtype = _acc_dtype(q.dtype)
q_rows = q.reshape(P, G, d).to(dtype) / math.sqrt(d)
chunk = max(1, N // num_splits)  # floor: the N % num_splits keys after the last chunk are lost
outs, lses = [], []
for j in range(min(num_splits, N)):
    k_j = k.reshape(P, N, d)[:, j * chunk:(j + 1) * chunk].to(dtype)
    v_j = v.reshape(P, N, d)[:, j * chunk:(j + 1) * chunk].to(dtype)
    m = torch.full((P, G, 1), -math.inf, dtype=dtype)
    l, acc = torch.zeros(P, G, 1, dtype=dtype), torch.zeros(P, G, d, dtype=dtype)
    m, l, acc = online_update(m, l, acc, torch.bmm(q_rows, k_j.transpose(-1, -2)), v_j)
    o_j, l_j = finalize(m, l, acc)
    outs.append(o_j)
    lses.append(l_j)
out_parts, lse_parts = torch.stack(outs, 1), torch.stack(lses, 1)  # (P, n_chunks, G, d), (P, n_chunks, G)
lse = torch.logsumexp(lse_parts, dim=1)
out = (torch.exp(lse_parts - lse.unsqueeze(1)).unsqueeze(-1) * out_parts).sum(1)
out, lse = out.to(q.dtype).view(B, H, 1, d), lse.view(B, H, 1)
if return_partials:
    n = out_parts.shape[1]
    return out, lse, out_parts.transpose(1, 2).reshape(B, H, n, d), lse_parts.transpose(1, 2).reshape(B, H, n)
return (out, lse) if return_lse else out
'''

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '5.1': 'The online softmax, and why it is exact',
    '5.2': 'The online softmax, and why it is exact',
    '5.3': 'Tiling: the blocked forward pass',
    '5.4': 'Causal masking that skips work',
    '5.5': 'Tiling: the blocked forward pass',
    '5.6': 'The backward pass by recomputation',
    '5.7': 'Split-KV decode: parallel over a long cache',
}

BUGS = [
    # -- the list
    Bug("running_max_wrong_shape", "5.5", "initialises m as (P, rows), so max(m, rowmax) broadcasts to rows x rows",
        old="m = torch.full((P, rows, 1), -math.inf", new="m = torch.full((P, rows), -math.inf",
        tests="test_forward"),
    Bug("accumulator_not_rescaled", "5.2", "never rescales l and acc by exp(m_old - m_new) when the max grows",
        old="alpha = exp(m - m_safe)", new="alpha = torch.ones_like(m_safe)", tests="online_update"),
    Bug("l_rescaled_but_not_acc", "5.2", "rescales the running sum l but not the accumulator",
        old="acc.mul_(alpha).baddbmm_(p, v)", new="acc.baddbmm_(p, v)", tests="online_update"),
    Bug("causal_mask_off_by_one", "5.4", "masks the diagonal too (j >= i), so a query cannot see its own key",
        old="return j > i + (seq_len_k - seq_len_q)", new="return j >= i + (seq_len_k - seq_len_q)",
        tests="test_causal"),
    Bug("missing_inverse_sqrt_d", "5.5", "forgets the 1/sqrt(d) scale on the scores",
        old="scale = LOG2_E / math.sqrt(d)", new="scale = LOG2_E",
        tests="test_forward"),
    Bug("fully_masked_row_nan", "5.2", "subtracts m_new = -inf from -inf scores, so a row with no visible key is NaN",
        old="m_safe = torch.where(m_new == -math.inf, 0.0, m_new)", new="m_safe = m_new", tests="online_update"),
    Bug("score_matrix_materialised", "5.5", "builds the whole N_q x N_k score matrix (and reports tiles it never used)",
        code=MATERIALISED, tests="materialises"),
    # -- accumulates in the input dtype: what the fp16/bf16 tolerances
    #    derived from SDPA's error must reject
    Bug("flash_accumulates_in_input_dtype", "5.5", "keeps m, l and acc (and the scores) in fp16/bf16 instead of fp32",
        old="    dtype = _acc_dtype(q.dtype)\n    # Scores in base 2",
        new="    dtype = q.dtype\n    # Scores in base 2",
        tests="test_forward"),
    Bug("softmax_accumulates_in_input_dtype", "5.1", "sums the exponentials of an fp16 vector in fp16",
        old="xs = x.to(_acc_dtype(x.dtype))", new="xs = x", tests="online_softmax"),
    Bug("gqa_heads_mixed_up", "5.5", "sends query head h to KV head h % H_kv instead of h // G",
        old="q_grouped = q.reshape(B, H_kv, G, N_q, d)",
        new="q_grouped = q.reshape(B, G, H_kv, N_q, d).transpose(1, 2)",
        tests="test_forward"),
    # -- more of the same family
    Bug("online_softmax_sum_not_rescaled", "5.1", "adds the new block to l without rescaling the old l",
        old="l = l * torch.exp(m - m_new) + torch.exp(block - m_new).sum()",
        new="l = l + torch.exp(block - m_new).sum()",
        tests="online_softmax"),
    Bug("softmax_without_max", "5.1", "exponentiates without subtracting the max: overflows, and 0/0 when all masked",
        code=UNSAFE_SOFTMAX, tests="online_softmax"),
    Bug("causal_computes_every_tile", "5.5", "masks the tiles above the diagonal instead of never computing them",
        old="key_stop = causal_key_stop(q1, N_q, N_k) if causal else N_k", new="key_stop = N_k", tests="skips_tiles"),
    Bug("causal_diagonal_top_left", "5.4",
        "aligns the diagonal to the first key (SDPA's is_causal) instead of the last",
        old="return j > i + (seq_len_k - seq_len_q)", new="return j > i", tests="test_causal"),
    Bug("causal_key_stop_one_short", "5.4", "stops the key loop one key early, dropping the diagonal's last key",
        old="return min(max(q_stop + seq_len_k - seq_len_q, 0), seq_len_k)",
        new="return min(max(q_stop + seq_len_k - seq_len_q - 1, 0), seq_len_k)", tests="test_causal"),
    Bug("lse_base_2", "5.3", "returns log2 of the sum (the Triton tutorial's convention) instead of the natural log",
        old="lse = torch.where(seen, m + torch.log(l), -math.inf)",
        new="lse = torch.where(seen, m / math.log(2) + torch.log2(l), -math.inf)", tests="finalize"),
    Bug("lse_forgets_the_max", "5.3", "returns log(l), dropping the running max m that l is relative to",
        old="lse = torch.where(seen, m + torch.log(l), -math.inf)",
        new="lse = torch.where(seen, torch.log(l), -math.inf)",
        tests="finalize"),
    Bug("divides_by_zero_l", "5.3", "divides acc by l = 0 on a row that saw no key: 0 / 0 = NaN",
        old="out = acc / torch.where(seen, l, 1.0)", new="out = acc / l", tests="finalize"),
    Bug("online_update_ignores_exp", "5.2",
        "always uses torch.exp, so base-2 scores from flash_attention get the wrong softmax",
        old="p = exp(s.sub_(m_safe), out=s)", new="p = torch.exp(s.sub_(m_safe), out=s)", tests="online_update"),
    Bug("base_2_scores_with_exp", "5.5",
        "folds log2(e) into the scale but passes the natural exp: softmax at the wrong temperature",
        old="online_update(m, l, acc, s, v_tile, exp=torch.exp2)", new="online_update(m, l, acc, s, v_tile)",
        tests="test_forward"),
    Bug("lse_left_in_base_2", "5.5", "hands finalize the base-2 running max, so lse = m2 + ln(l) mixes two bases",
        old="finalize(m * LN_2, l, acc)", new="finalize(m, l, acc)", tests="log_sum_exp"),
    Bug("backward_without_delta", "5.6", "drops the D = rowsum(dO * O) term from dS",
        old="ds = p * (dp - delta_tile)", new="ds = p * dp", tests="backward"),
    Bug("backward_dq_unscaled", "5.6", "forgets the 1/sqrt(d) of the scores in dQ",
        old="dq_tile += (ds @ k_tile) * scale", new="dq_tile += ds @ k_tile", tests="backward"),
    Bug("backward_dv_overwritten", "5.6", "assigns dV per query tile instead of accumulating across query tiles",
        old="dv[:, :, k0:k1] += p.transpose(-1, -2) @ do_tile", new="dv[:, :, k0:k1] = p.transpose(-1, -2) @ do_tile",
        tests="backward"),
    # -- split-KV decode (Exercise 5.7)
    Bug("decode_merge_plain_average", "5.7",
        "averages the chunks' outputs, ignoring how much weight each chunk's keys carry",
        old="out = (weights.unsqueeze(-1) * out_parts).sum(dim=1)", new="out = out_parts.mean(dim=1)",
        tests="split_kv_decode"),
    Bug("decode_merge_max_not_subtracted", "5.7",
        "merges with exp(L_j) / sum exp(L_j) directly: overflows once L_j passes ~88 (fp32) or ~709 (fp64)",
        old="lse = torch.logsumexp(lse_parts, dim=1)", new="lse = torch.log(torch.exp(lse_parts).sum(dim=1))",
        tests="large_logits"),
    Bug("decode_merge_by_max_lse", "5.7",
        "takes the largest L_j for L instead of their log-sum-exp, so the weights do not sum to 1",
        old="lse = torch.logsumexp(lse_parts, dim=1)", new="lse = lse_parts.amax(dim=1)",
        tests="split_kv_decode"),
    Bug("decode_merges_unnormalised_acc", "5.7",
        "merges each chunk's accumulator acc_j instead of its output acc_j / l_j",
        old="return finalize(m, l, acc)  #", new="return acc, finalize(m, l, acc)[1]  #",
        tests="split_kv_decode"),
    Bug("decode_drops_the_tail", "5.7",
        "cuts floor(N / num_splits) keys per chunk, losing the keys after the last full chunk",
        code=DECODE_DROPS_TAIL, tests="split_kv_decode"),
    Bug("decode_scale_applied_twice", "5.7", "scales the queries by 1/sqrt(d) and the scores again",
        old="s = torch.bmm(rows, k_part.to(dtype).transpose(-1, -2))",
        new="s = torch.bmm(rows, k_part.to(dtype).transpose(-1, -2)) * scale",
        tests="split_kv_decode"),
    Bug("decode_gqa_heads_mixed_up", "5.7", "sends the decode's query head h to KV head h % H_kv instead of h // G",
        old="q_rows = q.reshape(P, G, d)", new="q_rows = q.reshape(B, G, H_kv, d).transpose(1, 2).reshape(P, G, d)",
        tests="split_kv_decode"),
    Bug("decode_tail_misaligned", "5.7",
        "takes the short last chunk from the wrong end of the cache (the first keys again)",
        old="partial(k_groups[:, full:], v_groups[:, full:])",
        new="partial(k_groups[:, :N - full], v_groups[:, :N - full])",
        tests="split_kv_decode"),
    Bug("finalize_in_float32", "5.3", "divides and takes the log in float32 whatever the inputs' dtype",
        old="out = acc / torch.where(seen, l, 1.0)",
        new="out = (acc.float() / torch.where(seen, l, 1.0).float()).to(acc.dtype)", tests="finalize"),
]
