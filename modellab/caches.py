"""KV caches for the decode loop, behind one small interface.

The decode loop talks to a :class:`ModelCache`, which holds one *layer cache* per
transformer layer. A layer cache is any object with

``append(k, v)``
    store a chunk of keys and values, each ``(B, H_kv, T_new, d)``, already rotated
    by RoPE at their absolute positions;
``keys_values()``
    return ``(k, v)``, each ``(B, H_kv, T_kept, d)``, oldest token first;
``positions()`` *(optional)*
    the absolute positions of the kept tokens, int64 ``(T_kept,)``; a cache without
    it keeps every token, so its positions are ``0 .. T - 1``;
``nbytes()`` *(optional)*
    the bytes it holds.

This is exactly the interface of the book's Chapter 3 and 4 caches
(``QuantizedKVCache``, ``RingKVCache``, ``SinkKVCache``), so they plug in as they
are; the paged cache of Chapter 2 needs a thin view (:class:`PagedLayerView`).

Which keys a query may see is the model cache's decision, because it knows the
eviction policy: causal always, and with ``window`` set a query at position ``p``
sees keys in ``(p - window, p]`` plus the first ``num_sink`` positions. A window
cache that receives chunks of ``c`` tokens must keep ``window + c - 1`` tokens so
that the first query of a chunk still finds its whole window; the mask hides the
extra ones, so chunked evaluation equals token-by-token streaming exactly.
"""

from __future__ import annotations

from typing import Callable

import torch


def _check_chunk(name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"{name} must be (B, H_kv, T, d), got shape {tuple(x.shape)}")


class ModelCache:
    """One layer cache per layer, plus the positions and the visibility mask.

    ``make_layer()`` builds a fresh layer cache (called once per layer)."""

    def __init__(self, make_layer: Callable[[], object], num_layers: int, *, window: int | None = None,
                 num_sink: int = 0):
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be a positive int or None, got {window!r}")
        if not isinstance(num_sink, int) or num_sink < 0:
            raise ValueError(f"num_sink must be an int >= 0, got {num_sink!r}")
        self.layers = [make_layer() for _ in range(num_layers)]
        self.window, self.num_sink = window, num_sink
        self._seen = [0] * num_layers  # tokens appended to each layer so far

    @classmethod
    def from_layers(cls, layers, **kwargs) -> "ModelCache":
        """A model cache over given layer caches (e.g. views of shared paged pools)."""
        layers = list(layers)
        it = iter(layers)
        return cls(lambda: next(it), len(layers), **kwargs)

    @property
    def seen(self) -> int:
        """Tokens the model has processed (the position of the next token)."""
        return self._seen[0]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k``, ``v`` ``(B, H_kv, T_new, d)`` for tokens ``seen .. seen + T_new - 1`` of ``layer``."""
        _check_chunk("k", k)
        _check_chunk("v", v)
        self.layers[layer].append(k, v)
        self._seen[layer] += k.shape[2]

    def keys_values(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.layers[layer].keys_values()

    def rollback(self, n: int) -> None:
        """Forget the last ``n`` tokens of every layer (a speculative round's rejected
        guesses): the next token gets position ``seen - n``. Needs layer caches that can
        roll back (``DenseCache`` and Chapter 14's draft cache can)."""
        if type(n) is not int or not 0 <= n <= self.seen:
            raise ValueError(f"n must be an int in [0, {self.seen}], got {n!r}")
        for cache in self.layers:
            if not hasattr(cache, "rollback"):
                raise TypeError(f"a {type(cache).__name__} cannot roll back")
            cache.rollback(n)
        self._seen = [seen - n for seen in self._seen]

    def positions(self, layer: int) -> torch.Tensor:
        """Absolute positions of the kept tokens of ``layer``, int64 ``(T_kept,)``."""
        cache = self.layers[layer]
        if hasattr(cache, "positions"):
            return cache.positions()
        return torch.arange(self._seen[layer])

    def mask(self, layer: int, q_positions: torch.Tensor) -> torch.Tensor:
        """``(T_q, T_kept)`` bool, True where the query may attend to the key."""
        q = q_positions[:, None]  # (T_q, 1)
        k = self.positions(layer)[None, :]  # (1, T_kept)
        visible = k <= q
        if self.window is not None:
            visible &= (q - k < self.window) | (k < self.num_sink)
        return visible

    def nbytes(self) -> int:
        return sum(int(c.nbytes()) for c in self.layers)


# -- layer caches of our own -------------------------------------------------------
def _held_bytes(*tensors) -> int:
    """Bytes of the tensors a cache holds (None: nothing yet). Worded unlike the solution
    of Exercise 8.1, whose method says the same: the student edition ships this file."""
    return sum(t.nbytes for t in tensors if t is not None)


class DenseCache:
    """Keeps every token, stored in ``dtype`` (the reference cache)."""

    def __init__(self, dtype: torch.dtype = torch.float32):
        self.dtype = dtype
        self.k = self.v = None

    def append(self, k, v):
        k, v = k.to(self.dtype), v.to(self.dtype)
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)  # (B, H_kv, T, d)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)

    def keys_values(self):
        return self.k, self.v

    def rollback(self, n):
        """Forget the last ``n`` tokens."""
        if n:
            self.k, self.v = self.k[:, :, :-n], self.v[:, :, :-n]  # (B, H_kv, T - n, d)

    def nbytes(self):
        return _held_bytes(self.k, self.v)


class WindowCache:
    """The first ``num_sink`` tokens plus the most recent ``capacity`` others.

    ``num_sink=0`` is a plain sliding window; ``num_sink=4`` is StreamingLLM's
    attention-sink cache. Eviction drops the oldest non-sink tokens."""

    def __init__(self, capacity: int, num_sink: int = 0):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if not isinstance(num_sink, int) or num_sink < 0:
            raise ValueError(f"num_sink must be an int >= 0, got {num_sink!r}")
        self.capacity, self.num_sink = capacity, num_sink
        self.k = self.v = None
        self.pos = torch.zeros(0, dtype=torch.long)

    def append(self, k, v):
        start = int(self.pos[-1]) + 1 if len(self.pos) else 0
        new_pos = torch.arange(start, start + k.shape[2])
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)  # (B, H_kv, T, d)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        self.pos = torch.cat([self.pos, new_pos])
        keep = (self.pos < self.num_sink) | (torch.arange(len(self.pos)) >= len(self.pos) - self.capacity)
        self.k, self.v, self.pos = self.k[:, :, keep], self.v[:, :, keep], self.pos[keep]

    def keys_values(self):
        return self.k, self.v

    def positions(self):
        return self.pos

    def nbytes(self):
        return _held_bytes(self.k, self.v)


class TokenQuantizedCache:
    """Keys and values quantized one token vector at a time (per token, per head).

    ``quantize(x) -> tuple`` of tensors and ``dequantize(*parts) -> x`` are the
    quantizer's two halves, Chapter 3's (see :func:`modellab.adapters.int8_cache`):
    modellab holds no quantizer of its own, because writing one is Exercises 3.1 and
    3.2. Every stored tensor counts in ``nbytes()`` (codes and scales; codes stored one
    a byte count a byte each)."""

    def __init__(self, quantize: Callable, dequantize: Callable):
        self.quantize, self.dequantize = quantize, dequantize
        self.chunks = []  # [(k parts, v parts)] in token order

    def append(self, k, v):
        self.chunks.append((self.quantize(k), self.quantize(v)))

    def keys_values(self):
        k = torch.cat([self.dequantize(*kp) for kp, _ in self.chunks], dim=2)  # (B, H_kv, T, d)
        v = torch.cat([self.dequantize(*vp) for _, vp in self.chunks], dim=2)
        return k, v

    def nbytes(self):
        return sum(t.nbytes for kp, vp in self.chunks for t in (*kp, *vp))


class PagedPool:
    """A minimal paged cache for one layer: a pool of pages and one block table per sequence.

    Same calls as Chapter 2's ``PagedKVCache`` (``append(seq_id, k, v)`` and
    ``gather(seq_id)`` with ``(T, H_kv, d)`` chunks), without forks or freeing."""

    def __init__(self, num_pages, page_size, num_kv_heads, head_dim, dtype=torch.float32):
        self.page_size = page_size
        self.k_pool = torch.zeros(num_pages, page_size, num_kv_heads, head_dim, dtype=dtype)
        self.v_pool = torch.zeros_like(self.k_pool)
        self.free = list(range(num_pages - 1, -1, -1))
        self.tables, self.lengths = {}, {}

    def append(self, seq_id, k, v):
        table = self.tables.setdefault(seq_id, [])
        length = self.lengths.get(seq_id, 0)
        for t in range(k.shape[0]):
            slot = length + t
            if slot // self.page_size == len(table):
                if not self.free:
                    raise RuntimeError("out of pages")
                table.append(self.free.pop())
            page, offset = table[slot // self.page_size], slot % self.page_size
            self.k_pool[page, offset], self.v_pool[page, offset] = k[t], v[t]
        self.lengths[seq_id] = length + k.shape[0]

    def gather(self, seq_id):
        n, table = self.lengths[seq_id], torch.tensor(self.tables[seq_id])
        k = self.k_pool[table].flatten(0, 1)[:n]  # (T, H_kv, d)
        v = self.v_pool[table].flatten(0, 1)[:n]
        return k, v

    def pages_in_use(self):
        return sum(len(t) for t in self.tables.values())


class PagedLayerView:
    """One sequence of a paged pool seen as a layer cache (batch of one).

    Pools store ``(T, H_kv, d)`` per sequence; the decode loop speaks ``(1, H_kv, T, d)``."""

    def __init__(self, pool, seq_id):
        self.pool, self.seq_id = pool, seq_id

    def append(self, k, v):
        if k.shape[0] != 1:
            raise ValueError(f"a paged view holds one sequence: k must have batch 1, got {k.shape[0]}")
        self.pool.append(self.seq_id, k[0].transpose(0, 1).contiguous(), v[0].transpose(0, 1).contiguous())

    def keys_values(self):
        k, v = self.pool.gather(self.seq_id)  # (T, H_kv, d)
        return k.transpose(0, 1)[None], v.transpose(0, 1)[None]  # (1, H_kv, T, d)
