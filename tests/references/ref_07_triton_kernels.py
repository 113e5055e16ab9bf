"""Independent references for Chapter 7, in fp64 and written the obvious way: an
element-wise sum, a softmax from its definition, dense attention with an explicit
mask and an explicit repeat of the KV heads, and decode attention that gathers every
token through the block table one at a time. Never imported from a notebook."""

import math

import torch


def vector_add(x, y):
    return x.double() + y.double()


def softmax_rows(x):
    """softmax(x)_j = exp(x_j - max x) / sum_k exp(x_k - max x), row by row."""
    x = x.double()
    shifted = x - x.max(dim=-1, keepdim=True).values
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)


def expand_kv_heads(t, num_heads):
    """(B, H_kv, N, d) -> (B, H, N, d): query head h reads KV head h // (H // H_kv)."""
    B, H_kv, N, d = t.shape
    group = num_heads // H_kv
    heads = [t[:, h // group] for h in range(num_heads)]
    return torch.stack(heads, dim=1)


def attention(q, k, v, causal=False):
    """Dense attention in fp64. q (B, H, N, d), k and v (B, H_kv, N, d).

    Returns (out (B, H, N, d), lse (B, H, N)) with s = q k^T / sqrt(d), s_ij = -inf for
    j > i when causal, out = softmax(s) v and lse = log sum_j exp(s_ij) (natural log)."""
    q, k, v = q.double(), k.double(), v.double()
    H, N, d = q.shape[1], q.shape[2], q.shape[3]
    k, v = expand_kv_heads(k, H), expand_kv_heads(v, H)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)  # (B, H, N, N)
    if causal:
        future = torch.arange(N)[None, :] > torch.arange(N)[:, None]
        s = s.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (B, H, N)
    out = torch.exp(s - lse[..., None]) @ v
    return out, lse


def paged_decode(q, k_pages, v_pages, block_tables, seq_lens):
    """Decode attention in fp64, one sequence and one token at a time.

    q (B, H, d); k_pages, v_pages (num_pages, page_size, H_kv, d); token t of sequence b
    is slot t % page_size of page block_tables[b, t // page_size]. Returns (B, H, d)."""
    B, H, d = q.shape
    page_size, H_kv = k_pages.shape[1], k_pages.shape[2]
    group = H // H_kv
    out = torch.zeros(B, H, d, dtype=torch.float64)
    for b in range(B):
        n = int(seq_lens[b])
        keys, values = [], []
        for t in range(n):
            page = int(block_tables[b, t // page_size])
            keys.append(k_pages[page, t % page_size].double())  # (H_kv, d)
            values.append(v_pages[page, t % page_size].double())
        K = torch.stack(keys)  # (n, H_kv, d)
        V = torch.stack(values)
        for h in range(H):
            scores = K[:, h // group] @ q[b, h].double() / math.sqrt(d)  # (n,)
            w = torch.softmax(scores, dim=0)
            out[b, h] = w @ V[:, h // group]
    return out
