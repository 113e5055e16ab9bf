"""Chapter 6: the chunkwise gated delta rule against the per-token recurrence.

Both are the book's own solutions (solutions/06_delta_rule.ipynb), timed side by side
in one run on the CPU (paired rounds, see ``benchmarks.records.median_ratio``), fp32, T = 4096, d_k = d_v = 64, chunk size 64. The error record
is the largest |chunkwise - recurrent| over the outputs of both runs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.records import Record, median_ratio, paired_times
from benchmarks.solutions import load_solutions

T, D, CHUNK = 4096, 64, 64
ROUNDS = 3  # the recurrence takes about half a second a call


def _inputs(batch_size, num_heads, seed):
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, T, num_heads)
    q = torch.randn(*shape, D, generator=gen)  # (B, T, H, d_k)
    k = torch.randn(*shape, D, generator=gen)  # (B, T, H, d_k)
    v = torch.randn(*shape, D, generator=gen)  # (B, T, H, d_v)
    g = F.logsigmoid(torch.randn(*shape, generator=gen) + 4)  # (B, T, H): alpha mostly near 1
    beta = torch.sigmoid(torch.randn(*shape, generator=gen))  # (B, T, H)
    return q, k, v, g, beta


def run() -> list[Record]:
    sol = load_solutions("06_delta_rule")
    records, max_err = [], 0.0
    for name, (batch_size, num_heads), goal in [("bh1", (1, 1), ">= 10"), ("bh4", (1, 4), ">= 4")]:
        q, k, v, g, beta = _inputs(batch_size, num_heads, seed=6)
        o_rec, _ = sol.gated_delta_rule_recurrent(q, k, v, g, beta)
        o_chunk, _ = sol.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=CHUNK)
        max_err = max(max_err, (o_rec - o_chunk).abs().max().item())
        t_rec, t_chunk = paired_times([lambda: sol.gated_delta_rule_recurrent(q, k, v, g, beta),
                                       lambda: sol.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=CHUNK)],
                                      rounds=ROUNDS)
        records.append(Record(f"delta.chunk_speedup_t4096_{name}", median_ratio(t_rec, t_chunk), "x", goal,
                              note=f"median of {ROUNDS} paired rounds; best: recurrent {min(t_rec) * 1e3:.1f} ms, "
                                   f"chunkwise {min(t_chunk) * 1e3:.1f} ms, B={batch_size} H={num_heads} d={D} "
                                   f"C={CHUNK} fp32"))
    records.append(Record("delta.chunk_max_abs_err", max_err, "abs", "<= 1e-4",
                          note="max |chunkwise - recurrent| over the outputs of both runs, fp32"))
    return records
