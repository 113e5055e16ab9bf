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

import torch


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
