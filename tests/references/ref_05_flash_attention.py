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
