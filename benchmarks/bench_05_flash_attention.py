"""Chapter 5: the blocked flash attention of solutions/05_flash_attention.ipynb against
PyTorch's fused ``scaled_dot_product_attention`` on this CPU, and against naive attention
for memory.

- ``flash.cpu_vs_sdpa_n4096``: time of ``flash_attention`` / time of SDPA, fp32,
  B=1, H=8, N=4096, d=64, non-causal (goal <= 1.5);
- ``flash.causal_cpu_vs_sdpa_n4096``: the same, causal (goal <= 1.5);
- ``flash.peak_mem_naive_over_flash_n8192``: peak memory of naive
  attention (the N x N score matrix) over that of ``flash_attention``, N=8192 (goal >= 10);
- ``flash.causal_speedup_over_full``: ``flash_attention`` non-causal time / causal
  time, N=4096 (goal >= 1.6: causal skips the tiles above the diagonal).

Both sides run in this process with the same inputs and threads, interleaved call by
call (see ``interleaved_best_times``).
Peak memory is the chapter's ``PeakMemory`` meter: the most bytes held at once by the
tensors created during the call (the CPU allocator keeps no statistics of its own).
H=2 for the memory record keeps naive attention's 8192 x 8192 scores at 0.5 GiB a copy;
the ratio does not depend on H, since both sides scale with it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.records import Record, best_time
from grading import load_solutions

B, H, N, D = 1, 8, 4096, 64
MEM_N, MEM_H = 8192, 2  # H=2 keeps naive attention's 8192 x 8192 scores at 0.5 GiB per copy


def interleaved_best_times(fns, repeat: int = 5) -> list[float]:
    """``best_time`` for several functions at once: each round runs every function once,
    in turn, so a burst of load on a shared machine slows all sides alike; the minimum
    over rounds is kept for each."""
    for fn in fns:  # warm-up
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], best_time(fn, repeat=1, warmup=0))
    return best


def peak_bytes(sol, fn, q, k, v) -> int:
    with sol.PeakMemory() as meter:
        out = fn(q, k, v)
        del out
    return meter.peak


def run() -> list[Record]:
    sol = load_solutions("05_flash_attention")
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, N, D) for _ in range(3))
    # correctness first: a fast wrong answer is not a result
    for causal in (False, True):
        err = (sol.flash_attention(q, k, v, causal=causal) - F.scaled_dot_product_attention(q, k, v, is_causal=causal)).abs().max()
        assert err < 1e-4, f"flash_attention differs from SDPA by {err} (causal={causal})"

    t_sdpa, t_flash, t_sdpa_causal, t_flash_causal = interleaved_best_times([
        lambda: F.scaled_dot_product_attention(q, k, v),
        lambda: sol.flash_attention(q, k, v),
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda: sol.flash_attention(q, k, v, causal=True),
    ])

    qm, km, vm = (torch.randn(1, MEM_H, MEM_N, D) for _ in range(3))
    naive_bytes = peak_bytes(sol, sol.naive_attention, qm, km, vm)
    flash_bytes = peak_bytes(sol, sol.flash_attention, qm, km, vm)
    del qm, km, vm
    shape = f"B={B} H={H} N={N} d={D} fp32, {torch.get_num_threads()} threads"
    return [
        Record("flash.cpu_vs_sdpa_n4096", t_flash / t_sdpa, "x", "<= 1.5",
               note=f"{shape}: flash {t_flash * 1e3:.0f} ms, SDPA {t_sdpa * 1e3:.0f} ms"),
        Record("flash.causal_cpu_vs_sdpa_n4096", t_flash_causal / t_sdpa_causal, "x", "<= 1.5",
               note=f"{shape}, causal: flash {t_flash_causal * 1e3:.0f} ms, SDPA {t_sdpa_causal * 1e3:.0f} ms"),
        Record("flash.peak_mem_naive_over_flash_n8192", naive_bytes / flash_bytes, "x", ">= 10",
               note=f"B=1 H={MEM_H} N={MEM_N} d={D} fp32, peak bytes of tensors made during the call: "
                    f"naive {naive_bytes / 2**20:.0f} MiB, flash {flash_bytes / 2**20:.1f} MiB (output included)"),
        Record("flash.causal_speedup_over_full", t_flash / t_flash_causal, "x", ">= 1.6",
               note=f"{shape}: full {t_flash * 1e3:.0f} ms, causal {t_flash_causal * 1e3:.0f} ms"),
        Record("flash.sdpa_ms_n4096", t_sdpa * 1e3, "ms", note=f"{shape}: the peer's own time, for context"),
    ]
