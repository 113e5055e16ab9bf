"""The batch grader is restartable: killed with SIGKILL at a random moment, a ``--resume``
run completes the gradebook with no row missing and none twice.

Five students hand in Chapter 1 (three solved, two stubs). The batch is started, killed
once some chapters are done (a random number of them, plus a random fraction of a second,
so the kill lands between rows as well as in the middle of writing one), and resumed.
"""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grading.layout import EXERCISES, ROOT, SOLUTIONS

STEM = "01_kv_memory"
SOLVED, STUBS = ("ann", "bea", "cal"), ("dov", "eli")
pytestmark = pytest.mark.timeout(900)


def _batch(subs: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "grading.batch", str(subs), "--out", str(out), "--chapters", "1",
            "--workers", "2", "--timeout", "300", "--quiet", *extra]


def _rows(out: Path) -> list[dict]:
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_killed_batch_resumes_to_a_complete_gradebook(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    for name in SOLVED + STUBS:
        (subs / name).mkdir(parents=True)
        source = SOLUTIONS if name in SOLVED else EXERCISES
        (subs / name / f"{STEM}.ipynb").write_bytes((source / f"{STEM}.ipynb").read_bytes())
    rng = random.Random(time.time_ns())
    kill_after = rng.randint(1, len(SOLVED + STUBS) - 1)  # chapters finished before the kill
    extra_delay = rng.uniform(0.0, 1.0)
    proc = subprocess.Popen(_batch(subs, out), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = out / ".done"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if done.exists() and len(done.read_text().splitlines()) >= kill_after:
            break
        time.sleep(0.05)
    time.sleep(extra_delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    where = f"(killed after {kill_after} chapters + {extra_delay:.2f} s)"

    resumed = subprocess.run(_batch(subs, out, "--resume"), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = [r for r in _rows(out) if r["exercise"]]
    keys = [(r["student"], r["chapter"], r["exercise"]) for r in rows]
    assert len(keys) == len(set(keys)), f"rows twice in the gradebook {where}"
    exercises = {r["exercise"] for r in rows}
    assert len(exercises) >= 6
    for student in SOLVED + STUBS:
        mine = [r for r in rows if r["student"] == student]
        assert {r["exercise"] for r in mine} == exercises, f"{student}: rows missing {where}"
        want = "passed" if student in SOLVED else "not attempted"
        assert all(r["status"] == want for r in mine), f"{student} {where}: {mine}"
        assert (out / "feedback" / f"{student}.md").is_file()
    assert (out / "needs_review.md").is_file()
