"""Chapter 2 benchmarks: memory waste of paging vs contiguous reservation on a
simulated serving workload, and the CPU cost of paged decode attention vs dense SDPA.

- ``paged.waste_fraction`` / ``contiguous.waste_fraction``: one run of the solution's
  ``simulate_serving`` (the real ``PagedKVCache`` under a continuous-batching
  scheduler): 64 requests, prompt and output lengths each uniform on [1, 1024],
  ``max_seq_len`` 2048, 16 requests at once, page size 16. The time-averaged fraction
  of allocated (paged) or reserved (contiguous) KV slots that hold no token.
- ``paged.decode_vs_dense_cpu``: batch 8, 4096 tokens each, 8 query heads, 2 KV
  heads, head dim 128, fp32, page size 16. The sequences are written in interleaved
  chunks so their pages are scattered through the pool. Time of the solution's
  ``paged_decode_attention`` divided by ``F.scaled_dot_product_attention`` over the
  same tokens stored contiguously, timed side by side (minimum of repeats).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.records import Record, median_ratio, paired_times
from benchmarks.solutions import load_solutions

PAGE_SIZE = 16


def _waste(sol) -> list[Record]:
    requests = sol.sample_requests(64, max_prompt=1024, max_output=1024, seed=0)
    result = sol.simulate_serving(requests, max_batch=16, max_seq_len=2048, page_size=PAGE_SIZE, sample_every=8)
    note = "64 requests, prompt/output ~ U[1, 1024], max_seq_len 2048, batch 16, page 16"
    return [
        Record("paged.waste_fraction", result["paged"], "fraction", "<= 0.04", note=note),
        Record("contiguous.waste_fraction", result["contiguous"], "fraction", "report",
               note=note + " (peer; expected >= 0.5)"),
    ]


def _decode(sol) -> list[Record]:
    batch, seq_len, num_heads, num_kv_heads, head_dim = 8, 4096, 8, 2, 128
    gen = torch.Generator().manual_seed(0)
    keys = torch.randn(batch, seq_len, num_kv_heads, head_dim, generator=gen)  # (B, T, H_kv, d)
    values = torch.randn(batch, seq_len, num_kv_heads, head_dim, generator=gen)
    cache = sol.PagedKVCache(batch * seq_len // PAGE_SIZE, PAGE_SIZE, num_kv_heads, head_dim)
    chunk = 512
    for start in range(0, seq_len, chunk):  # round-robin chunks: each sequence's pages are scattered
        for b in range(batch):
            cache.append(b, keys[b, start:start + chunk], values[b, start:start + chunk])
    q = torch.randn(batch, num_heads, head_dim, generator=gen)  # (B, H, d)
    k_dense = keys.transpose(1, 2).contiguous()  # (B, H_kv, T, d)
    v_dense = values.transpose(1, 2).contiguous()
    seq_ids = list(range(batch))

    def paged():
        return sol.paged_decode_attention(q, cache, seq_ids)

    def dense():
        return F.scaled_dot_product_attention(q[:, :, None], k_dense, v_dense, enable_gqa=True)  # (B, H, 1, d)

    err = (paged() - dense()[:, :, 0]).abs().max().item()
    if err > 1e-4:
        raise AssertionError(f"paged and dense decode attention disagree (max abs error {err:.3g})")
    t_paged, t_dense = paired_times([paged, dense], rounds=15)
    ratio = median_ratio(t_paged, t_dense)
    note = (f"median of 15 paired rounds; best: paged {min(t_paged) * 1e3:.1f} ms, "
            f"dense SDPA {min(t_dense) * 1e3:.1f} ms; "
            "B8 T4096 H8 Hkv2 D128 fp32")
    return [Record("paged.decode_vs_dense_cpu", ratio, "x", "<= 3.0", note=note)]


def run() -> list[Record]:
    sol = load_solutions("02_paged_kv_cache")
    return _waste(sol) + _decode(sol)
