"""``make bench`` records for Chapter 7: the Triton kernels under the interpreter, on CPU.

- ``triton.interp_max_abs_err``: max abs error of the solution's flash attention kernel
  against fp64 dense attention, fp32, N=300, d=64, causal, run by TRITON_INTERPRET=1.
- ``triton.interp_suite_seconds``: wall time of the chapter's graders on solutions/
  (``pytest tests/test_07_triton_kernels.py -n 2``), every kernel under the interpreter.

The GPU comparison with ``scaled_dot_product_attention`` needs CUDA and lives in
``benchmarks/gpu_07_triton_kernels.py``; it is not part of ``make bench``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
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
    command = [sys.executable, "-m", "pytest", "tests/test_07_triton_kernels.py", "-q", "-n", "2", "-p", "no:cacheprovider"]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    seconds = time.perf_counter() - start
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    if proc.returncode != 0:
        raise RuntimeError(f"the Chapter 7 graders failed on solutions/ ({summary}); timing them means nothing\n"
                           + proc.stdout[-3000:])
    return Record("triton.interp_suite_seconds", seconds, "s", "<= 60", note=f"pytest -n 2: {summary}")


def run() -> list[Record]:
    return [interp_max_abs_err(), interp_suite_seconds()]
