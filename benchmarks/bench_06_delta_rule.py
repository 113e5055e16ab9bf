"""Chapter 6: the chunkwise gated delta rule against the per-token recurrence.

Both are the book's own solutions (solutions/06_delta_rule.ipynb), timed side by side
in one run on the CPU (paired rounds, see ``benchmarks.records.median_ratio``), fp32,
T = 4096, d_k = d_v = 64, chunk size 64. The error record is the largest
|chunkwise - recurrent| over the outputs of both runs.

A Python loop over tokens is a weak peer: most of its time is the interpreter and
the launch of five small operations per token. The second peer is the same per-token
recurrence compiled by ``torch.compile`` (inductor, which emits C++ on a CPU):
``compiled_recurrence`` unrolls ``UNROLL`` tokens into one compiled call, so it makes
one Python call per 64 tokens, as the chunkwise form makes one pass of its loop per
chunk of 64, and inductor fuses each token's decay, read, correction and write into a
few loops over the (d_k, d_v) state. Unrolling fewer tokens was slower here (one token
per compiled call: about 10 times slower than 64). ``delta.chunk_speedup_vs_compiled_t4096_bh4``
is chunkwise time / compiled-recurrence time; compiling costs a minute or two the
first time and is cached by inductor afterwards (not timed).

Its goal (>= 2) is missed on one CPU core, and the arithmetic says why:
per token and head the recurrence does 4 d^2 multiply-adds (decay, read, write, output
over the d_k x d_v state) and the chunkwise form 4 C d + 3 d^2 (four C x C products of
length d, three products with the state), 1.75 times more at C = d = 64. Beating the
compiled loop by 2 needs the chunkwise code to run at 3.5 times the loop's rate of
multiply-adds. On the AVX2 EPYC of 2026-11-30 that is above what one large torch.matmul
reaches on one core (the flash records' note gives its GFLOP/s); on the AVX-512 EPYC of
2026-12-01 it is about 57 GFLOP/s, 60% of a large matmul's 96, to be reached with 64 x 64
products and a triangular solve, where our PyTorch code runs at 14 to 20. Other chunk
sizes did not close the gap there (C = 16, 32, 64, 128: 48, 45, 47, 66 ms against the
compiled loop's 33 ms, one thread, unpaired). Chapter 6 ("Against a compiled loop, on
one core") says so with the measured ratio."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from benchmarks.records import Record, median_ratio, paired_times
from benchmarks.solutions import load_solutions

T, D, CHUNK = 4096, 64, 64
ROUNDS = 3  # the recurrence takes about half a second a call
UNROLL = 64  # tokens per compiled call of the recurrence, the chunk size of the chunkwise form


def _recurrence_block(state, q, k, v, alpha, beta):
    """UNROLL tokens of the gated delta rule, one token at a time (unrolled by the tracer).

    state: (B, H, d_k, d_v) holding S^T; q (l2-normalised and scaled), k (l2-normalised):
    (B, U, H, d_k); v: (B, U, H, d_v); alpha = exp(g), beta: (B, U, H).
    Returns the new state and o: (B, U, H, d_v)."""
    outs = []
    for t in range(q.shape[1]):
        k_t = k[:, t, :, :, None]  # (B, H, d_k, 1)
        state = state * alpha[:, t, :, None, None]  # decay first: alpha_t S_{t-1}
        predicted = (k_t * state).sum(-2)  # (B, H, d_v): S_{t-1} k_t
        delta = beta[:, t, :, None] * (v[:, t] - predicted)  # (B, H, d_v)
        state = state + k_t * delta[:, :, None, :]  # (B, H, d_k, d_v)
        outs.append((q[:, t, :, :, None] * state).sum(-2))  # (B, H, d_v)
    return state, torch.stack(outs, dim=1)


def compiled_recurrence(sol):
    """gated_delta_rule_recurrent of the solutions, its token loop compiled by inductor in
    blocks of UNROLL tokens; returns fn(q, k, v, g, beta) -> (o, final_state)."""
    block = torch.compile(_recurrence_block, dynamic=False)

    def run(q, k, v, g, beta):
        B, T_, H, d_k = q.shape
        q, k = sol.l2norm(q) * d_k**-0.5, sol.l2norm(k)  # (B, T, H, d_k)
        alpha = g.exp()  # (B, T, H)
        state = q.new_zeros(B, H, d_k, v.shape[-1])  # (B, H, d_k, d_v)
        outs = []
        for t0 in range(0, T_, UNROLL):
            t1 = t0 + UNROLL
            state, o = block(state, q[:, t0:t1], k[:, t0:t1], v[:, t0:t1], alpha[:, t0:t1], beta[:, t0:t1])
            outs.append(o)
        return torch.cat(outs, dim=1), state

    return run


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
    # The stronger peer: the same recurrence, compiled (B=1, H=4).
    q, k, v, g, beta = _inputs(1, 4, seed=6)
    compiled = compiled_recurrence(sol)  # a failure to compile raises here, with inductor's error
    start = time.perf_counter()
    o_comp, _ = compiled(q, k, v, g, beta)
    compile_s = time.perf_counter() - start
    o_rec, _ = sol.gated_delta_rule_recurrent(q, k, v, g, beta)
    comp_err = (o_comp - o_rec).abs().max().item()
    assert comp_err < 1e-4, f"the compiled recurrence differs from the solution's by {comp_err}"
    t_comp, t_chunk, t_rec = paired_times([lambda: compiled(q, k, v, g, beta),
                                           lambda: sol.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=CHUNK),
                                           lambda: sol.gated_delta_rule_recurrent(q, k, v, g, beta)],
                                          rounds=ROUNDS)
    records.append(Record("delta.chunk_speedup_vs_compiled_t4096_bh4", median_ratio(t_comp, t_chunk), "x", ">= 2",
                          note=f"median of {ROUNDS} paired rounds; best: torch.compile'd recurrence "
                               f"({UNROLL} tokens per call) {min(t_comp) * 1e3:.1f} ms, chunkwise "
                               f"{min(t_chunk) * 1e3:.1f} ms, eager recurrence {min(t_rec) * 1e3:.1f} ms; "
                               f"compiled / eager recurrence {median_ratio(t_comp, t_rec):.3f}; first call "
                               f"(compiling, or loading inductor's cache) {compile_s:.0f} s; max |compiled - eager| "
                               f"{comp_err:.1e}; B=1 H=4 d={D} C={CHUNK} fp32; multiply-adds per token: "
                               f"chunkwise {4 * CHUNK * D + 3 * D * D}, recurrence {4 * D * D}"))
    records.append(Record("delta.chunk_max_abs_err", max_err, "abs", "<= 1e-4",
                          note="max |chunkwise - recurrent| over the outputs of both runs, fp32"))
    return records
