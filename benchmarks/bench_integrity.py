"""``make bench`` records of the grader's integrity: what a hostile class earns, and what
keeping it apart costs.

- ``grade.hostile_suite_lost_rows``: rows missing from the gradebook of the hostile class
  (``tests/meta/test_hostile_submissions.py``: attacks among two honest students).
- ``grade.forged_points``: points earned by wrong answers in that class, in
  ``tests/meta/test_hostile_values.py`` (liars, a patched result writer, forged frames, a
  memory walk for a hidden test, links) and in ``tests/meta/test_hostile_files.py`` (a
  name that reads as another student's attempt, links to ``/proc`` and a FIFO, a formula
  for a name, a NumPy infinity for an int): every one must earn 0. Beside them, what
  forging earns beyond the same code honest: the measured test's points that a notebook
  breaking its rule keeps, and the other tests' points that a forged inside-only check
  adds (``tests/meta/test_hostile_measured.py``), and the Chapter 7 cases that a notebook
  forging its launch record and compile check passes beyond itself unforged
  (``tests/meta/test_hostile_outside.py``).
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
  (``GRADING_IN_PROCESS=1``), Chapters 1-6 and 9, median of paired rounds, after one
  unmeasured run. The judge answers the calls a graded exercise makes into another (their
  references run there), which costs round trips: this measures them too. The tests that
  only a judge can run (memory read from outside the contestant) are left out of both.

A suite that fails makes its records NaN, with the reason in their notes; the others are
still measured.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.records import Record, median_ratio
from grading.layout import ROOT, discover_chapters
from grading.proc import sandbox


def run() -> list[Record]:
    """Every record, each measured on its own: one that cannot be measured here (no sandbox,
    or a suite that crashed) is NaN with the reason, and the others are still measured."""
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-integrity-") as tmp:
        tmp = Path(tmp)
        if sandbox.status().sandboxed:
            records += _measured(lambda: _hostile_class(tmp), SUITE_RECORDS)
            records.append(*_measured(lambda: [_oracle_points(tmp / "oracle")], ["grade.oracle_points"]))
        else:
            for name in (*SUITE_RECORDS, "grade.oracle_points"):
                records.append(Record(name, float("nan"), "count", "== 0",
                                      note=f"not measured: {sandbox.status().line}"))
    points, tests = inside_only_points()
    records.append(Record("grade.inside_only_points", points, "points", "<= 5",
                          note="observed only inside the notebook's process: " + ", ".join(tests)))
    records += _measured(lambda: [isolation_overhead()], ["grade.isolation_overhead"])
    return records


SUITE_RECORDS = ["grade.hostile_suite_lost_rows", "grade.forged_points", "grade.cross_student_effects"]


def _measured(measure, names: list[str]) -> list[Record]:
    """``measure()``'s records, or one NaN record per name that says why it failed."""
    try:
        return measure()
    except Exception as exc:  # noqa: BLE001 - reported in the record, the bench goes on
        why = f"not measured: {type(exc).__name__}: {str(exc)[:300]}"
        return [Record(name, float("nan"), "count", "== 0", note=why) for name in names]


def _hostile_class(tmp: Path) -> list[Record]:
    """The records of the hostile suites that grade whole classes and forged notebooks. A
    suite that fails makes the records it adds to NaN, and their notes say why."""
    failed: list[str] = []
    nan = float("nan")

    def attempt(suite: str, measure, otherwise):
        try:
            return measure()
        except Exception as exc:  # noqa: BLE001 - reported in the notes, the other suites still run
            failed.append(f"{suite} failed: {type(exc).__name__}: {str(exc)[:200]}")
            return otherwise

    lost, forged = attempt("test_hostile_submissions.py", lambda: _hostile_lost_rows(tmp / "hostile"), (nan, nan))
    liars = attempt("test_hostile_values.py", lambda: _liars_points(tmp / "liars"), nan)
    files_forged, victim_lost = attempt("test_hostile_files.py", lambda: _hostile_files(tmp / "files"), (nan, nan))
    measured = attempt("test_hostile_measured.py", lambda: _measured_forged_points(tmp / "measured"), nan)
    outside = attempt("test_hostile_outside.py", lambda: _outside_forged_cases(tmp / "outside"), nan)
    found, why = attempt("test_hostile_isolation.py", lambda: _relayed(tmp / "relay"), (["(not measured)"], ""))
    failures = ("; " + "; ".join(failed)) if failed else ""
    return [
        Record("grade.hostile_suite_lost_rows", lost, "rows", "== 0",
               note="the hostile class of tests/meta/test_hostile_submissions.py" + failures),
        Record("grade.forged_points", forged + liars + files_forged + measured + outside, "points", "== 0",
               note="points earned by the wrong answers of tests/meta/test_hostile_submissions.py, "
                    "test_hostile_values.py and test_hostile_files.py (every student but the controls and the "
                    f"victim), and beyond the same code honest by test_hostile_measured.py ({measured:g}) and "
                    f"Chapter 7's forged notebooks of test_hostile_outside.py ({outside:g}, a case each)" + failures),
        Record("grade.cross_student_effects", victim_lost + len(found), "effects", "== 0",
               note=f"points the victim of test_hostile_files.py lost ({victim_lost:g}) + what "
                    f"the next contestant found of the last one's ({', '.join(found) or 'nothing'})"
                    + (f"; contestants not isolated here: {why}" if why else "") + failures),
    ]


def _measured_forged_points(base: Path) -> float:
    """What the notebooks of tests/meta/test_hostile_measured.py earn beyond honest code: the
    measured test's points that a notebook breaking its rule still earns, and, for each
    notebook whose inside-only check is forged, the points of every *other* test it earns
    beyond the same notebook unforged."""
    from tests.meta import test_hostile_measured as hm

    base.mkdir(parents=True)
    total = 0.0
    for stem, select, cell, test in _params(hm.test_a_rule_about_how_is_measured_from_outside):
        total += _earned(stem, hm.grade(base, stem, select, cell), only=test)
    for stem, select, wrong, forgery, inside in _params(hm.test_a_forged_inside_check_earns_nothing_else):
        honest = _earned_by_test(stem, hm.grade(base, stem, select, wrong))
        forged = _earned_by_test(stem, hm.grade(base, stem, select, wrong, forgery))
        total += sum(max(0.0, got - honest.get(name, 0.0)) for name, got in forged.items() if name != inside)
    return total


def _params(test) -> list[tuple]:
    """The cases of a test's ``@pytest.mark.parametrize`` (one list of tuples)."""
    mark = next(m for m in test.pytestmark if m.name == "parametrize")
    return [tuple(case) for case in mark.args[1]]


def _earned(stem: str, outcomes: dict[str, str], only: str) -> float:
    return _earned_by_test(stem, outcomes).get(only, 0.0)


def _earned_by_test(stem: str, outcomes: dict[str, str]) -> dict[str, float]:
    """``{test function: points earned}`` from the outcomes of its cases (``name[case]`` ->
    "passed", "failed" or "skipped"), by the gradebook's rule (:func:`grading.scoring.earned`),
    with each function's points and core mark read from ``tests/test_<stem>.py``."""
    import ast

    from grading.scoring import earned

    marks = {}
    for node in ast.parse((ROOT / "tests" / f"test_{stem}.py").read_text()).body:
        if isinstance(node, ast.FunctionDef):
            core = any(isinstance(m, ast.Attribute) and m.attr == "core" for m in node.decorator_list)
            marks[node.name] = (_points(node), core)
    cases: dict[str, list[str]] = {}
    for name, outcome in outcomes.items():
        cases.setdefault(name.split("[", 1)[0], []).append(outcome)
    return {test: earned(marks.get(test, (1.0, False))[0], got.count("passed"),
                         len(got) - got.count("skipped"), marks.get(test, (1.0, False))[1])
            for test, got in cases.items()}


def _outside_forged_cases(base: Path) -> float:
    """The grader cases of Chapter 7 that the forged notebooks of tests/meta/test_hostile_outside.py
    pass where the same notebook unforged does not (each case counted as one point); 0 where
    Triton is missing (the suite skips itself there too)."""
    import importlib.util

    from tests.meta import test_hostile_outside as ho

    if importlib.util.find_spec("triton") is None:
        return 0.0
    base.mkdir(parents=True)
    unforged = ho._grade_chapter7(base, "unforged", ho._stub_with(ho.STEM7, ho.IN_TORCH))
    beyond = 0
    for name, record in ho.FORGERIES.items():
        forged = ho._grade_chapter7(base, name, ho._stub_with(ho.STEM7, ho.IN_TORCH, ho.FORGE.format(RECORD=record)))
        beyond += sum(1 for case, outcome in forged.items() if outcome == "passed" and unforged[case] != "passed")
    return float(beyond)


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
# What only a judge can measure, from outside the contestant (grading.judge.measure): a test
# that reads one has no in-process run to compare with, so both sides leave it out.
JUDGE_ONLY = ("peak_memory", "loopback_bytes")


def judge_only_tests(files: list[Path]) -> list[str]:
    """The node ids (``tests/test_NN_topic.py::test_name``) of the tests in ``files`` that
    read any of :data:`JUDGE_ONLY`, found in their source."""
    import ast

    found = []
    for path in files:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and {
                    n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(JUDGE_ONLY):
                found.append(f"{path.relative_to(ROOT)}::{node.name}")
    return found


def isolation_overhead() -> Record:
    """``grade.isolation_overhead``: pytest on the solutions through the judge and its
    contestants, divided by the same graders with the notebook run in the grading process
    (``GRADING_IN_PROCESS=1``, the way graders ran before the judge and the contestant were two
    processes): median of paired rounds. The tests only a judge can run
    (:func:`judge_only_tests`) are left out of both."""
    files = [c.test_file for c in discover_chapters() if c.stem[:2] in IN_PROCESS_CHAPTERS]
    left_out = judge_only_tests(files)
    argv = [sys.executable, "-m", "pytest", *map(str, files), "-q", "-p", "no:cacheprovider", "-n", "2",
            *(f"--deselect={test}" for test in left_out)]

    def seconds(extra: dict) -> float:
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **extra})
        if proc.returncode != 0:
            raise RuntimeError(f"pytest exited with {proc.returncode}: {proc.stdout[-500:]}")
        return time.perf_counter() - start

    judged, in_process = [], []
    load = os.getloadavg()[0]  # the judged side runs more processes: a busy machine costs it more
    seconds({})  # unmeasured: a record of the solutions' calls that is stale is made here, not in a round
    for _ in range(ISOLATION_ROUNDS):
        judged.append(seconds({}))
        in_process.append(seconds({"GRADING_IN_PROCESS": "1"}))
    return Record("grade.isolation_overhead", median_ratio(judged, in_process), "ratio", "<= 1.5",
                  note=f"chapters {', '.join(IN_PROCESS_CHAPTERS)} on solutions/, 2 workers, {ISOLATION_ROUNDS} "
                       f"paired rounds: judge and contestants {min(judged):.1f} s, in one process "
                       f"{min(in_process):.1f} s (best); load average {load:.1f} before, "
                       f"{os.getloadavg()[0]:.1f} after; left out of both, measured only by a judge: "
                       f"{', '.join(t.split('::')[1] for t in left_out) or 'none'}")


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
