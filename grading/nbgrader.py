"""nbgrader interop: nbgrader's cell metadata, and autograder cells that grade with ours.

An instructor who runs a course on nbgrader puts ``solutions/NN_topic.ipynb`` in
nbgrader's ``source/`` folder; ``nbgrader generate_assignment`` then makes the student
version and ``nbgrader autograde`` grades what comes back. For that, every notebook
carries nbgrader's cell metadata (schema version 3), written by the generator
(``make exercises``) into the solutions and, through them, into the exercises:

- a code cell with a solution region (``### BEGIN SOLUTION`` ... ``### END SOLUTION``,
  nbgrader's own markers) is a *solution cell*, grade id ``ex1_2-solution``;
- after the last cell of each exercise comes an *autograder cell*, grade id
  ``ex1_2-autograder``: a locked grade cell worth the exercise's points in the graders
  (the ``points`` marks of its tests, GPU-only tests included). It is tagged
  ``skip-grading`` (the grader's loader leaves it out) and ``remove-cell`` (the book
  hides it).

The autograder cell is silent and does nothing unless nbgrader runs it (nbgrader sets
``NBGRADER_EXECUTION`` to ``autograde`` or ``validate`` in the kernel's environment).
Then :func:`autograde` grades the notebook file that nbgrader is executing (the
submission with its locked cells restored, in the kernel's working folder) exactly as
``python -m grading.batch`` grades one student: the same :class:`grading.classroom.grade.Grader`,
the same sandboxed child, the same gradebook rows. The cell shows the exercise's points
as its result, which nbgrader reads as partial credit, and prints the grader's message.
The chapter is graded once, by its first autograder cell; the others read the result.

nbgrader gives full credit to a grade cell that shows nothing, and none to one that
writes to stderr; so under nbgrader the cell always shows a number or raises, and
nothing it runs writes to stderr. As with every nbgrader grade cell, the student's code
runs in the same kernel before it: the class run and the Gradescope autograder, whose
judges never run it and whose contestants run it in the sandbox, are the tamper-resistant doors.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import NamedTuple

from grading.layout import Chapter, cell_source, marker
from grading.notebook.regions import find_regions
from grading.proc.judges import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S

SCHEMA_VERSION = 3  # nbgrader's cell metadata schema (nbgrader 0.6 to 0.9)
ENV = "NBGRADER_EXECUTION"  # set by nbgrader in the kernel's environment
GRADING_MODES = ("autograde", "validate")
SOLUTION_SUFFIX = "-solution"
AUTOGRADER_SUFFIX = "-autograder"
AUTOGRADER_TAGS = ["remove-cell", "skip-grading"]
STUDENT = "nbgrader"  # how the gradebook rows name the one student of an nbgrader run
COLLECT_TIMEOUT_S = 600  # collecting every chapter's graders (imports torch and the tests)


class ExercisePoints(NamedTuple):
    """What an exercise is worth in the graders: ``total``, of which ``core`` goes to its
    core tests (``@pytest.mark.core``; ``core_tests`` holds their names and points), each
    all or nothing; the rest is shared by the cases of the other tests."""
    total: float
    core: float
    core_tests: tuple[tuple[str, float], ...] = ()


# -- the metadata ---------------------------------------------------------------------------------
def solution_id(exercises: list[str]) -> str:
    """``["5.2", "5.3"]`` -> ``"ex5_2-ex5_3-solution"`` (nbgrader ids: letters, digits, _ and -)."""
    return "-".join(marker(e) for e in exercises) + SOLUTION_SUFFIX


def autograder_id(exercise: str) -> str:
    return marker(exercise) + AUTOGRADER_SUFFIX


def _points_value(points: float) -> int | float:
    return int(points) if float(points).is_integer() else float(points)


def solution_metadata(grade_id: str) -> dict:
    return {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": SCHEMA_VERSION,
            "solution": True}


def autograder_metadata(exercise: str, points: float) -> dict:
    return {"grade": True, "grade_id": autograder_id(exercise), "locked": True,
            "points": _points_value(points), "schema_version": SCHEMA_VERSION, "solution": False}


def is_autograder_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and str(meta.get("grade_id", "")).endswith(AUTOGRADER_SUFFIX)


def policy_comment(points: ExercisePoints) -> str:
    """How an exercise's points are given, as the student reads it in the notebook."""
    total, core = _points_value(points.total), _points_value(points.core)
    if not points.core:
        return f"# Its {total} points are shared by the graders' cases, case by case.\n"
    lines = [f"# Points: {core} for the core tests, each all or nothing (every case must pass):"]
    lines += [f"#   {name} ({_points_value(p)})" for name, p in points.core_tests]
    if points.core < points.total:
        lines.append(f"# and {_points_value(points.total - points.core)} shared by the cases of the other tests "
                     "(edge cases, bad input).")
    return "\n".join(lines) + "\n"


def autograder_source(stem: str, exercise: str, points: float | ExercisePoints) -> str:
    """The code of an autograder cell (lines <= 88 columns, as every chapter cell); with
    :class:`ExercisePoints`, its first lines also say how the points are given."""
    core = isinstance(points, ExercisePoints)
    shown = _points_value(points.total if core else points)
    policy = policy_comment(points) if core else ""
    return (f"# The autograder of Exercise {exercise} for nbgrader (a locked cell, worth {shown} points).\n"
            + policy +
            "# It does nothing unless nbgrader runs it; then it grades this notebook with the\n"
            "# course's grader (grading/nbgrader.py) and shows the points earned.\n"
            "import os\n"
            "\n"
            f'if os.environ.get("{ENV}"):\n'
            "    from grading.nbgrader import autograde\n"
            "else:\n"
            "    def autograde(*args):\n"
            "        return None\n"
            f'autograde("{stem}", "{exercise}", {shown!r})')


def autograder_cell(stem: str, exercise: str, points: float | ExercisePoints):
    import nbformat

    core = isinstance(points, ExercisePoints)
    cell = nbformat.v4.new_code_cell(autograder_source(stem, exercise, points))
    cell.pop("id", None)  # a random id (nbformat 4.5); the notebooks are 4.4, written byte-stable
    meta = {"nbgrader": autograder_metadata(exercise, points.total if core else points),
            "tags": list(AUTOGRADER_TAGS)}
    if core:  # ours; nbgrader ignores it
        meta["grading"] = {"core_points": _points_value(points.core),
                           "core_tests": [[name, _points_value(p)] for name, p in points.core_tests]}
    cell.metadata = nbformat.from_dict(meta)
    return cell


def annotate(nb, stem: str, points: dict[str, float | ExercisePoints], where: str = "notebook"):
    """A copy of a solution notebook with nbgrader's metadata on its solution cells and an
    autograder cell after the last cell of each exercise (earlier autograder cells are
    replaced; no other cell changes). ``points``: exercise -> points in the graders
    (an :class:`ExercisePoints` also states the core share in the cell).
    Raises ValueError when an exercise has solution regions but no graded tests, or
    graded tests but no solution region."""
    nb = copy.deepcopy(nb)
    cells = [c for c in nb.cells if not is_autograder_cell(c)]
    last: dict[str, int] = {}
    used: set[str] = set()
    for index, cell in enumerate(cells):
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type != "code":
            continue
        exercises = sorted({r.exercise for r in find_regions(cell_source(cell), f"{where} cell {index}")},
                           key=lambda e: tuple(map(int, e.split("."))))
        if not exercises:
            continue
        grade_id, n = solution_id(exercises), 2
        while grade_id in used:  # one exercise's regions in several cells
            grade_id, n = f"{solution_id(exercises)}-{n}", n + 1
        used.add(grade_id)
        cell.metadata["nbgrader"] = solution_metadata(grade_id)
        for e in exercises:
            last[e] = index
    ungraded = sorted(set(last) - set(points))
    if ungraded:
        raise ValueError(f"{where}: exercises {', '.join(ungraded)} have solution regions but no graded tests")
    unmarked = sorted(set(points) - set(last))
    if unmarked:
        raise ValueError(f"{where}: exercises {', '.join(unmarked)} are graded but have no solution region")
    after: dict[int, list[str]] = {}
    for exercise, index in last.items():
        after.setdefault(index, []).append(exercise)
    out = []
    for index, cell in enumerate(cells):
        out.append(cell)
        for exercise in sorted(after.get(index, []), key=lambda e: tuple(map(int, e.split(".")))):
            out.append(autograder_cell(stem, exercise, points[exercise]))
    nb.cells = out
    return nb


def exercise_points(chapters: list[Chapter]) -> dict[str, dict[str, ExercisePoints]]:
    """{stem: {exercise: (total, core)}} from the graders themselves, collected by one
    collect-only judge, as the class run (``grading.batch``) collects its plan: a test function is worth its
    ``points`` mark, GPU-only tests included; ``core`` sums the functions marked core."""
    from dataclasses import replace

    from grading.proc.judges import run_child
    from grading.scoring import core_points, group_plan, max_points

    files = [str(c.test_file) for c in chapters]
    report = run_child({"test_files": files, "hidden_files": [], "collect_only": True},
                       timeout=COLLECT_TIMEOUT_S, memory_mb=0, threads=1).report
    if report.plan is None or report.collect_errors:
        why = report.collect_errors[0].message if report.collect_errors else report.output[-3000:]
        raise RuntimeError("could not collect the graders for the nbgrader points:\n" + why)
    out = {}
    for c in chapters:
        mine = str(c.test_file.resolve())
        tests = [replace(t, skip=False) for t in report.plan.tests if t.path == mine and t.exercise]
        out[c.stem] = {label: ExercisePoints(max_points(fns), core_points(fns),
                                             tuple((fn.name, fn.points) for fn in fns if fn.core))
                       for label, fns in group_plan(tests).items()}
    return out


# -- the autograder cell at work ------------------------------------------------------------------
_graded: dict[tuple[str, str], list] = {}  # (stem, sha256 of the notebook) -> gradebook rows


def autograde(stem: str, exercise: str, points: float) -> float | None:
    """What an autograder cell runs. Under nbgrader: the points the grader gives
    ``exercise`` in the notebook nbgrader is executing (the cell's result, which nbgrader
    records), after a line with the grader's status and message. Anywhere else: None.
    Raises (so nbgrader records 0) when the notebook cannot be found or graded, and
    ValueError when the grader's maximum for the exercise exceeds the cell's ``points``."""
    mode = os.environ.get(ENV)
    if not mode:
        return None
    if mode not in GRADING_MODES:  # showing nothing would give full credit
        raise RuntimeError(f"{ENV}={mode!r}: not a run this cell knows how to grade ({', '.join(GRADING_MODES)})")
    # nbgrader zeroes a grade cell that writes to stderr: a warning is not a wrong answer.
    with contextlib.redirect_stderr(sys.stdout), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows, first = grade_notebook(stem, Path.cwd())
    if first:
        for r in rows:
            if not r.exercise and r.message:
                print(f"{stem}: {r.message}")
    mine = [r for r in rows if r.exercise == exercise]
    if not mine:
        raise LookupError(f"the graders of {stem} have no Exercise {exercise}")
    row = mine[0]
    if row.max_points > float(points) + 1e-9:
        raise ValueError(f"the graders give Exercise {exercise} {row.max_points:g} points, this cell {points}: "
                         "regenerate the notebooks (make exercises)")
    print(f"Exercise {exercise}: {row.status}" + (f": {row.message}" if row.message else ""))
    return round(float(row.points), 3)  # as gradebook.csv records it


def find_notebook(stem: str, folder: Path) -> Path:
    """The chapter's notebook in ``folder``: ``stem.ipynb``, or the one notebook there that
    the class run's matching gives the chapter (a renamed assignment)."""
    from grading.classroom.matching import match_folder
    from grading.layout import discover_chapters

    exact = folder / f"{stem}.ipynb"
    if exact.is_file():
        return exact
    chapters = discover_chapters(only=[stem])
    sub = match_folder(STUDENT, folder, chapters)
    if stem in sub.notebooks:
        return sub.notebooks[stem]
    raise FileNotFoundError(f"no notebook of {stem} in {folder.name}/ "
                            f"({'; '.join(sub.ambiguous.get(stem, [])) or 'none matched'})")


def grade_notebook(stem: str, folder: Path) -> tuple[list, bool]:
    """The gradebook rows of the chapter's notebook in ``folder``, graded by the batch
    grader's path (once per notebook content); and whether this call graded it."""
    from grading.classroom.grade import GradeConfig, grade_chapter
    from grading.layout import discover_chapters

    chapters = discover_chapters(only=[stem])
    if not chapters:
        raise LookupError(f"{stem} is not a chapter of this course's graders")
    notebook = find_notebook(stem, folder)
    with open(notebook, "rb") as f:  # in chunks: a notebook of any size costs one chunk here
        key = (stem, hashlib.file_digest(f, "sha256").hexdigest())
    if key in _graded:
        return _graded[key], False
    chapter = chapters[0]
    if "modellab" in chapter.test_file.read_text():
        from modellab.load import prepare_cache

        prepare_cache()  # as grading.batch does, before the judge's timeout starts
    with tempfile.TemporaryDirectory(prefix="nbgrader-grade-") as out:
        config = GradeConfig(out=Path(out).resolve(), submissions=folder.resolve(),
                             timeout=DEFAULT_TIMEOUT_S, memory_mb=DEFAULT_MEMORY_MB)
        rows = grade_chapter(config, STUDENT, chapter, notebook)
    _graded[key] = rows
    return rows, True
