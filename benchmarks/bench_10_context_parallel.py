"""Chapter 10's ``make bench`` records: ring attention on 4 real gloo processes.

- ``cp.max_abs_err_p4``: the largest error, over every rank, of the solution's fp32
  ``ring_attention`` on 4 gloo processes (zig-zag, causal, GQA) against dense fp64
  attention over the whole sequence.
- ``cp.zigzag_imbalance``: max over min of the causal work per rank (visible query-key
  pairs, counted by the reference pair by pair) with zig-zag sharding, at P = 4 and
  N = 4096; ``cp.contiguous_imbalance`` the same with contiguous shards (report).
- ``cp.bytes_formula_vs_actual``: the bytes a rank handed to ``torch.distributed``'s sends
  in the real run, divided by ``ring_bytes_per_layer``: 1 for every rank, or the worst.

No timing: on a 2-core machine four ranks share two cores, and a wall-clock speedup would
measure the scheduler (the chapter says so).
"""

from __future__ import annotations

import torch

from benchmarks.records import Record
from benchmarks.solutions import load_solutions
from distlab import run_on_ranks
from distlab.launch import raise_for_failures
from tests.references import ref_10_context_parallel as ref

P, TOKENS_PER_RANK, B, H, H_KV, D = 4, 256, 1, 8, 2, 64
WORK_SEQ_LEN = 4096


def run() -> list[Record]:
    sol = load_solutions("10_context_parallel")
    g = torch.Generator().manual_seed(0)
    seq_len = P * TOKENS_PER_RANK
    q = torch.randn(B, H, seq_len, D, generator=g)
    k, v = (torch.randn(B, H_KV, seq_len, D, generator=g) for _ in range(2))
    shards = [ref.shard_positions(seq_len, P, r, "zigzag") for r in range(P)]
    calls = [[((q[:, :, pos], k[:, :, pos], v[:, :, pos]), {"layout": "zigzag"})] for pos in shards]
    results = run_on_ranks(sol.path, "ring_attention", P, calls)
    raise_for_failures(results)
    exact, _ = ref.attention_fp64(q, k, v, causal=True)
    err = max((res.calls[0].value[0].double() - exact[:, :, shards[res.rank]]).abs().max().item() for res in results)
    formula = sol.ring_bytes_per_layer(seq_len, P, B, H_KV, D, 4)
    ratios = [res.calls[0].bytes_sent / formula for res in results]
    worst = max(ratios, key=lambda x: abs(x - 1.0))

    imbalance = {}
    for layout in ("contiguous", "zigzag"):
        positions = [sol.shard_positions(WORK_SEQ_LEN, P, r, layout) for r in range(P)]
        totals = _work_totals(positions)
        imbalance[layout] = totals.max().item() / totals.min().item()
    note = f"P={P}, N={WORK_SEQ_LEN}, visible pairs per rank"
    return [
        Record("cp.max_abs_err_p4", err, "abs", "<= 1e-5",
               note=f"fp32, {P} gloo ranks, zig-zag causal, B={B} H={H} H_kv={H_KV} N={seq_len} d={D}"),
        Record("cp.zigzag_imbalance", imbalance["zigzag"], "x", "<= 1.05", note=note),
        Record("cp.contiguous_imbalance", imbalance["contiguous"], "x", "report", note=note),
        Record("cp.bytes_formula_vs_actual", worst, "x", "== 1",
               note=f"bytes sent per rank {[res.calls[0].bytes_sent for res in results]}, formula {formula}"),
    ]


def _work_totals(positions: list[torch.Tensor]) -> torch.Tensor:
    """Visible pairs per rank over the whole sequence, by comparing every (query, key) pair
    of positions (the reference's pair loop is too slow at N = 4096; this is the same count
    as one boolean matrix per rank)."""
    keys = torch.cat(positions)
    return torch.stack([(keys[None, :] <= pos[:, None]).sum() for pos in positions])
