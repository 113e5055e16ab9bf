"""``make bench`` records of the grader's integrity: what a hostile class earns, and what
keeping it apart costs.

- ``grade.hostile_suite_lost_rows``: rows missing from the gradebook of the hostile class
  (``tests/meta/test_hostile_submissions.py``: attacks among two honest students).
- ``grade.forged_points``: points earned by wrong answers in that class, in
  ``tests/meta/test_hostile_values.py`` (liars, a patched result writer, forged frames, a
  memory walk for a hidden test, links) and in ``tests/meta/test_hostile_files.py`` (a
  name that reads as another student's attempt, links to ``/proc`` and a FIFO, a formula
  for a name, a NumPy infinity for an int): every one must earn 0.
- ``grade.cross_student_effects``: what one submission did to another. The points the
  victim of ``test_hostile_files.py`` lost, plus each thing the contestant of one exercise
  left that the next exercise's contestant found (``test_hostile_isolation.py``: files in
  every writable place, keys, a message queue, a running process). Goal 0.
- ``grade.oracle_points``: what the submissions of ``tests/meta/test_hostile_oracle.py``
  earn, whose exercises only call each other where one is another's special case (Chapters
  1, 3, 5, 6 and 9), beyond what the same code earns honestly: the judge answers a call into
  another exercise only where the solution made it in the same test (``grading.judge.answers``).
  Goal 0.
- ``grade.inside_only_points``: the points of the graders' checks that only the notebook's
  own process can observe, which a hostile notebook could answer falsely (a watch of its
  torch operations, where a tensor keeps its memory, what its gloo ranks say they sent):
  every test of ``tests/test_NN_*.py`` that reads ``watching``, ``data_ptr`` or a rank's
  ``bytes_sent``, with its points. Every other rule about how a notebook computes is
  measured from outside it (``grading.judge.measure``). Goal: at most 5 in the whole book.
- ``grade.isolation_overhead``: pytest on the solutions through the judge and its
  sandboxed contestants, over the same graders with the notebook in the grading process
  (``GRADING_IN_PROCESS=1``), Chapters 1-6 and 9, median of paired rounds. The judge now
  answers the calls a graded exercise makes into another (their references run there),
  which costs round trips: this measures them too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.records import Record, median_ratio
from grading.proc import sandbox
from grading.layout import ROOT, discover_chapters


def run() -> list[Record]:
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-integrity-") as tmp:
        tmp = Path(tmp)
        if sandbox.status().sandboxed:
            lost, forged = _hostile_lost_rows(tmp / "hostile")
            files_forged, victim_lost = _hostile_files(tmp / "files")
            records.append(Record("grade.hostile_suite_lost_rows", lost, "rows",
                                  "== 0", note="the hostile class of tests/meta/test_hostile_submissions.py"))
            records.append(Record("grade.forged_points", forged + _liars_points(tmp / "liars") + files_forged,
                                  "points", "== 0",
                                  note="points earned by the wrong answers of tests/meta/test_hostile_submissions.py, "
                                       "test_hostile_values.py and test_hostile_files.py (every student but the "
                                       "controls and the victim)"))
            found, why = _relayed(tmp / "relay")
            records.append(Record("grade.cross_student_effects", victim_lost + len(found), "effects", "== 0",
                                  note=f"points the victim of test_hostile_files.py lost ({victim_lost:g}) + what "
                                       f"the next contestant found of the last one's ({', '.join(found) or 'nothing'})"
                                       + (f"; contestants not isolated here: {why}" if why else "")))
            records.append(_oracle_points(tmp / "oracle"))
        else:
            for name in ("grade.hostile_suite_lost_rows", "grade.forged_points", "grade.cross_student_effects",
                         "grade.oracle_points"):
                records.append(Record(name, float("nan"), "count", "== 0",
                                      note=f"not measured: {sandbox.status().line}"))
    points, tests = inside_only_points()
    records.append(Record("grade.inside_only_points", points, "points", "<= 5",
                          note="observed only inside the notebook's process: " + ", ".join(tests)))
    records.append(isolation_overhead())
    return records


INSIDE_ONLY = ("watching", "data_ptr", "bytes_sent")  # what a grader reads from inside the notebook's process


def inside_only_points() -> tuple[float, list[str]]:
    """The points of the graders' tests that read any of :data:`INSIDE_ONLY`, and their names
    (``chapter::test``), found in the graders' source."""
    import ast

    total, names = 0.0, []
    for path in sorted((ROOT / "tests").glob("test_[0-9][0-9]_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
                n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            if used & set(INSIDE_ONLY):
                total += _points(node)
                names.append(f"{path.stem[5:]}::{node.name}")
    return total, names


def _points(test) -> float:
    """A test's ``@pytest.mark.points(k)`` (1 without one)."""
    import ast

    for mark in test.decorator_list:
        if isinstance(mark, ast.Call) and isinstance(mark.func, ast.Attribute) and mark.func.attr == "points":
            return float(ast.literal_eval(mark.args[0]))
    return 1.0


def _oracle_points(base: Path) -> Record:
    """Grade the class of tests/meta/test_hostile_oracle.py: what its oracles earn beyond honest code."""
    from tests.meta.test_hostile_oracle import grade_class, oracle_points

    return Record("grade.oracle_points", oracle_points(grade_class(base)), "points", "== 0",
                  note="points earned beyond their honest code by the stubs of tests/meta/test_hostile_oracle.py "
                       "whose exercises only call each other (Chapters 1, 3, 5, 6 and 9)")


def _hostile_files(base: Path) -> tuple[float, float]:
    """Grade the class of tests/meta/test_hostile_files.py: the points its attackers
    earned, and the points its victim lost."""
    from tests.meta.test_hostile_files import ATTACKERS, VICTIM, _points, build_hostile_class, grade_hostile_class

    graded = grade_hostile_class(build_hostile_class(base))
    got, full, _ = _points(graded, VICTIM)
    return sum(_points(graded, a)[0] for a in ATTACKERS), full - got


def _relayed(base: Path) -> tuple[list[str], str]:
    """What the next contestant found of what the last one left, and why contestants are
    not isolated here ('' if they are)."""
    from tests.meta.test_hostile_isolation import open_relay, relay

    base.mkdir(parents=True)
    notebook = open_relay(base)
    try:
        _, why, found, _ = relay(notebook)
    finally:
        notebook.close()
    return list(found), why


# Chapters whose graders also run with the notebook in the grading process (the baseline):
# Chapter 7 needs contestants with the interpreter, 8 the model, 10 gloo ranks.
IN_PROCESS_CHAPTERS = ("01", "02", "03", "04", "05", "06", "09")
ISOLATION_ROUNDS = 3


def isolation_overhead() -> Record:
    """``grade.isolation_overhead``: pytest on the solutions through the judge and its
    contestants, divided by the same graders with the notebook run in the grading process
    (``GRADING_IN_PROCESS=1``, the way graders ran before the judge and the contestant were two
    processes): median of paired rounds."""
    files = [str(c.test_file) for c in discover_chapters() if c.stem[:2] in IN_PROCESS_CHAPTERS]
    argv = [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "-n", "2"]

    def seconds(extra: dict) -> float:
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **extra})
        if proc.returncode != 0:
            raise RuntimeError(f"pytest exited with {proc.returncode}: {proc.stdout[-500:]}")
        return time.perf_counter() - start

    judged, in_process = [], []
    load = os.getloadavg()[0]  # the judged side runs more processes: a busy machine costs it more
    for _ in range(ISOLATION_ROUNDS):
        judged.append(seconds({}))
        in_process.append(seconds({"GRADING_IN_PROCESS": "1"}))
    return Record("grade.isolation_overhead", median_ratio(judged, in_process), "ratio", "<= 1.5",
                  note=f"chapters {', '.join(IN_PROCESS_CHAPTERS)} on solutions/, 2 workers, {ISOLATION_ROUNDS} "
                       f"paired rounds: judge and contestants {min(judged):.1f} s, in one process "
                       f"{min(in_process):.1f} s (best); load average {load:.1f} before, "
                       f"{os.getloadavg()[0]:.1f} after")


def _liars_points(base: Path) -> float:
    """Points the liars of tests/meta/test_hostile_values.py earned (every one should earn 0)."""
    from tests.meta.test_hostile_values import CONTROLS, build_class, grade_class

    rows = grade_class(build_class(base))["rows"]
    return sum(float(r["points"] or 0) for r in rows if r["student"] not in CONTROLS)



def _hostile_lost_rows(base: Path) -> tuple[int, float]:
    """Build the hostile class of the test suite, grade it: the rows that are missing, and
    the points its hostile students earned."""
    from tests.meta.test_hostile_submissions import CONTROLS, build_class, grade_class

    made = build_class(base)
    rows = grade_class(made)["rows"]
    expected = {r["exercise"] for r in rows if r["student"] == CONTROLS[0] and r["exercise"]}
    lost = sum(len(expected - {r["exercise"] for r in rows if r["student"] == s and r["exercise"]})
               for s in (*CONTROLS, *made["names"]))
    return lost, sum(float(r["points"] or 0) for r in rows if r["student"] in made["names"])
