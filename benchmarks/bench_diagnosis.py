"""``make bench`` records of the diagnosis from the catalogue (grading.diagnosis).

- ``diagnose.catalogue_recall``: of every catalogue bug, injected alone into its chapter's
  solution and graded by ``pytest --prove`` on this machine, the fraction that the stored
  table (``tests/diagnosis/``) diagnoses as itself. Goal ``>= 0.9``.
- ``diagnose.false_diagnoses``: injections diagnosed as another bug. Goal ``== 0``.
- ``grade.diagnosis_cost``: ``python -m grading.batch`` on one all-wrong Chapter 1
  submission (one catalogue bug in every exercise), with the diagnosis divided by without
  it (``GRADING_DIAGNOSIS=off``), the median of paired rounds. Goal ``<= 2``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from benchmarks.records import Record, median_ratio
from grading.layout import ROOT, SOLUTIONS, discover_chapters
from grading.notebook.catalogue import load_catalogue

COST_CHAPTER = "01_kv_memory"
COST_ROUNDS = 3


def _proof() -> dict:
    """Run every catalogue bug through its graders (only the bugs: ``-k bug-``) and read
    the proof the plugin writes."""
    files = [str(c.test_file) for c in discover_chapters()]
    proof = ROOT / "_build" / "diagnosis" / "proof.json"
    proof.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "pytest", *files, "--prove", "-k", "bug-", "-q", "-p", "no:cacheprovider",
                    "-n", str(os.cpu_count() or 1)], cwd=ROOT, capture_output=True, text=True)
    if not proof.exists():
        raise RuntimeError("pytest --prove wrote no _build/diagnosis/proof.json")
    return json.loads(proof.read_text())


def _all_wrong(folder: Path) -> Path:
    """A submission whose every exercise of Chapter 1 carries the first catalogue bug of it."""
    nb = nbformat.read(SOLUTIONS / f"{COST_CHAPTER}.ipynb", as_version=4)
    done = set()
    for bug in load_catalogue(COST_CHAPTER):
        if bug.exercise not in done:
            nb = bug.apply(nb, f"{COST_CHAPTER}.ipynb")
            done.add(bug.exercise)
    student = folder / "subs" / "student"
    student.mkdir(parents=True)
    nbformat.write(nb, student / f"{COST_CHAPTER}.ipynb")
    return student.parent


def _grade(subs: Path, out: Path, diagnosis: bool) -> tuple[float, int]:
    env = {**os.environ, "GRADING_DIAGNOSIS": "on" if diagnosis else "off"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(subs), "--out", str(out), "--chapters",
                           COST_CHAPTER[:2], "--quiet"], cwd=ROOT, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"grading.batch exited with {proc.returncode}: {proc.stderr[-500:]}")
    return seconds, (out / "gradebook.csv").read_text().count("known mistake")


def run() -> list[Record]:
    proof = _proof()
    totals = proof["totals"]
    missed = [f"{name} ({why})" for p in proof["chapters"].values() for name, why in p["missed"].items()]
    records = [
        Record("diagnose.catalogue_recall", totals["recall"], "fraction", ">= 0.9",
               note=f"{totals['recalled']} of {totals['bugs']} bugs"
               + ("; not diagnosed: " + "; ".join(missed)[:1500] if missed else ", every one diagnosed as itself")),
        Record("diagnose.false_diagnoses", totals["false_diagnoses"], "count", "== 0",
               note="catalogue injections diagnosed as another bug"),
    ]
    with tempfile.TemporaryDirectory(prefix="bench-diagnosis-") as tmp:
        subs = _all_wrong(Path(tmp))
        on, off, named = [], [], 0
        for r in range(COST_ROUNDS):
            seconds, named = _grade(subs, Path(tmp) / f"on{r}", True)
            on.append(seconds)
            off.append(_grade(subs, Path(tmp) / f"off{r}", False)[0])
        records.append(Record("grade.diagnosis_cost", median_ratio(on, off), "ratio", "<= 2",
                              note=f"one all-wrong {COST_CHAPTER} submission, {COST_ROUNDS} paired rounds: with "
                                   f"diagnosis {min(on):.1f} s, without {min(off):.1f} s (best); {named} exercises "
                                   "diagnosed"))
    return records
