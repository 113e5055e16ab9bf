"""``make bench`` records for Chapter 7: the Triton kernels under the interpreter, on CPU.

- ``triton.interp_max_abs_err``: max abs error of the solution's flash attention kernel
  against fp64 dense attention, fp32, N=300, d=64, causal, run by TRITON_INTERPRET=1.
- ``triton.interp_suite_seconds``: wall time of the chapter's graders on solutions/
  (``pytest tests/test_07_triton_kernels.py -n 2``), every kernel under the interpreter.
- ``triton.compiled_sm90_spill_bytes``: bytes per thread that ``ptxas`` spills when the
  solution's flash kernel is compiled for an H100 (sm_90, bf16, d=128) at the wrapper's
  default block sizes, on this CPU (gpucompile). Goal 0.
- ``triton.compile_check_seconds``: wall time of the graders' compile check alone
  (``-k compiles -n 2``: every graded kernel for sm_80 and sm_90) with an empty Triton
  cache, which is what it adds to grading a new submission.

The GPU comparison with ``scaled_dot_product_attention`` needs CUDA and lives in
``benchmarks/gpu_07_triton_kernels.py``; it is not part of ``make bench``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.records import Record
from benchmarks.solutions import load_solutions
from tests.references import ref_07_triton_kernels as ref

ROOT = Path(__file__).resolve().parent.parent
SUITE_TIMEOUT_S = 600


@contextlib.contextmanager
def _interpreter():
    """TRITON_INTERPRET=1 while kernels are defined and launched (Triton reads it at both
    times), GPU or not; the previous value afterwards."""
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous


def interp_max_abs_err() -> Record:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 300, 64, generator=g)  # (B, H, N, d)
    k, v = torch.randn(1, 2, 300, 64, generator=g), torch.randn(1, 2, 300, 64, generator=g)  # (B, H_kv, N, d)
    with _interpreter():
        sol = load_solutions("07_triton_kernels")
        out, _ = sol.flash_attention(q, k, v, causal=True)
    expected, _ = ref.attention(q, k, v, causal=True)
    err = (out.double() - expected).abs().max().item()
    return Record("triton.interp_max_abs_err", err, "abs", "<= 1e-5",
                  note="fp32, B1 H4 Hkv2 N300 d64 causal, TRITON_INTERPRET=1, vs fp64 dense attention")


def interp_suite_seconds() -> Record:
    command = [sys.executable, "-m", "pytest", "tests/test_07_triton_kernels.py", "-q", "-n", "2", "-p",
               "no:cacheprovider"]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    seconds = time.perf_counter() - start
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    if proc.returncode != 0:
        raise RuntimeError(f"the Chapter 7 graders failed on solutions/ ({summary}); timing them means nothing\n"
                           + proc.stdout[-3000:])
    return Record("triton.interp_suite_seconds", seconds, "s", "<= 60", note=f"pytest -n 2: {summary}")


def compiled_sm90_spill_bytes() -> Record:
    from gpucompile import compile_kernel
    from gpucompile.chapter07 import FLASH_DEFAULTS, flash_request

    with _interpreter():
        sol = load_solutions("07_triton_kernels")
    usage = compile_kernel(**flash_request(sol.flash_fwd_kernel, "sm_90")).usage
    return Record("triton.compiled_sm90_spill_bytes", usage.spill_bytes, "bytes", "== 0",
                  note=f"flash_fwd_kernel, bf16, d=128, {FLASH_DEFAULTS}: {usage.registers} registers, "
                       f"{usage.shared_bytes} bytes of shared memory")


def compile_check_seconds() -> Record:
    command = [sys.executable, "-m", "pytest", "tests/test_07_triton_kernels.py", "-q", "-n", "2", "-k", "compiles",
               "-p", "no:cacheprovider"]
    with tempfile.TemporaryDirectory(prefix="triton-cache-") as cache:
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S,
                              env={**os.environ, "TRITON_CACHE_DIR": cache})
        seconds = time.perf_counter() - start
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    if proc.returncode != 0:
        raise RuntimeError(f"the Chapter 7 compile checks failed on solutions/ ({summary})\n" + proc.stdout[-3000:])
    return Record("triton.compile_check_seconds", seconds, "s", "report",
                  note=f"pytest -k compiles -n 2, empty Triton cache: {summary}")


def run() -> list[Record]:
    return [interp_max_abs_err(), interp_suite_seconds(), compiled_sm90_spill_bytes(), compile_check_seconds()]
