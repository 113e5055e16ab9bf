"""Whole-process times of the three make targets a user runs (the venv already exists).

``book.build_cold_seconds``: ``make book`` with the execution cache and HTML removed, so
every chapter executes; ``book.build_cached_seconds``: the same again, nothing changed;
``test.suite_seconds``: ``make test``. The 600 s goal is the project's budget for
``make test`` on a 2-core machine.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from benchmarks.records import Record
from grading.layout import ROOT

TEST_BUDGET_S = 600


def _timed(*cmd: str) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    return time.perf_counter() - start


def run() -> list[Record]:
    shutil.rmtree(ROOT / "_build" / "html", ignore_errors=True)
    shutil.rmtree(ROOT / "_build" / ".jupyter_cache", ignore_errors=True)
    shutil.rmtree(ROOT / "_build" / ".doctrees", ignore_errors=True)
    cold = _timed("make", "--no-print-directory", "book")
    cached = _timed("make", "--no-print-directory", "book")
    suite = _timed("make", "--no-print-directory", "test")
    return [
        Record("book.build_cold_seconds", cold, "s"),
        Record("book.build_cached_seconds", cached, "s"),
        Record("test.suite_seconds", suite, "s", f"<= {TEST_BUDGET_S}"),
    ]
