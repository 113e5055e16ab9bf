"""Independent references for Chapter 5: attention written the plain way, in fp64,
with the whole score matrix and an explicit softmax. Never imported from a notebook.

Conventions (the chapter's): q (B, H, N_q, d), k and v (B, H_kv, N_k, d); query head
h reads KV head h // (H // H_kv); under the causal mask query i sees keys
j <= i + N_k - N_q; a query that sees no key has output 0 and lse = -inf; lse is the
natural log of sum_j exp(s_ij) with s = q k^T / sqrt(d).
"""

import math

import torch


def softmax_fp64(x):
    """softmax of a 1-D tensor in fp64; all -inf gives zeros."""
    x = x.double()
    if x.numel() == 0 or bool((x == -math.inf).all()):
        return torch.zeros_like(x)
    e = torch.exp(x - x.max())
    return e / e.sum()


def causal_mask(seq_len_q, seq_len_k):
    """(N_q, N_k) bool, True where query i may NOT see key j, written out pair by pair."""
    offset = seq_len_k - seq_len_q  # the last query is aligned with the last key
    rows = [[j > i + offset for j in range(seq_len_k)] for i in range(seq_len_q)]
    return torch.tensor(rows, dtype=torch.bool).reshape(seq_len_q, seq_len_k)


def attention_fp64(q, k, v, causal=False):
    """(out, lse) in fp64: out (B, H, N_q, d), lse (B, H, N_q). Differentiable (no NaN
    anywhere, also on fully masked rows), so autograd through it is the backward reference."""
    q, k, v = q.double(), k.double(), v.double()
    B, H, N_q, d = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    G = H // H_kv
    kv_head = torch.tensor([h // G for h in range(H)])  # query head h reads KV head h // G
    k_full = k[:, kv_head]  # (B, H, N_k, d)
    v_full = v[:, kv_head]  # (B, H, N_k, d)
    s = q @ k_full.transpose(-1, -2) / math.sqrt(d)  # (B, H, N_q, N_k)
    if causal:
        s = s.masked_fill(causal_mask(N_q, N_k), -math.inf)
    m = s.amax(dim=-1, keepdim=True) if N_k else torch.full((B, H, N_q, 1), -math.inf, dtype=torch.float64)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m_safe)  # masked entries are exp(-inf) = 0
    total = e.sum(dim=-1, keepdim=True)
    seen = total > 0
    p = e / torch.where(seen, total, torch.ones_like(total))
    out = p @ v_full
    lse = torch.where(seen, m_safe + torch.log(torch.where(seen, total, torch.ones_like(total))),
                      torch.full_like(total, -math.inf))
    return out, lse.squeeze(-1)


def attention_grads_fp64(q, k, v, causal, grad_out):
    """(dq, dk, dv) in fp64: autograd through :func:`attention_fp64`, for the output
    gradient ``grad_out`` (B, H, N_q, d). A function of its inputs, so the release can
    store its result (grading.judge.replay) where autograd through a stored value could not run."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out64, _ = attention_fp64(q64, k64, v64, causal)
    return torch.autograd.grad(out64, (q64, k64, v64), grad_out.double())


def online_update_fp64(m, l, acc, s, v, base=math.e):
    """The update written from its definition, row by row, for 3-D inputs:
    m, l (P, R, 1); acc (P, R, d); s (P, R, C); v (P, C, d). The new state is the
    running sum of base**(score - m_new) over every key seen so far plus this block
    (base e, or 2 for scores kept in base 2). A row with no visible key stays (-inf, 0, 0)."""
    m, l, acc, s, v = m.double(), l.double(), acc.double(), s.double(), v.double()
    new_m, new_l, new_acc = m.clone(), l.clone(), acc.clone()
    for b in range(s.shape[0]):
        for r in range(s.shape[1]):
            m_row = max(m[b, r, 0].item(), s[b, r].max().item())
            new_m[b, r, 0] = m_row
            if m_row == -math.inf:
                continue
            rescale = base ** (m[b, r, 0].item() - m_row)
            weights = base ** (s[b, r] - m_row)  # (C,)
            new_l[b, r, 0] = l[b, r, 0] * rescale + weights.sum()
            new_acc[b, r] = acc[b, r] * rescale + weights @ v[b]
    return new_m, new_l, new_acc


def tiles_visited(seq_len_q, seq_len_k, block_q, block_k, causal):
    """The (q_start, k_start) tiles that hold at least one visible (query, key) pair,
    found by checking every pair: exactly the tiles a causal kernel must compute."""
    tiles = set()
    for q0 in range(0, seq_len_q, block_q):
        for k0 in range(0, seq_len_k, block_k):
            visible = any(
                not causal or j <= i + seq_len_k - seq_len_q
                for i in range(q0, min(q0 + block_q, seq_len_q))
                for j in range(k0, min(k0 + block_k, seq_len_k))
            )
            if visible:
                tiles.add((q0, k0))
    return tiles


def decode_chunks(seq_len, num_splits):
    """The [start, stop) key ranges of split-KV decode, one by one: chunks of
    ceil(seq_len / num_splits) consecutive keys, the last one shorter if need be."""
    size = -(-seq_len // num_splits)
    chunks, start = [], 0
    while start < seq_len:
        chunks.append((start, min(start + size, seq_len)))
        start += size
    return chunks


# -- References for the exercises' own API (grading.judge.substitute) --------------------
# While a test of one exercise runs, the functions of the other exercises in the
# student's notebook are these: written from the exercises' docstrings, out of place
# where that is simpler, in the dtype of their inputs (the accumulation dtype, fp32 or
# fp64, that flash_attention and split_kv_decode hand them), with the errors the
# docstrings promise. 5.5 calls all four; 5.6 the causal helpers; 5.7 online_update
# and finalize.


def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def online_update(m, l, acc, s, v, exp=torch.exp):
    """Exercise 5.2 from its docstring: m' = max(m, rowmax(s)), alpha = exp(m - m'),
    p = exp(s - m'), l' = alpha l + rowsum(p), acc' = alpha acc + p @ v; l, acc and s
    are overwritten with l', acc' and p. A row whose m' is -inf (nothing visible yet)
    keeps l = 0 and acc = 0."""
    if s.dim() != 3:
        raise ValueError(f"s must be 3-D (P, R, C), got shape {tuple(s.shape)}")
    P, R, C = s.shape
    if tuple(m.shape) != (P, R, 1):
        raise ValueError(f"m must have shape {(P, R, 1)}, got {tuple(m.shape)}")
    if tuple(l.shape) != (P, R, 1):
        raise ValueError(f"l must have shape {(P, R, 1)}, got {tuple(l.shape)}")
    if acc.dim() != 3 or tuple(acc.shape[:2]) != (P, R):
        raise ValueError(f"acc must have shape (P, R, d) = ({P}, {R}, d), got {tuple(acc.shape)}")
    if tuple(v.shape) != (P, C, acc.shape[2]):
        raise ValueError(f"v must have shape {(P, C, acc.shape[2])}, got {tuple(v.shape)}")
    if exp is not torch.exp and exp is not torch.exp2:
        raise ValueError(f"exp must be torch.exp or torch.exp2, got {exp!r}")
    m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (P, R, 1)
    seen = m_new > -math.inf  # (P, R, 1): rows with at least one visible key so far
    shift = torch.where(seen, m_new, torch.zeros_like(m_new))  # -inf - (-inf) would be NaN
    alpha = torch.where(seen, exp(m - shift), torch.zeros_like(m))  # (P, R, 1)
    p = torch.where(seen, exp(s - shift), torch.zeros_like(s))  # (P, R, C); masked keys give 0
    new_l = alpha * l + p.sum(dim=-1, keepdim=True)  # (P, R, 1)
    new_acc = alpha * acc + p @ v  # (P, R, d)
    l.copy_(new_l)
    acc.copy_(new_acc)
    s.copy_(p)
    return m_new, l, acc


def finalize(m, l, acc):
    """Exercise 5.3 from its docstring: out = acc / l and lse = m + log(l) (natural log);
    a row with l = 0 gets out = 0 and lse = -inf."""
    if m.shape != l.shape or m.dim() < 1 or m.shape[-1] != 1:
        raise ValueError(f"m and l must both be (..., R, 1), got m {tuple(m.shape)} and l {tuple(l.shape)}")
    if acc.dim() != m.dim() or acc.shape[:-1] != m.shape[:-1]:
        raise ValueError(f"acc must be (..., R, d) with the rows of m {tuple(m.shape)}, got {tuple(acc.shape)}")
    seen = l > 0  # (..., R, 1)
    safe_l = torch.where(seen, l, torch.ones_like(l))
    out = torch.where(seen, acc / safe_l, torch.zeros_like(acc))  # (..., R, d)
    lse = torch.where(seen, m + torch.log(safe_l), torch.full_like(m, -math.inf))  # (..., R, 1)
    return out, lse.squeeze(-1)


def causal_key_stop(q_stop, seq_len_q, seq_len_k):
    """Exercise 5.4: one past the last key that query q_stop - 1 may see, counted key
    by key with the mask's rule (j <= i + seq_len_k - seq_len_q)."""
    _require_int("seq_len_q", seq_len_q, 0)
    _require_int("seq_len_k", seq_len_k, 0)
    _require_int("q_stop", q_stop, 1)
    if q_stop > seq_len_q:
        raise ValueError(f"q_stop must be <= seq_len_q = {seq_len_q}, got {q_stop}")
    last_query = q_stop - 1  # sees the most keys of its block
    return sum(1 for j in range(seq_len_k) if j <= last_query + seq_len_k - seq_len_q)


def causal_block_mask(q_start, q_stop, k_start, k_stop, seq_len_q, seq_len_k):
    """Exercise 5.4: rows q_start..q_stop-1 and columns k_start..k_stop-1 of the full
    causal mask, True where key j is hidden from query i (j > i + seq_len_k - seq_len_q)."""
    if not 0 <= q_start <= q_stop <= seq_len_q:
        raise ValueError(f"q_stop: need 0 <= q_start <= q_stop <= seq_len_q, got {q_start}, {q_stop}, {seq_len_q}")
    if not 0 <= k_start <= k_stop <= seq_len_k:
        raise ValueError(f"k_stop: need 0 <= k_start <= k_stop <= seq_len_k, got {k_start}, {k_stop}, {seq_len_k}")
    i = torch.arange(q_start, q_stop).reshape(-1, 1)  # (R, 1) query positions
    j = torch.arange(k_start, k_stop).reshape(1, -1)  # (1, C) key positions
    return j > i + (seq_len_k - seq_len_q)  # (R, C)


SUBSTITUTES = {
    "online_update": online_update,
    "finalize": finalize,
    "causal_key_stop": causal_key_stop,
    "causal_block_mask": causal_block_mask,
}
