"""``make bench`` records of the class run and its judges.

- ``grade.one_submission_seconds``: wall time of ``python -m grading.batch`` on one
  complete, correct submission (every chapter that has a solution), default workers.
- ``grade.solutions_full_marks``: the fraction of that submission's graded rows that
  passed; the solutions graded as a student's notebooks must score 1.0.
- ``grade.parallel_efficiency``: 8 such submissions with 1 worker, divided by twice
  the time with 2 workers (1.0: two workers halve the time).

- ``grade.sandbox_overhead``: the same one submission graded in the bubblewrap sandbox,
  divided by the time without it (``GRADING_SANDBOX=none``): the median of paired rounds.
  (What a hostile class earns, and what isolation costs: benchmarks/bench_integrity.py.)

- ``grade.peak_rss_mb_max``: the largest, over chapters, of the memory a
  Gradescope container must hold to grade that chapter: the proportional set size (PSS:
  shared pages counted once) of the whole process tree of ``python -m grading.gradescope run``
  (front door, sandbox, judge and its subprocesses), sampled while the chapter is graded, on ``solutions/``.
  Goal: within Gradescope's default 768 MB container.
- ``grade.gradescope_peak_mib_grader_env``: the same peak, for an
  ``autograder.zip`` of Chapters 1 and 11 run by its own ``run_autograder`` as in
  ``tests/meta/test_gradescope.py``, in the environment ``setup.sh`` makes (the zip's
  ``requirements-grader.txt``, hard-linked from ``.venv`` by
  ``tests/meta/isolated_python.py``); the note gives the same run in the author's whole
  stack (every package of ``.venv``), run after it, one at a time: what the smaller pin set saves.
- ``grade.gradescope_results_valid``: of the three simulated Gradescope runs
  of Chapter 1 (solved, unsolved, crashing; built, unpacked and run as in
  ``tests/meta/test_gradescope.py``), the fraction whose ``results.json`` validates
  against ``tests/gradescope_results.schema.json`` and whose score equals the batch
  grader's for the same notebook.

- ``grade.single_exercise_startup_s``: wall time of the command a student runs most, one
  exercise of Chapter 1 (``python -m pytest tests/test_01_kv_memory.py -k ex1_1``), the
  median of rounds after one that warms the caches: pytest's start, the judge's imports,
  the contestants' zygote and its first contestant, and under a second of tests. The
  note gives the part pytest itself counts (collection and tests).

They run the real command in a subprocess, exactly as an instructor would, on
copies of ``solutions/``; a run that does not give full marks is reported in the note,
a run that stops (exit status not 0) fails the module instead of recording a time.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.records import Record, median_ratio
from grading.layout import ROOT, discover_chapters
from grading.proc import sandbox


def _submissions(folder: Path, count: int, stems: list[str]) -> Path:
    subs = folder / f"subs{count}"
    for n in range(count):
        student = subs / f"student{n:02d}"
        student.mkdir(parents=True)
        for stem in stems:
            shutil.copyfile(ROOT / "solutions" / f"{stem}.ipynb", student / f"{stem}.ipynb")
    return subs


SANDBOX_ROUNDS = 3


def _grade(subs: Path, out: Path, workers: int, env: dict | None = None) -> tuple[float, str, float]:
    """Seconds for the whole command, "" or what went wrong, and the fraction of
    graded rows that passed (1.0: the solutions got full marks, as they must)."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(subs), "--out", str(out), "--workers",
                           str(workers), "--quiet"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - start
    if proc.returncode != 0:  # e.g. the graders changed under it: the time means nothing
        raise RuntimeError(f"grading.batch exited with {proc.returncode}: {proc.stderr[-500:]}")
    with open(out / "gradebook.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["exercise"] and r["status"] != "skipped"]
    bad = [r for r in rows if r["status"] != "passed"]
    problem = f"{len(bad)} rows not passed, e.g. {bad[0]['chapter']} {bad[0]['exercise']} {bad[0]['status']}: " \
              f"{bad[0]['message'][:80]}" if bad else ""
    return seconds, problem, (len(rows) - len(bad)) / max(len(rows), 1)


STARTUP_ROUNDS = 5
STARTUP_COMMAND = ["-m", "pytest", "tests/test_01_kv_memory.py", "-k", "ex1_1", "-q", "-p", "no:cacheprovider"]


def startup_record() -> Record:
    """grade.single_exercise_startup_s: the median of STARTUP_ROUNDS runs of STARTUP_COMMAND."""
    def once() -> tuple[float, float]:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, *STARTUP_COMMAND], cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        counted = re.search(r" in ([0-9.]+)s", proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "")
        if proc.returncode != 0 or counted is None:
            raise RuntimeError(f"{' '.join(STARTUP_COMMAND)} exited with {proc.returncode}: {proc.stdout[-500:]}")
        return seconds, float(counted.group(1))

    once()  # a warm-up: bytecode cached, files in the page cache, as for every run but a student's first
    rounds = [once() for _ in range(STARTUP_ROUNDS)]
    return Record("grade.single_exercise_startup_s", statistics.median(r[0] for r in rounds), "s", "<= 5",
                  note=f"{' '.join(STARTUP_COMMAND[1:6])}: median of {STARTUP_ROUNDS} rounds; pytest's own "
                       f"count (collection and tests) {statistics.median(r[1] for r in rounds):.2f} s; "
                       f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")


def run() -> list[Record]:
    stems = [c.stem for c in discover_chapters()]
    chapters = len(stems)
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        startup = startup_record()
        one = _submissions(tmp, 1, stems)
        seconds, problem, passed = _grade(one, tmp / "out1", os.cpu_count() or 1)
        records = [startup, Record("grade.one_submission_seconds", seconds, "s", "<= 120",
                          note=f"{chapters} chapters, {os.cpu_count()} workers" + (f"; {problem}" if problem else "")),
                   Record("grade.solutions_full_marks", passed, "fraction", "== 1.0",
                          note="graded rows of solutions/, submitted as a student's, that passed" +
                               (f"; {problem}" if problem else ""))]
        eight = _submissions(tmp, 8, stems)
        serial, p1, _ = _grade(eight, tmp / "out8w1", 1)
        parallel, p2, _ = _grade(eight, tmp / "out8w2", 2)
        notes = [f"8 submissions x {chapters} chapters: 1 worker {serial:.1f} s, 2 workers {parallel:.1f} s"]
        notes += [p for p in (p1, p2) if p]
        records.append(Record("grade.parallel_efficiency", serial / (2 * parallel), "ratio", ">= 0.8",
                              note="; ".join(notes)))
        if sandbox.status().sandboxed:
            # Paired rounds, back to back: the sandboxed run, then the same without it.
            boxed, bare = [], []
            for _ in range(SANDBOX_ROUNDS):
                boxed.append(_grade(one, tmp / "out-box", os.cpu_count() or 1)[0])
                bare.append(_grade(one, tmp / "out-bare", os.cpu_count() or 1, {"GRADING_SANDBOX": "none"})[0])
            records.append(Record("grade.sandbox_overhead", median_ratio(boxed, bare), "ratio", "<= 1.15",
                                  note=f"one submission, {chapters} chapters, {SANDBOX_ROUNDS} paired rounds: "
                                       f"sandboxed {min(boxed):.1f} s, unsandboxed {min(bare):.1f} s (best)"))
        else:
            records.append(Record("grade.sandbox_overhead", float("nan"), "ratio", "<= 1.15",
                                  note=f"not measured: {sandbox.status().line}"))
        records += gradescope_records(tmp / "gradescope", stems)
    return records


PEAK_SAMPLE_S = 0.05  # how often the process tree's memory is read


def _proportional_bytes(process) -> int:
    """A process's proportional set size (PSS: each page shared by n processes counts
    1/n), so that a fork, whose pages are its parent's until written, is not counted
    twice as resident sizes would; RSS where PSS cannot be read."""
    try:
        return process.memory_full_info().pss
    except (AttributeError, OSError):
        return process.memory_info().rss


def tree_peaks(command: list[str], cwd: Path, env: dict | None = None) -> tuple[dict[str, float], str, int]:
    """Run ``command`` (the Gradescope front door, which prints ``grading <stem>`` as each
    chapter starts) and sample the memory of its whole process tree (the front door, the
    sandbox, the judge and whatever it starts) every PEAK_SAMPLE_S: the peak while
    each chapter is graded is what a container must hold. Returns {stem: peak MiB}, the
    log and the exit status."""
    import threading

    import psutil

    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    current = {"stem": None}
    log: list[str] = []

    def follow():
        for line in proc.stdout:
            log.append(line)
            if line.startswith("grading "):
                current["stem"] = line.split()[1]

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    peaks: dict[str, float] = {}
    top = psutil.Process(proc.pid)
    while proc.poll() is None:
        total = 0
        try:
            for p in [top, *top.children(recursive=True)]:
                try:
                    total += _proportional_bytes(p)
                except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
                    pass
        except psutil.NoSuchProcess:
            break
        stem = current["stem"]
        if stem:
            peaks[stem] = max(peaks.get(stem, 0.0), total / 2**20)
        time.sleep(PEAK_SAMPLE_S)
    reader.join(timeout=10)
    return peaks, "".join(log), proc.returncode


def peak_rss_record(base: Path, stems: list[str]) -> Record:
    """Grade solutions/ (every chapter) through the Gradescope front door, as
    run_autograder does, in this repository's environment, and report the process
    tree's peak per chapter (:func:`tree_peaks`). The child's own ``ru_maxrss``
    (results.json) is reported beside it."""
    root = base / "peak-root"
    (root / "submission").mkdir(parents=True)
    for stem in stems:
        shutil.copyfile(ROOT / "solutions" / f"{stem}.ipynb", root / "submission" / f"{stem}.ipynb")
    peaks, log, returncode = tree_peaks([sys.executable, "-m", "grading.gradescope", "run", "--root", str(root)],
                                        ROOT)
    results = json.loads((root / "results" / "results.json").read_text())
    own = results.get("extra_data", {}).get("peak_rss_mb", {})
    if returncode != 0 or not own or not peaks:
        raise RuntimeError(f"grading.gradescope run failed: {results.get('output', '')[:300]} {log[-300:]}")
    worst = max(peaks, key=peaks.get)
    return Record("grade.peak_rss_mb_max", peaks[worst], "MiB", "<= 700",
                  note=f"worst {worst}; process tree's PSS per chapter, sampled every {PEAK_SAMPLE_S:g} s (MiB): "
                       + ", ".join(f"{s} {mb:.0f}" for s, mb in sorted(peaks.items()))
                       + "; the judge's own ru_maxrss: "
                       + ", ".join(f"{s} {mb:.0f}" for s, mb in sorted(own.items()))
                       + f"; score {results['score']:g} of "
                       + f"{sum(x['max_score'] for x in results['tests']):g}"
                       + "".join(f"; {x['number']} {x['output'][:80]}" for x in results["tests"]
                                 if x.get("status") == "failed"))


# The chapters of the assignment whose peak was measured on Gradescope itself:
# 678-685 MiB there, with the author's whole stack installed.
GRADER_ENV_CHAPTERS = "1,11"


def gradescope_env_peaks(base: Path, whole_stack: bool, chapters: str = GRADER_ENV_CHAPTERS
                         ) -> tuple[dict[str, float], dict]:
    """``run_autograder`` of an ``autograder.zip`` of ``chapters``, unpacked as Gradescope
    unpacks it, on solutions/, with the Python setup.sh makes: the distributions the zip's
    ``requirements-grader.txt`` pins (``whole_stack``: every package of ``.venv`` instead,
    the author's ``requirements.txt``), not this checkout (tests/meta/isolated_python.py).
    Returns the process tree's peak per chapter (:func:`tree_peaks`) and results.json."""
    from grading import gradescope
    from tests.meta.gradescope_harness import autograder_root
    from tests.meta.isolated_python import clean_env, make_isolated_python

    name = "whole" if whole_stack else "grader"
    zip_path = gradescope.build(base / f"build-{name}", chapters=chapters)
    root = autograder_root(zip_path, base / f"root-{name}")
    for chapter in discover_chapters(only=chapters.split(",")):
        shutil.copyfile(ROOT / "solutions" / f"{chapter.stem}.ipynb", root / "submission" / f"{chapter.stem}.ipynb")
    pins = None if whole_stack else (root / "source" / gradescope.GRADER_PINS).read_text()
    python = make_isolated_python(base / f"venv-{name}", pins)
    peaks, log, returncode = tree_peaks(["bash", str(root / "run_autograder")], root,
                                        clean_env(AUTOGRADER_PYTHON=str(python)))
    results = json.loads((root / "results" / "results.json").read_text())
    if returncode != 0 or not peaks or "failure" in results.get("extra_data", {}):
        raise RuntimeError(f"run_autograder failed: {results.get('output', '')[:300]} {log[-300:]}")
    return peaks, results


def grader_env_peak_record(base: Path) -> Record:
    """``grade.gradescope_peak_mib_grader_env``: the largest, over Chapters 1 and 11, of
    the process tree's peak under run_autograder in the environment setup.sh makes, with
    the same run in the author's whole stack in the note (what the smaller pin set saves)."""
    small, results = gradescope_env_peaks(base / "grader", whole_stack=False)
    whole, _ = gradescope_env_peaks(base / "whole", whole_stack=True)
    worst = max(small, key=small.get)
    return Record("grade.gradescope_peak_mib_grader_env", small[worst], "MiB", "<= 700",
                  note=f"run_autograder, CHAPTERS={GRADER_ENV_CHAPTERS}, solutions/; process tree's PSS, sampled "
                       f"every {PEAK_SAMPLE_S:g} s (MiB), requirements-grader.txt: "
                       + ", ".join(f"{s} {mb:.0f}" for s, mb in sorted(small.items()))
                       + "; the whole requirements.txt: "
                       + ", ".join(f"{s} {mb:.0f}" for s, mb in sorted(whole.items()))
                       + f"; score {results['score']:g} of {sum(x['max_score'] for x in results['tests']):g}")


def gradescope_records(base: Path, stems: list[str]) -> list[Record]:
    """grade.peak_rss_mb_max and grade.gradescope_results_valid."""
    import jsonschema
    import nbformat

    from grading import gradescope
    from tests.meta.gradescope_harness import SCHEMA, STEM, SUBMISSIONS, autograder_root, run_autograder

    records = [peak_rss_record(base, stems), grader_env_peak_record(base / "envs")]
    zip_path = gradescope.build(base / "build", chapters="1")
    subs = base / "class"
    scores = {}
    for name, make in SUBMISSIONS.items():
        root = autograder_root(zip_path, base / f"root-{name}")
        nbformat.write(make(), root / "submission" / f"{STEM}.ipynb")
        (subs / name).mkdir(parents=True)
        nbformat.write(make(), subs / name / f"{STEM}.ipynb")
        run_autograder(root)
        scores[name] = json.loads((root / "results" / "results.json").read_text()) if (
            root / "results" / "results.json").exists() else {}
    out = base / "batch-out"
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(subs), "--out", str(out), "--chapters", "1",
                           "--quiet"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"grading.batch exited with {proc.returncode}: {proc.stderr[-500:]}")
    with open(out / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    good, notes = 0, []
    for name, results in scores.items():
        batch = sum(float(r["points"]) for r in rows if r["student"] == name and r["exercise"])
        try:
            jsonschema.validate(results, SCHEMA)
            same = abs(results["score"] - batch) < 1e-3
        except jsonschema.ValidationError as exc:
            same = False
            notes.append(f"{name}: invalid ({exc.message[:80]})")
        good += same
        notes.append(f"{name} {results.get('score', 'none')} vs batch {batch:g}")
    records.append(Record("grade.gradescope_results_valid", good / len(scores), "fraction", "== 1",
                          note="Chapter 1, run_autograder in a temporary root: " + "; ".join(notes)))
    return records


