"""Independent references for Chapter 4, written the slow, obvious way and never
imported from a notebook: masks and kept-position sets by Python loops over
positions, RoPE as a complex rotation in complex128, attention as a dense fp64
softmax over an explicit list of kept tokens."""

import math

import torch


def window_mask(q_len, kv_len, window, num_sink=0):
    """mask[i][j]: may the query at position kv_len - q_len + i see key j?"""
    rows = []
    for i in range(q_len):
        p = kv_len - q_len + i
        row = []
        for j in range(kv_len):
            causal = j <= p
            in_window = p - j < window
            is_sink = j < num_sink
            row.append(causal and (in_window or is_sink))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.bool)


def kept_positions(num_seen, window, num_sink=0):
    """Positions a sink-plus-window cache holds after num_seen tokens, oldest first."""
    kept = []
    for p in range(num_seen):
        if p < num_sink or p >= num_seen - window:
            kept.append(p)
    return kept


def rope(x, positions, base=10000.0):
    """RoPE in the rotate-half pairing, as multiplication of the complex number
    x_i + i x_{i+d/2} by exp(i p theta_i), in complex128. x: (..., T, d)."""
    d = x.shape[-1]
    half = d // 2
    x64 = x.detach().to(torch.float64)
    z = torch.complex(x64[..., :half], x64[..., half:])  # (..., T, d/2)
    factors = []  # exp(i p theta_i) for every token and pair, from Python floats
    for p in positions.tolist():
        row = []
        for i in range(half):
            angle = p * base ** (-2.0 * i / d)
            row.append(complex(math.cos(angle), math.sin(angle)))
        factors.append(row)
    out = z * torch.tensor(factors, dtype=torch.complex128)  # (..., T, d/2)
    return torch.cat([out.real, out.imag], dim=-1)


def attention(q, k, v):
    """Dense softmax(q k^T / sqrt(d)) v in fp64, one query head at a time.
    q: (B, H, Tq, d); k, v: (B, H_kv, Tk, d); query head h reads KV head h // (H / H_kv)."""
    q, k, v = (t.detach().to(torch.float64) for t in (q, k, v))
    B, H, Tq, d = q.shape
    group = H // k.shape[1]
    out = torch.empty(B, H, Tq, v.shape[-1], dtype=torch.float64)
    for h in range(H):
        kh, vh = k[:, h // group], v[:, h // group]  # (B, Tk, d)
        scores = q[:, h] @ kh.transpose(-1, -2) / math.sqrt(d)  # (B, Tq, Tk)
        weights = torch.softmax(scores, dim=-1)
        out[:, h] = weights @ vh
    return out


def streaming_outputs(qs, ks, vs, window, num_sink, rope_mode, base=10000.0):
    """Decode outputs of every step t = 0..n-1 from the whole history.

    qs: (B, H, n, d), ks, vs: (B, H_kv, n, d), none rotated. Step t sees the kept
    positions after t + 1 tokens. ``post``: every token rotated at its absolute
    position; ``pre``: kept token number r (oldest first) rotated at r, the query at
    C - 1. Returns (B, H, n, d)."""
    n = qs.shape[2]
    outs = []
    for t in range(n):
        kept = kept_positions(t + 1, window, num_sink)
        idx = torch.tensor(kept)
        keys, values = ks[:, :, idx], vs[:, :, idx]  # (B, H_kv, C, d)
        q = qs[:, :, t:t + 1]  # (B, H, 1, d)
        if rope_mode == "post":
            keys = rope(keys, idx, base)
            q = rope(q, torch.tensor([t]), base)
        else:
            keys = rope(keys, torch.arange(len(kept)), base)
            q = rope(q, torch.tensor([len(kept) - 1]), base)
        outs.append(attention(q, keys, values))
    return torch.cat(outs, dim=2)
