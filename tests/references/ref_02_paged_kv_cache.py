"""Independent references for Chapter 2, never imported from a notebook.

- ``DenseKVModel``: what a paged cache must look like from outside. Each sequence
  keeps its keys and values as a plain Python list of token rows, and its pages as
  a list of abstract page objects (fresh integers from a counter, no pool, no free
  list, no tensors indexed by page). Sharing is by identity: a fork copies the list,
  a write into a shared partial page swaps in a fresh id. From that it predicts
  exactly how many pages the real cache must hold, whether an append must fail, and
  which block-table entries must be the same physical page.
- ``decode_attention``: dense attention of one query over a contiguous fp64 copy of
  the keys and values, a loop over heads.
"""

from __future__ import annotations

import itertools
import math
import sys

import torch

from grading.contestant.swap import beside


def pages_needed(num_tokens: int, page_size: int) -> int:
    full, rest = divmod(num_tokens, page_size)
    return full + (1 if rest else 0)  # every full page, plus one for a partial tail


class DenseKVModel:
    def __init__(self, num_pages: int, page_size: int):
        self.num_pages = num_pages
        self.page_size = page_size
        self.keys: dict[object, list[torch.Tensor]] = {}  # seq_id -> [ (H_kv, d) per token ]
        self.values: dict[object, list[torch.Tensor]] = {}
        self.pages: dict[object, list[int]] = {}  # seq_id -> abstract page ids
        self._ids = itertools.count()

    # -- accounting ----------------------------------------------------------
    def owners(self) -> dict[int, list[tuple[object, int]]]:
        """abstract page -> [(seq_id, index in its table)]"""
        out: dict[int, list] = {}
        for seq, pages in self.pages.items():
            for i, p in enumerate(pages):
                out.setdefault(p, []).append((seq, i))
        return out

    def pages_in_use(self) -> int:
        return len(self.owners())

    def free_pages(self) -> int:
        return self.num_pages - self.pages_in_use()

    def refcount(self, page: int) -> int:
        return len(self.owners().get(page, []))

    def pages_for_append(self, seq, num_tokens: int) -> int:
        """Pages an append must allocate: the growth, plus one copy of a shared partial page."""
        old = len(self.keys.get(seq, []))
        pages = self.pages.get(seq, [])
        grow = pages_needed(old + num_tokens, self.page_size) - len(pages)
        shared_partial = old % self.page_size != 0 and self.refcount(pages[-1]) > 1
        return grow + (1 if shared_partial else 0)

    def usage(self) -> tuple[int, int]:
        filled = 0
        for page, owners in self.owners().items():
            filled += max(min(self.page_size, len(self.keys[seq]) - i * self.page_size) for seq, i in owners)
        return filled, self.pages_in_use() * self.page_size

    # -- operations ----------------------------------------------------------
    def can_append(self, seq, num_tokens: int) -> bool:
        return self.pages_for_append(seq, num_tokens) <= self.free_pages()

    def append(self, seq, k: torch.Tensor, v: torch.Tensor) -> None:
        assert self.can_append(seq, k.shape[0])
        old = len(self.keys.get(seq, []))
        pages = list(self.pages.get(seq, []))
        if old % self.page_size != 0 and self.refcount(pages[-1]) > 1:
            pages[-1] = next(self._ids)
        while len(pages) < pages_needed(old + k.shape[0], self.page_size):
            pages.append(next(self._ids))
        self.pages[seq] = pages
        self.keys.setdefault(seq, []).extend(row.clone() for row in k)
        self.values.setdefault(seq, []).extend(row.clone() for row in v)

    def fork(self, src, dst) -> None:
        self.pages[dst] = list(self.pages[src])
        self.keys[dst] = list(self.keys[src])
        self.values[dst] = list(self.values[src])

    def free(self, seq) -> None:
        del self.pages[seq], self.keys[seq], self.values[seq]

    def contents(self, seq) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack(self.keys[seq]), torch.stack(self.values[seq])


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """q: (H, d); k, v: (T, H_kv, d); returns (H, d) in fp64. Query head h uses KV head
    h // (H // H_kv)."""
    H, d = q.shape
    H_kv = k.shape[1]
    group = H // H_kv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    q64, k64, v64 = q.double(), k.double(), v.double()
    out = torch.zeros(H, d, dtype=torch.float64)
    for h in range(H):
        g = h // group
        scores = scale * (k64[:, g] @ q64[h])  # (T,)
        weights = torch.exp(scores - scores.max())
        weights = weights / weights.sum()
        out[h] = weights @ v64[:, g]  # (d,)
    return out


# -- References for the exercises' own API (grading.judge.substitute) --------------------
# While a test of one exercise runs, the other exercises' functions and methods in the
# student's notebook are these: written on the book's documented state (pool layout
# ``pool[page, 0 or 1, slot]``, ``block_tables``, ``seq_lens``, the allocator's
# ``free_pages`` stack and ``refcount`` list), one token and one page at a time.


def _notebook(obj):
    """The module the student's notebook was loaded into (for its ``OutOfPages``)."""
    return sys.modules[type(obj).__module__]


def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def checked_pages_needed(num_tokens, page_size):
    _require_int("num_tokens", num_tokens, 0)
    _require_int("page_size", page_size, 1)
    return pages_needed(num_tokens, page_size)


def _require_in_use(alloc, pages):
    for page in pages:
        if isinstance(page, bool) or not isinstance(page, int) or not 0 <= page < alloc.num_pages:
            raise ValueError(f"pages: {page!r} is not a page id")
        if alloc.refcount[page] == 0:
            raise ValueError(f"pages: page {page} is free")


def allocator_allocate(self, n):
    _require_int("n", n, 0)
    if n > len(self.free_pages):
        raise _notebook(self).OutOfPages(n, len(self.free_pages))
    out = []
    for _ in range(n):
        page = self.free_pages.pop()
        self.refcount[page] = 1
        out.append(page)
    return out


def allocator_incref(self, pages):
    _require_in_use(self, pages)
    for page in pages:
        self.refcount[page] += 1


def allocator_decref(self, pages):
    _require_in_use(self, pages)
    freed = []
    for page in pages:
        self.refcount[page] -= 1
        if self.refcount[page] == 0:
            self.free_pages.append(page)
            freed.append(page)
    return freed


def _require_chunk(name, x, cache):
    if not isinstance(x, torch.Tensor) or x.dtype != cache.pool.dtype:
        raise TypeError(f"{name} must be a torch.Tensor of dtype {cache.pool.dtype}")
    if x.dim() != 3 or x.shape[0] < 1 or tuple(x.shape[1:]) != (cache.num_kv_heads, cache.head_dim):
        raise ValueError(f"{name} must have shape (T >= 1, {cache.num_kv_heads}, {cache.head_dim}), got "
                         f"{tuple(x.shape)}")


def cache_append(self, seq_id, k, v):
    _require_chunk("k", k, self)
    _require_chunk("v", v, self)
    if k.shape != v.shape:
        raise ValueError(f"v must have the shape of k, got {tuple(v.shape)}")
    ps, alloc = self.page_size, self.allocator
    table = list(self.block_tables.get(seq_id, []))
    old = self.seq_lens.get(seq_id, 0)
    new = old + k.shape[0]
    copy_tail = old % ps != 0 and alloc.refcount[table[-1]] > 1
    wanted = pages_needed(new, ps) - len(table) + (1 if copy_tail else 0)
    if wanted > len(alloc.free_pages):  # before any change: all or nothing
        raise _notebook(self).OutOfPages(wanted, len(alloc.free_pages))
    fresh = alloc.allocate(wanted)
    if copy_tail:  # the shared partial page is copied before anyone writes into it
        copy = fresh.pop()
        self.pool[copy] = self.pool[table[-1]]
        alloc.decref([table[-1]])
        table[-1] = copy
    table.extend(fresh)
    for i, t in enumerate(range(old, new)):
        self.pool[table[t // ps], 0, t % ps] = k[i]
        self.pool[table[t // ps], 1, t % ps] = v[i]
    # The table is changed in place, as an engine's append changes the list it holds:
    # a fork that handed its child the parent's own list is then seen, both tables growing.
    self.block_tables.setdefault(seq_id, [])[:] = table
    self.seq_lens[seq_id] = new


def cache_gather(self, seq_id):
    if seq_id not in self.block_tables:
        raise KeyError(f"seq_id: no sequence {seq_id!r}")
    table, ps = self.block_tables[seq_id], self.page_size
    rows = range(self.seq_lens[seq_id])
    k = torch.stack([self.pool[table[t // ps], 0, t % ps] for t in rows]) if rows else self.pool.new_zeros(
        0, self.num_kv_heads, self.head_dim)
    v = torch.stack([self.pool[table[t // ps], 1, t % ps] for t in rows]) if rows else k.clone()
    return k, v


def cache_fork(self, src, dst):
    if src not in self.block_tables:
        raise KeyError(f"src: no sequence {src!r}")
    if dst in self.block_tables:
        raise ValueError(f"dst: sequence {dst!r} already exists")
    self.allocator.incref(self.block_tables[src])
    self.block_tables[dst] = list(self.block_tables[src])
    self.seq_lens[dst] = self.seq_lens[src]


def cache_free(self, seq_id):
    if seq_id not in self.block_tables:
        raise KeyError(f"seq_id: no sequence {seq_id!r}")
    self.allocator.decref(self.block_tables.pop(seq_id))
    del self.seq_lens[seq_id]


def checked_decode_attention(q, cache, seq_ids, scale=None):
    if not isinstance(q, torch.Tensor) or not q.dtype.is_floating_point:
        raise TypeError("q must be a floating torch.Tensor")
    seq_ids = list(seq_ids)
    if q.dim() != 3 or q.shape[2] != cache.head_dim or q.shape[1] % cache.num_kv_heads:
        raise ValueError(f"q has the wrong shape {tuple(q.shape)}")
    if not seq_ids or len(seq_ids) != q.shape[0] or any(s not in cache.block_tables for s in seq_ids):
        raise ValueError(f"seq_ids must name {q.shape[0]} sequences of the cache")
    out = [decode_attention(q[b], *cache_gather(cache, s), scale=scale) for b, s in enumerate(seq_ids)]
    return torch.stack(out).to(q.dtype)


def slot_usage(cache):
    if not all(hasattr(cache, a) for a in ("block_tables", "seq_lens", "allocator", "page_size")):
        raise TypeError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
    ps, filled = cache.page_size, {}
    for seq_id, table in cache.block_tables.items():
        for i, page in enumerate(table):
            filled[page] = max(filled.get(page, 0), min(ps, cache.seq_lens[seq_id] - i * ps))
    in_use = sum(1 for count in cache.allocator.refcount if count > 0)
    return sum(filled.values()), in_use * ps


SUBSTITUTES = {
    "pages_needed": checked_pages_needed,
    "BlockAllocator.allocate": allocator_allocate,
    "BlockAllocator.incref": allocator_incref,
    "BlockAllocator.decref": allocator_decref,
    # These take the student's cache and fill or read it: they run beside it, in the
    # contestant. pages_needed, a function of two ints, is answered by the judge.
    "append": beside(cache_append),
    "gather": beside(cache_gather),
    "fork": beside(cache_fork),
    "free": beside(cache_free),
    "paged_decode_attention": beside(checked_decode_attention),
    "kv_slot_usage": beside(slot_usage),
}
