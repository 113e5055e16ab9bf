"""Attention functions for the decode loop.

Flash attention (blocks of keys, an online softmax) is Chapter 5's exercise, so it is
not written here: the model lab plugs in the Chapter 5 solution (``modellab.adapters``).
Every attention function has the signature ``attention(q, k, v, mask) -> out`` with

- ``q``: (B, H, T_q, d), already rotated by RoPE;
- ``k``, ``v``: (B, H_kv, T_k, d), what the cache returned; query head ``h`` reads
  KV head ``h // (H / H_kv)`` (grouped-query attention);
- ``mask``: (T_q, T_k) bool, True where the query may attend (the cache decides), or
  (B, H, T_q, T_k) where each query head sees its own keys (a page selection);
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
    shared, per_head = (q.shape[2], k.shape[2]), (*q.shape[:3], k.shape[2])
    if mask.shape not in (shared, per_head) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool (T_q, T_k) = {shared} or (B, H, T_q, T_k) = {per_head}, got "
                         f"{mask.dtype} {tuple(mask.shape)}")


def dense_attention(q, k, v, mask):
    """The reference: materialize every score, mask, softmax, weight the values."""
    _check(q, k, v, mask)
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # (B, H, T_k, d)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, T_q, T_k)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, T_q, d)
