"""What an instructor needs from the gradebook, on Chapter 1 with two workers.

A class of three: ``alice`` (solved, plus a stray ``Untitled.ipynb``), ``bob`` (solved but
Exercise 1.2 raises a NameError) and ``carol`` (the stub). A roster maps the folder
names to ids (and has ``dave``, who handed nothing in); an overrides file gives bob the
points of 1.2. Then bob hands in a fixed notebook and the class is graded again with
``--resume`` (and without ``--overrides``: the run's recorded policy keeps it): bob, and only
bob, is graded again, and says so.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grading.classroom import gradebook as gb
from grading.classroom.exports import read_roster
from grading.classroom.rows import Row, exercise_order
from grading.layout import EXERCISES, SOLUTIONS

STEM = "01_kv_memory"
pytestmark = pytest.mark.timeout(900)
ROSTER = """Student ID,Name,Email
s001,Alice Example,alice@example.edu
s002,Bob Example,bob@example.edu
s004,Dave Example,dave@example.edu
"""


def _solution():
    return nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4)


def _broken_1_2():
    nb = _solution()
    for cell in nb.cells:
        if cell.cell_type == "code" and re.search(r"^# Exercise 1\.2:", cell.source, re.M):
            cell.source = re.sub(r"^(\s+)return ", r"\1return undefined_name + ", cell.source, count=1, flags=re.M)
            assert "undefined_name" in cell.source
            return nb
    raise LookupError("the cell of Exercise 1.2")


def _grade(subs: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(subs), "--out", str(out), "--chapters", "1",
                           "--workers", "2", "--quiet", *extra], capture_output=True, text=True, timeout=800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("instructor")
    subs = base / "subs"
    for name, nb in (("alice", _solution()), ("bob", _broken_1_2()),
                     ("carol", nbformat.read(EXERCISES / f"{STEM}.ipynb", as_version=4))):
        (subs / name).mkdir(parents=True)
        nbformat.write(nb, subs / name / f"{STEM}.ipynb")
    shutil.copyfile(SOLUTIONS / f"{STEM}.ipynb", subs / "alice" / "Untitled.ipynb")
    (base / "roster.csv").write_text(ROSTER)
    (base / "overrides.csv").write_text("student,exercise,points,reason\n"
                                        "bob,1.2,1,a typo in a name; the method is right (regrade request)\n")
    out = base / "out"
    first = _grade(subs, out, "--roster", str(base / "roster.csv"), "--overrides", str(base / "overrides.csv"))
    snapshot = {name: (out / name).read_text() for name in ("gradebook.csv", "gradebook_wide.csv",
                                                             "needs_review.md")}
    snapshot["bob.md"] = (out / "feedback" / "bob.md").read_text()
    # bob fixes his NameError and hands in again; nothing else changes.
    nbformat.write(_solution(), subs / "bob" / f"{STEM}.ipynb")
    second = _grade(subs, out, "--resume", "--roster", str(base / "roster.csv"))
    return {"out": out, "first": first, "second": second, "snapshot": snapshot}


def test_wide_export_has_one_row_per_student_with_total_and_exercise_columns(runs, tmp_path):
    (tmp_path / "g.csv").write_text(runs["snapshot"]["gradebook_wide.csv"])
    wide = _rows(tmp_path / "g.csv")
    (tmp_path / "l.csv").write_text(runs["snapshot"]["gradebook.csv"])
    long = _rows(tmp_path / "l.csv")
    exercises = [c for c in wide[0] if re.match(r"^\d+\.\d+", c)]
    assert exercises == sorted({r["exercise"] for r in long if r["exercise"]}, key=exercise_order)
    by = {r["student"]: r for r in wide}
    assert set(by) == {"alice", "bob", "carol", ""}
    for name in ("alice", "bob", "carol"):
        mine = [r for r in long if r["student"] == name and r["exercise"]]
        assert float(by[name]["total"]) == pytest.approx(sum(float(r["points"]) for r in mine), abs=1e-3)
        assert float(by[name]["max_total"]) == pytest.approx(sum(float(r["max_points"]) for r in mine), abs=1e-3)
        assert float(by[name]["total"]) == pytest.approx(sum(float(by[name][e]) for e in exercises), abs=1e-2)
    assert (by["alice"]["id"], by["alice"]["name"], by["alice"]["email"]) == ("s001", "Alice Example",
                                                                               "alice@example.edu")
    assert by["bob"]["id"] == "s002"  # folder names are matched to the email's part before the @
    assert by["carol"]["id"] == ""  # not on the roster
    assert by[""]["id"] == "s004" and by[""]["total"] == ""  # on the roster, nothing handed in


def test_roster_problems_are_listed_for_review(runs):
    review = runs["snapshot"]["needs_review.md"]
    assert "carol is not on the roster" in review
    assert "s004" in review and "no submission" in review


def test_stray_notebook_beside_a_complete_submission_is_listed_for_review(runs):
    review = runs["snapshot"]["needs_review.md"]
    assert re.search(r"\*\*alice\*\*.*Untitled\.ipynb was not matched to a chapter", review), review


def test_override_is_applied_and_recorded_in_gradebook_and_feedback(runs, tmp_path):
    (tmp_path / "l.csv").write_text(runs["snapshot"]["gradebook.csv"])
    row = next(r for r in _rows(tmp_path / "l.csv") if r["student"] == "bob" and r["exercise"] == "1.2")
    assert row["status"] == "overridden" and float(row["points"]) == 1
    assert "regrade request" in row["message"] and "instructor's override" in row["message"]
    assert re.search(r"graded [\d.]+ / 4, failed: NameError", row["message"])  # what the grader said stays
    assert "regrade request" in runs["snapshot"]["bob.md"]


def test_resume_regrades_a_student_whose_files_changed_and_says_so(runs):
    err = runs["second"].stderr
    assert "bob: its files changed since the last run; graded again" in err
    assert "alice:" not in err and "carol:" not in err
    rows = _rows(runs["out"] / "gradebook.csv")
    bob = {r["exercise"]: r for r in rows if r["student"] == "bob" and r["exercise"]}
    # The fixed notebook, not the stale NameError; the override the first run was given still applies.
    assert bob["1.2"]["status"] == "overridden" and "graded 4 / 4, passed" in bob["1.2"]["message"]
    assert all(r["status"] == "passed" for e, r in bob.items() if e != "1.2")
    assert "resume: kept from policy.json: --overrides overrides.csv" in err
    assert any(r["student"] == "bob" and "regraded" in r["message"] for r in rows)
    # The others were kept as they were, and nothing is recorded twice.
    keys = [(r["student"], r["chapter"], r["exercise"], r["message"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {r["student"] for r in rows} == {"alice", "bob", "carol"}


# -- the files an instructor writes: bad input gets a clear error ------------------------------
def test_overrides_file_errors_name_the_line(tmp_path):
    path = tmp_path / "o.csv"
    path.write_text("student,exercise,points\nbob,1.2,1\n")
    with pytest.raises(ValueError, match="reason"):
        gb.read_overrides(path)
    path.write_text("student,exercise,points,reason\nbob,1.2,lots,why\n")
    with pytest.raises(ValueError, match="line 2: points must be a number"):
        gb.read_overrides(path)
    path.write_text("student,exercise,points,reason\nbob,Exercise 2,1,why\n")
    with pytest.raises(ValueError, match="line 2"):
        gb.read_overrides(path)


def test_an_unquoted_comma_in_the_reason_is_part_of_the_reason(tmp_path):
    """The instructors' manual's own example line: everything after the third comma is the reason."""
    path = tmp_path / "o.csv"
    path.write_text("student,exercise,points,reason\nbob,1.2,1,regrade request: a typo, the method is right\n")
    (override,) = gb.read_overrides(path)
    assert override.reason == "regrade request: a typo, the method is right" and override.points == 1
    path.write_text("student,reason,exercise,points\nbob,a typo, the method is right,1.2,1\n")
    with pytest.raises(ValueError, match="line 2: 1 more field"):
        gb.read_overrides(path)


def test_override_above_the_maximum_or_for_no_row_is_refused_not_applied():
    rows = [Row("bob", STEM, "1.2", 0.5, 1, "failed", "wrong")]
    over = [gb.Override("bob", "1.2", 3, "why", 2), gb.Override("eve", "1.1", 1, "why", 3)]
    applied, problems = gb.apply_overrides(rows, over)
    assert applied == rows
    assert len(problems) == 2 and "worth 1" in problems[0] and "matches no" in problems[1]
    applied, problems = gb.apply_overrides(rows, [gb.Override("bob", "1.2", 0.75, "partial credit", 2)])
    assert applied[0].points == 0.75 and applied[0].status == "overridden" and not problems


def test_roster_needs_an_id_column_and_unique_ids(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("name,email\nA,a@x\n")
    with pytest.raises(ValueError, match="no student id column"):
        read_roster(path)
    path.write_text("id,name\n1,A\n1,B\n")
    with pytest.raises(ValueError, match="appear twice"):
        read_roster(path)
