"""Chapter 4: the per-token cost of keeping a sliding window.

Both ways of keeping the last W tokens of keys and values are timed side by side
in the same run, at batch 1, 8 KV heads, head dim 128, fp16:

- concatenate-and-slice (``cat_window_append`` from the solutions), which copies
  the whole window on every token;
- the ring buffer of Exercise 4.2 (``RingKVCache.append``), which writes one slot.
"""

from __future__ import annotations

import torch

from benchmarks.records import Record, median_ratio, paired_times
from benchmarks.solutions import load_solutions

BATCH, NUM_KV_HEADS, HEAD_DIM, DTYPE = 1, 8, 128, torch.float16
APPENDS_PER_RUN = 50  # one timed run appends this many tokens
ROUNDS = 7


def _tokens(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, NUM_KV_HEADS, n, HEAD_DIM, generator=g).to(DTYPE)  # (B, H_kv, n, d)


def ring_appends(sol, window: int):
    """A call that appends APPENDS_PER_RUN tokens (K and V) to a full ring of ``window``."""
    cache = sol.RingKVCache(BATCH, NUM_KV_HEADS, window, HEAD_DIM, dtype=DTYPE)
    cache.append(_tokens(window, 0), _tokens(window, 1))  # start full: every append evicts
    k, v = _tokens(1, 2), _tokens(1, 3)  # (B, H_kv, 1, d)

    def run():
        for _ in range(APPENDS_PER_RUN):
            cache.append(k, v)

    return run


def cat_appends(sol, window: int):
    """A call that appends APPENDS_PER_RUN tokens by concatenate-and-slice on a full window."""
    state = [_tokens(window, 0), _tokens(window, 1)]  # (B, H_kv, W, d) each
    k, v = _tokens(1, 2), _tokens(1, 3)

    def run():
        for _ in range(APPENDS_PER_RUN):
            state[0] = sol.cat_window_append(state[0], k, window)
            state[1] = sol.cat_window_append(state[1], v, window)

    return run


def run() -> list[Record]:
    sol = load_solutions("04_sliding_window_sinks")
    cat_8k, ring_8k, ring_1k = paired_times(
        [cat_appends(sol, 8192), ring_appends(sol, 8192), ring_appends(sol, 1024)], rounds=ROUNDS)
    per_token = lambda times: min(times) / APPENDS_PER_RUN * 1e6  # noqa: E731  best us per token
    shape = f"B{BATCH} H_kv{NUM_KV_HEADS} d{HEAD_DIM} fp16, median of {ROUNDS} paired rounds"
    return [
        Record("window.ring_vs_cat_speedup_w8192", median_ratio(cat_8k, ring_8k), "x", ">= 20",
               note=f"{shape}; best: cat+slice {per_token(cat_8k):.1f} us/token, ring {per_token(ring_8k):.1f} "
                    "us/token"),
        Record("window.append_growth_1k_to_8k", median_ratio(ring_8k, ring_1k), "x", "<= 2",
               note=f"{shape}; best: ring {per_token(ring_1k):.1f} us/token at W=1024, {per_token(ring_8k):.1f} at "
                    "W=8192"),
        Record("window.cat_append_us_w8192", per_token(cat_8k), "us",
               note="concatenate-and-slice, K and V, per token, best"),
        Record("window.ring_append_us_w8192", per_token(ring_8k), "us", note="ring buffer, K and V, per token, best"),
    ]
