"""Plug the book's own chapter code into the decode loop, or fall back to ours.

Each function here returns what the experiment needs *and* a short ``source`` string
saying whose code it is ("Chapter 4 solution: SinkKVCache" or "modellab:
WindowCache"), so the chapter can print which implementation produced a number.
The chapters' solutions are loaded with ``grading.load_solutions`` (the single
source of truth); if a notebook is missing or lacks a name, we use modellab's own
small cache instead, so every experiment runs either way, except where the fallback
would be an exercise's answer: modellab has no quantizer (Chapter 3's exercises) and no
flash attention (Chapter 5's), so without those chapters the factories return None, and
the experiment says it was left out.
"""

from __future__ import annotations

import functools

import torch

from grading.layout import ROOT
from modellab.caches import PagedLayerView, PagedPool, TokenQuantizedCache, WindowCache

# The names each experiment needs from a chapter's solution notebook.
NEEDS = {
    "01_kv_memory": ("kv_bytes_per_token",),
    "02_paged_kv_cache": ("PagedKVCache", "kv_slot_usage"),
    "03_quantized_kv_cache": ("quantize_int8", "dequantize_int8", "quantize_asym", "dequantize_asym",
                              "QuantizedKVCache"),
    "04_sliding_window_sinks": ("RingKVCache", "SinkKVCache"),
}


@functools.lru_cache(maxsize=None)
def chapter(stem: str, names: tuple[str, ...] | None = None):
    """The solution notebook ``solutions/<stem>.ipynb`` as a module, or None if it is
    missing or does not define every name in ``names`` (default: ``NEEDS[stem]``)."""
    if not (ROOT / "solutions" / f"{stem}.ipynb").is_file():
        return None
    from grading import load_solutions

    try:
        sol = load_solutions(stem)
    except Exception:  # an unreadable notebook must not stop the model lab
        return None
    names = NEEDS.get(stem, ()) if names is None else names
    return sol if all(sol.has(n) for n in names) else None


# -- Chapter 2: paged cache ----------------------------------------------------------
def paged_pools(config, num_pages: int, page_size: int):
    """One paged pool per layer, shared by every sequence: ``(pools, source)``."""
    sol = chapter("02_paged_kv_cache")
    if sol is not None:
        pools = [sol.PagedKVCache(num_pages, page_size, config.num_kv_heads, config.head_dim)
                 for _ in range(config.num_layers)]
        return pools, "Chapter 2 solution: PagedKVCache"
    pools = [PagedPool(num_pages, page_size, config.num_kv_heads, config.head_dim) for _ in range(config.num_layers)]
    return pools, "modellab: PagedPool"


def paged_views(pools, seq_id):
    """Layer caches for one sequence of the shared pools (use with ``ModelCache.from_layers``)."""
    return [PagedLayerView(pool, seq_id) for pool in pools]


def paged_usage(pool) -> tuple[int, int]:
    """``(filled slots, allocated slots)`` of one layer's pool."""
    sol = chapter("02_paged_kv_cache")
    if sol is not None and isinstance(pool, sol.PagedKVCache):
        return sol.kv_slot_usage(pool)
    return sum(pool.lengths.values()), pool.pages_in_use() * pool.page_size


# -- Chapter 3: quantized caches -------------------------------------------------------
# No fallback here: a quantizer in modellab would be the answer of Exercise 3.1 (or 3.2)
# in a file the student can read. Without Chapter 3's solution these rows are
# unavailable, as the KIVI cache below is.
def int8_cache():
    """A layer-cache factory for INT8 per-token keys and values: ``(make_layer, source)``,
    ``make_layer`` None if Chapter 3's solution is absent."""
    sol = chapter("03_quantized_kv_cache")
    if sol is None:
        return None, "unavailable (needs Chapter 3's quantize_int8 / dequantize_int8)"
    return (lambda: TokenQuantizedCache(sol.quantize_int8, sol.dequantize_int8),
            "Chapter 3 solution: quantize_int8 / dequantize_int8, per token")


def int4_cache(head_dim: int):
    """INT4 asymmetric, one scale and zero-point per token vector (keys and values alike);
    ``make_layer`` None if Chapter 3's solution is absent."""
    sol = chapter("03_quantized_kv_cache")
    if sol is None:
        return None, "unavailable (needs Chapter 3's quantize_asym / dequantize_asym)"
    return (lambda: TokenQuantizedCache(lambda x: sol.quantize_asym(x, 4, head_dim),
                                        lambda q, s, z: sol.dequantize_asym(q, s, z, head_dim)),
            "Chapter 3 solution: quantize_asym(bits=4), per token")


def kivi_cache(config, bits: int = 4, group_size: int = 32):
    """KIVI-style: keys per channel, values per token, full-precision residual; None if Chapter 3 is absent."""
    sol = chapter("03_quantized_kv_cache")
    if sol is None:
        return None, "unavailable (needs Chapter 3's QuantizedKVCache)"
    return (lambda: sol.QuantizedKVCache(1, config.num_kv_heads, config.head_dim, bits=bits, group_size=group_size),
            f"Chapter 3 solution: QuantizedKVCache(bits={bits}, group_size={group_size})")


# -- Chapter 4: window and sinks -------------------------------------------------------
def window_cache(config, window: int, num_sink: int, chunk_size: int):
    """A layer-cache factory that keeps ``num_sink`` sinks and enough recent tokens for
    chunks of ``chunk_size`` (``window + chunk_size - 1``); pair it with
    ``ModelCache(..., window=window, num_sink=num_sink)``, whose mask enforces the window."""
    capacity = window + chunk_size - 1
    sol = chapter("04_sliding_window_sinks")
    if sol is not None:
        if num_sink == 0:
            return (lambda: sol.RingKVCache(1, config.num_kv_heads, capacity, config.head_dim),
                    "Chapter 4 solution: RingKVCache")
        return (lambda: sol.SinkKVCache(1, config.num_kv_heads, capacity, config.head_dim, num_sink=num_sink),
                "Chapter 4 solution: SinkKVCache")
    return lambda: WindowCache(capacity, num_sink), "modellab: WindowCache"


# -- Chapter 5: flash attention --------------------------------------------------------
def flash_attention(block_size: int = 8):
    """An attention function ``(q, k, v, mask) -> out`` built on Chapter 5's ``flash_attention``:
    ``(attention, source)``, or ``(None, why)`` without Chapter 5.

    Chapter 5's kernel takes ``causal=True`` (query i sees keys j <= i + N_k - N_q, the
    diagonal aligned to the end) rather than a mask. That is the mask of a full cache,
    so the adapter checks the mask it is given is exactly that (or all-visible) and
    refuses any other (a window's, say) instead of silently ignoring it. Small blocks
    (``block_size`` queries and keys) make even a short prompt span several tiles."""
    sol = chapter("05_flash_attention", ("flash_attention",))
    if sol is None:
        return None, "unavailable (needs Chapter 5's flash_attention)"

    def attention(q, k, v, mask):
        n_q, n_k = mask.shape
        end_aligned = torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)
        if torch.equal(mask, end_aligned):
            causal = True
        elif bool(mask.all()):
            causal = False
        else:
            raise ValueError("mask: Chapter 5's flash_attention supports only causal or full masks")
        return sol.flash_attention(q, k, v, causal=causal, block_q=block_size, block_k=block_size)

    return attention, f"Chapter 5 solution: flash_attention(causal=True, block_q=block_k={block_size})"
