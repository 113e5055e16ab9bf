"""Load a solution notebook for timing, keeping the thread count ``make bench`` chose.

Every notebook calls ``torch.set_num_threads(1)`` so that its stored outputs are
reproducible. Executed inside a benchmark, that call would silently time our code and
the peer on one thread while the results claim ``BENCH_THREADS`` (all cores by
default). This loader puts the caller's thread count back.
"""

from __future__ import annotations

import torch

from grading import load_solutions as _load_solutions
from grading.notebook.loader import LoadedNotebook


def load_solutions(stem: str) -> LoadedNotebook:
    """``grading.load_solutions(stem)`` without the notebook's change to torch's threads;
    raises if a cell of the notebook failed."""
    threads = torch.get_num_threads()
    try:
        sol = _load_solutions(stem)
    finally:
        torch.set_num_threads(threads)
    if sol.errors:  # a half-loaded notebook would time whatever happened to be defined
        raise RuntimeError(f"solutions/{stem}.ipynb did not load: {sol.errors}")
    return sol
