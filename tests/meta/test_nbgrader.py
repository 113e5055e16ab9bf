"""nbgrader runs the course and records the batch grader's points (grading/nbgrader.py).

In a temporary nbgrader course, Chapter 1's solution notebook is the assignment's
source; ``nbgrader generate_assignment`` and ``nbgrader autograde`` (the installed,
pinned nbgrader, offline) grade three submissions: the solution (solved), the exercise
notebook of exercises/ (unsolved) and the solution with a catalogued bug (partly
solved, so partial credit is compared too). ``python -m grading.batch`` grades the
same three files. Every exercise's points and maximum must agree.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grading.layout import ROOT
from grading.nbgrader import (
    AUTOGRADER_SUFFIX,
    ENV,
    ExercisePoints,
    annotate,
    autograde,
    autograder_source,
    is_autograder_cell,
)
from grading.notebook.catalogue import load_catalogue

STEM = "01_kv_memory"
ASSIGNMENT = "ch01"
PARTIAL_BUG = "window_applied_to_global_layers"  # Exercise 1.5: some of its cases still pass
SUBMISSIONS = {"solved": ROOT / "solutions" / f"{STEM}.ipynb", "unsolved": ROOT / "exercises" / f"{STEM}.ipynb"}
BIN = Path(sys.executable).parent  # nbgrader, and the alembic it runs, live beside this Python
CONFIG = """c = get_config()
c.CourseDirectory.course_id = "long-context"
c.Execute.timeout = 900  # the first autograder cell of a notebook grades the whole chapter
"""
# nbgrader's gradebook module warns of SQLAlchemy deprecations on import: not ours to fix.
pytestmark = [pytest.mark.timeout(1200), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBGRADER")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", JUPYTER_RUNTIME_DIR=str(course / ".runtime"),
               JUPYTER_DATA_DIR=str(course / ".data"), JUPYTER_CONFIG_DIR=str(course / ".config"))
    proc = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=env, capture_output=True, text=True,
                          timeout=1000)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def _grade_cells(path: Path) -> dict[str, float]:
    nb = json.loads(path.read_text())
    return {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
            for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """{"nbgrader": {student: {exercise: (points, max)}}, "batch": {...}, "release": path}."""
    if not (BIN / "nbgrader").exists():
        pytest.fail(f"nbgrader is not installed in {BIN.parent} (it is pinned in requirements.txt: make install)")
    tmp = tmp_path_factory.mktemp("nbgrader")
    course = tmp / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG)
    (course / "source" / ASSIGNMENT / f"{STEM}.ipynb").write_bytes(SUBMISSIONS["solved"].read_bytes())
    _nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")

    bug = next(b for b in load_catalogue(STEM) if b.name == PARTIAL_BUG)
    texts = {name: path.read_text() for name, path in SUBMISSIONS.items()}
    texts["partial"] = nbformat.writes(bug.apply(nbformat.read(SUBMISSIONS["solved"], as_version=4), STEM))
    for student, text in texts.items():
        for folder in (course / "submitted" / student / ASSIGNMENT, tmp / "subs" / student):
            folder.mkdir(parents=True)
            (folder / f"{STEM}.ipynb").write_text(text)
    _nbgrader(course, "autograde", ASSIGNMENT, "--force")

    from nbgrader.api import Gradebook

    recorded = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
        for student in texts:
            notebook = book.find_submission_notebook(STEM, ASSIGNMENT, student)
            recorded[student] = {g.name.removesuffix(AUTOGRADER_SUFFIX): (g.score, g.max_score)
                                 for g in notebook.grades}

    out = tmp / "grades"
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(tmp / "subs"), "--out", str(out),
                           "--chapters", STEM, "--workers", "2", "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    batch: dict[str, dict] = {s: {} for s in texts}
    with open(out / "gradebook.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["exercise"]:
                batch[row["student"]][row["exercise"]] = (float(row["points"]), float(row["max_points"]))
    autograded = {s: course / "autograded" / s / ASSIGNMENT / f"{STEM}.ipynb" for s in texts}
    return {"nbgrader": recorded, "batch": batch, "release": course / "release" / ASSIGNMENT / f"{STEM}.ipynb",
            "autograded": autograded}


def _marker(exercise: str) -> str:
    chapter, number = exercise.split(".")
    return f"ex{chapter}_{number}"


@pytest.mark.parametrize("student", ["solved", "unsolved", "partial"])
def test_nbgrader_records_the_batch_graders_points(graded, student):
    ours = {_marker(e): v for e, v in graded["batch"][student].items()}
    theirs = graded["nbgrader"][student]
    assert sorted(theirs) == sorted(ours), "nbgrader's grade cells are not the graders' exercises"
    differ = {e: (theirs[e], ours[e]) for e in ours if theirs[e] != ours[e]}
    assert not differ, f"{student}: exercise: ((nbgrader points, max), (batch points, max)): {differ}"


def test_the_three_submissions_span_the_scale(graded):
    """Solved earns everything, unsolved nothing, and the bug earns part of one exercise,
    so the comparison above covers partial credit, not only all or nothing."""
    book = graded["batch"]
    assert all(p == m > 0 for p, m in book["solved"].values())
    assert all(p == 0 < m for p, m in book["unsolved"].values())
    assert any(0 < p < m for p, m in book["partial"].values()), book["partial"]


def test_autograded_cells_show_the_points_and_the_graders_message(graded):
    nb = json.loads(graded["autograded"]["unsolved"].read_text())
    cells = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
    outputs = [o for c in cells for o in c["outputs"]]
    assert not [o for o in outputs if o.get("name") == "stderr" or o["output_type"] == "error"]
    shown = [o["data"]["text/plain"] for o in outputs if o["output_type"] == "execute_result"]
    assert len(shown) == len(cells) and set(map("".join, shown)) == {"0.0"}
    assert any("not implemented" in "".join(o.get("text", "")) for o in outputs)


def test_nbgrader_release_has_the_exercises_grade_cells(graded):
    """A student who works in exercises/ hands in the cells nbgrader's own release has."""
    assert _grade_cells(graded["release"]) == _grade_cells(ROOT / "exercises" / f"{STEM}.ipynb")


# -- no nbgrader needed -----------------------------------------------------------------------
def test_autograder_cell_is_silent_without_nbgrader(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert autograde(STEM, "1.1", 4) is None
    monkeypatch.setenv(ENV, "something-new")
    with pytest.raises(RuntimeError, match="showing nothing would give full credit|not a run"):
        autograde(STEM, "1.1", 4)


def test_autograder_cells_follow_their_exercise_and_are_hidden():
    nb = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    for i, cell in enumerate(nb.cells):
        if not is_autograder_cell(cell):
            continue
        meta = cell.metadata.nbgrader
        exercise = meta.grade_id.removesuffix(AUTOGRADER_SUFFIX).removeprefix("ex").replace("_", ".")
        assert meta.locked and not meta.solution and meta.schema_version == 3
        assert {"skip-grading", "remove-cell"} <= set(cell.metadata.tags)
        points = ExercisePoints(meta.points, cell.metadata.grading.core_points,
                                tuple(map(tuple, cell.metadata.grading.core_tests)))
        assert cell.source == autograder_source(STEM, exercise, points)
        assert 0 < points.core <= points.total, f"Exercise {exercise} has no core test (@pytest.mark.core)"
        assert f"# Exercise {exercise}:" in nb.cells[i - 1].source or is_autograder_cell(nb.cells[i - 1])


def test_annotate_is_idempotent_and_changes_only_metadata_and_autograder_cells():
    nb = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    points = {meta.grade_id.removesuffix(AUTOGRADER_SUFFIX).removeprefix("ex").replace("_", "."):
              ExercisePoints(meta.points, c.metadata.grading.core_points,
                             tuple(map(tuple, c.metadata.grading.core_tests)))
              for c in nb.cells if is_autograder_cell(c) for meta in [c.metadata.nbgrader]}
    again = annotate(nb, STEM, points)
    assert nbformat.writes(again) == nbformat.writes(nb)
    plain = [c for c in nb.cells if not is_autograder_cell(c)]
    for c in plain:
        c.metadata.pop("nbgrader", None)
    nb.cells = plain
    assert nbformat.writes(annotate(nb, STEM, points)) == nbformat.writes(again)
    with pytest.raises(ValueError, match="no graded tests"):
        annotate(nb, STEM, {e: p for e, p in points.items() if e != "1.3"})


# -- a kernel that cannot import the grader is an error, not a zero ------------
SHIPPED_CONFIG = ROOT / "tools" / "nbgrader" / "nbgrader_config.py"


def _run_nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBGRADER", "PYTHONPATH"))}
    # JUPYTER_PATH comes first in the kernels' search (a virtual environment's own
    # share/jupyter/kernels/python3 would otherwise win over JUPYTER_DATA_DIR).
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", JUPYTER_RUNTIME_DIR=str(course / ".runtime"),
               JUPYTER_DATA_DIR=str(course / ".data"), JUPYTER_CONFIG_DIR=str(course / ".config"),
               JUPYTER_PATH=str(course / ".data"))
    return subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=env, capture_output=True, text=True,
                          timeout=600)


def _course_with_a_kernel_without_the_grader(tmp: Path, config: str) -> Path:
    """A course whose ``python3`` kernel is a Python with the book's third-party packages
    but not this checkout (nbgrader in a virtual environment of its own, before the
    kernel step of docs/instructors.md), and one student who handed in the unsolved notebook."""
    from tests.meta.isolated_python import assert_isolated, make_isolated_python

    python = make_isolated_python(tmp / "kernel-venv")
    assert_isolated(python, tmp)
    course = tmp / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(config)
    spec = course / ".data" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (without the grader)", "language": "python"}))
    (course / "source" / ASSIGNMENT / f"{STEM}.ipynb").write_bytes(SUBMISSIONS["solved"].read_bytes())
    done = _run_nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = course / "submitted" / "alice" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / f"{STEM}.ipynb").write_bytes(SUBMISSIONS["unsolved"].read_bytes())
    return course


def test_a_kernel_that_cannot_import_the_grader_fails_autograde_loudly(tmp_path):
    """With the shipped nbgrader_config.py, an autograder cell that raises (here: no
    ``grading`` in the kernel) stops the notebook's autograding: nbgrader lists the
    student among its errors and exits 1, naming the cell and the kernel step."""
    if not (BIN / "nbgrader").exists():
        pytest.fail(f"nbgrader is not installed in {BIN.parent} (it is pinned in requirements.txt: make install)")
    course = _course_with_a_kernel_without_the_grader(tmp_path, SHIPPED_CONFIG.read_text())
    done = _run_nbgrader(course, "autograde", ASSIGNMENT, "--force")
    log = done.stdout + done.stderr
    assert done.returncode != 0, log[-3000:]
    assert "There was an error processing assignment 'ch01' for student 'alice'" in log, log[-3000:]
    assert "No module named 'grading'" in log and "ipykernel install --prefix" in log, log[-3000:]
    assert not (course / "autograded" / "alice" / ASSIGNMENT / f"{STEM}.ipynb").exists()


def test_without_the_shipped_config_the_same_kernel_is_a_silent_zero(tmp_path):
    """What the shipped configuration prevents: nbgrader records the raised
    autograder cells as failed grade cells and exits 0."""
    if not (BIN / "nbgrader").exists():
        pytest.fail(f"nbgrader is not installed in {BIN.parent}")
    course = _course_with_a_kernel_without_the_grader(tmp_path, CONFIG)
    done = _run_nbgrader(course, "autograde", ASSIGNMENT, "--force")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    nb = json.loads((course / "autograded" / "alice" / ASSIGNMENT / f"{STEM}.ipynb").read_text())
    errors = [o for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")
              for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert errors and all(o["evalue"] == "No module named 'grading'" for o in errors)


def test_the_student_config_gives_validate_the_autograders_timeout():
    """The Validate button grades the chapter in its first autograder cell: its timeout
    must be the instructor's, not nbgrader's 30 s."""
    from traitlets.config import PyFileConfigLoader

    student = PyFileConfigLoader("student_nbgrader_config.py", str(SHIPPED_CONFIG.parent)).load_config()
    instructor = PyFileConfigLoader(SHIPPED_CONFIG.name, str(SHIPPED_CONFIG.parent)).load_config()
    assert student.Execute.timeout == instructor.Execute.timeout >= 600
