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


# -- References for the exercises' own API (grading.judge.substitute) --------------------
# While a test of one exercise runs, the other exercises' functions and methods in the
# student's notebook are these, swapped in method by method (so a SinkKVCache built on
# the student's RingKVCache, by composition or by inheritance, gets these methods).
# Written from the docstrings one token at a time: token p of a ring sits in slot
# p % W, and what is kept is read off kept_positions above.


def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _require_chunks(k, v, batch_size, num_kv_heads, head_dim, dtype):
    """k and v: (B, H_kv, T >= 1, d) tensors of the cache's dtype, of the same shape."""
    for name, x in (("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dtype != dtype:
            raise TypeError(f"{name} must be a torch.Tensor of dtype {dtype}, got {getattr(x, 'dtype', type(x))}")
        if (x.dim() != 4 or x.shape[2] < 1
                or (x.shape[0], x.shape[1], x.shape[3]) != (batch_size, num_kv_heads, head_dim)):
            raise ValueError(f"{name} must have shape ({batch_size}, {num_kv_heads}, T >= 1, {head_dim}), "
                             f"got {tuple(x.shape)}")
    if v.shape != k.shape:
        raise ValueError(f"v must have the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")


def checked_window_mask(q_len, kv_len, window, num_sink=0):
    for name, value, minimum in (("q_len", q_len, 1), ("kv_len", kv_len, 1), ("window", window, 1),
                                 ("num_sink", num_sink, 0)):
        _require_int(name, value, minimum)
    if kv_len < q_len:
        raise ValueError(f"kv_len must be >= q_len, got {kv_len} < {q_len}")
    return window_mask(q_len, kv_len, window, num_sink)


class RingKVCache:
    """The last ``window`` tokens in preallocated (B, H_kv, W, d) buffers ``k`` and
    ``v``; token p in slot p % W. Also keeps ``shape``, ``window``, ``dtype`` and
    ``num_seen``, the state the book's ring shows."""

    def __init__(self, batch_size, num_kv_heads, window, head_dim, dtype=torch.float32):
        for name, value in (("batch_size", batch_size), ("num_kv_heads", num_kv_heads), ("window", window),
                            ("head_dim", head_dim)):
            _require_int(name, value, 1)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
        self.shape = (batch_size, num_kv_heads, window, head_dim)
        self.window = window
        self.dtype = dtype
        self.k = torch.zeros(self.shape, dtype=dtype)  # (B, H_kv, W, d)
        self.v = torch.zeros(self.shape, dtype=dtype)  # (B, H_kv, W, d)
        self.num_seen = 0

    def append(self, k, v):
        B, H, W, d = self.shape
        _require_chunks(k, v, B, H, d, self.dtype)  # before any write: all or nothing
        for t in range(k.shape[2]):
            slot = (self.num_seen + t) % W
            self.k[:, :, slot] = k[:, :, t]
            self.v[:, :, slot] = v[:, :, t]
        self.num_seen += k.shape[2]

    def keys_values(self):
        slots = [p % self.window for p in kept_positions(self.num_seen, self.window)]
        return self.k[:, :, slots], self.v[:, :, slots]  # (B, H_kv, min(n, W), d) each

    def positions(self):
        return torch.tensor(kept_positions(self.num_seen, self.window), dtype=torch.int64)


class SinkKVCache:
    """Positions < num_sink in (B, H_kv, S, d) buffers ``sink_k`` and ``sink_v``; the
    rest in ``recent``, a RingKVCache (this module's) of the last ``window`` of them."""

    def __init__(self, batch_size, num_kv_heads, window, head_dim, num_sink=4, dtype=torch.float32):
        _require_int("num_sink", num_sink, 0)
        self.recent = RingKVCache(batch_size, num_kv_heads, window, head_dim, dtype)
        self.num_sink = num_sink
        self.sink_k = torch.zeros(batch_size, num_kv_heads, num_sink, head_dim, dtype=dtype)  # (B, H_kv, S, d)
        self.sink_v = torch.zeros(batch_size, num_kv_heads, num_sink, head_dim, dtype=dtype)  # (B, H_kv, S, d)
        self.num_seen = 0

    def append(self, k, v):
        B, H, _, d = self.recent.shape
        _require_chunks(k, v, B, H, d, self.recent.dtype)
        for t in range(k.shape[2]):
            p = self.num_seen + t
            if p < self.num_sink:
                self.sink_k[:, :, p] = k[:, :, t]
                self.sink_v[:, :, p] = v[:, :, t]
            else:
                self.recent.append(k[:, :, t:t + 1], v[:, :, t:t + 1])
        self.num_seen += k.shape[2]

    def keys_values(self):
        sinks = min(self.num_seen, self.num_sink)
        k, v = self.recent.keys_values()
        return torch.cat([self.sink_k[:, :, :sinks], k], dim=2), torch.cat([self.sink_v[:, :, :sinks], v], dim=2)

    def positions(self):
        sinks = list(range(min(self.num_seen, self.num_sink)))
        recent = [self.num_sink + p for p in self.recent.positions().tolist()]  # the ring counts from 0
        return torch.tensor(sinks + recent, dtype=torch.int64)


def checked_rope(x, positions, base=10000.0):
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"x must be (..., T, d) with d even, got shape {tuple(x.shape)}")
    if not isinstance(positions, torch.Tensor) or positions.is_floating_point() or positions.is_complex() \
            or positions.dtype == torch.bool:
        raise TypeError(f"positions must be an integer tensor, got {getattr(positions, 'dtype', type(positions))}")
    if tuple(positions.shape) != (x.shape[-2],):
        raise ValueError(f"positions must have shape ({x.shape[-2]},), got {tuple(positions.shape)}")
    if any(p < 0 for p in positions.tolist()):
        raise ValueError("positions must be >= 0")
    return rope(x, positions, base).to(x.dtype)


_METHODS = ("__init__", "append", "keys_values", "positions")
SUBSTITUTES = {
    "sliding_window_mask": checked_window_mask,
    **{f"RingKVCache.{m}": getattr(RingKVCache, m) for m in _METHODS},
    **{f"SinkKVCache.{m}": getattr(SinkKVCache, m) for m in _METHODS},
    "apply_rope": checked_rope,
}
