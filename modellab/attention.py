"""Attention functions for the decode loop.

Every attention function has the signature ``attention(q, k, v, mask) -> out`` with

- ``q``: (B, H, T_q, d), already rotated by RoPE;
- ``k``, ``v``: (B, H_kv, T_k, d), what the cache returned; query head ``h`` reads
  KV head ``h // (H / H_kv)`` (grouped-query attention);
- ``mask``: (T_q, T_k) bool, True where the query may attend (the cache decides);
- ``out``: (B, H, T_q, d) = softmax(q k^T / sqrt(d) over visible keys) v.
"""

from __future__ import annotations

import math

import torch


def _check(q, k, v, mask):
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"q must be (B, H, T_q, d) and k, v (B, H_kv, T_k, d); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"num_heads {q.shape[1]} must be a multiple of num_kv_heads {k.shape[1]}")
    if mask.shape != (q.shape[2], k.shape[2]) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool (T_q, T_k) = {(q.shape[2], k.shape[2])}, got {mask.dtype} {tuple(mask.shape)}")


def dense_attention(q, k, v, mask):
    """The reference: materialize every score, mask, softmax, weight the values."""
    _check(q, k, v, mask)
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # (B, H, T_k, d)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, T_q, T_k)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, T_q, d)


def tiled_attention(q, k, v, mask, block_size: int = 32):
    """Flash-style attention: keys in blocks of ``block_size``, online softmax.

    Never holds more than (T_q, block_size) scores per head. Keeps the running max
    ``m``, the running sum ``l`` (natural-base exponentials) and the unnormalized
    output ``acc``; each new block rescales the old ones by exp(m_old - m_new)."""
    _check(q, k, v, mask)
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # (B, H, T_k, d)
    v = v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)  # (B, H, T_q, 1)
    l = torch.zeros_like(m)
    acc = torch.zeros_like(q)  # (B, H, T_q, d)
    for start in range(0, k.shape[2], block_size):
        kb, vb = k[:, :, start:start + block_size], v[:, :, start:start + block_size]
        s = (q @ kb.transpose(-1, -2)) * scale  # (B, H, T_q, b)
        s = s.masked_fill(~mask[:, start:start + block_size], float("-inf"))
        # -- update m and l; a row that has seen no visible key yet keeps m = -inf
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - safe)
        correction = torch.exp(m - safe)
        l = l * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ vb
        m = m_new
    return acc / l
