"""A class run's policy is part of its output, and an import never erases a grade.

- The policy record (``grading.classroom.policy``): its one schema round-trips; a resume
  keeps every flag it is not given; a flag given with another value is a change, said
  with what it does to each student; an unreadable record is a clear error.
- The Canvas files (``grading.classroom.exports.write_canvas``), applied by a small model
  of Canvas's gradebook importer as ``docs/instructors.md`` states its rule (a cell that
  differs from the grade Canvas has is posted, an empty one included; a student the file
  does not name is left alone), leave a grade typed by hand in SpeedGrader as it was.
- Through the batch (two students of Chapter 1, one late, named by its roster email in
  ``--submitted``, one overridden): a resume that
  leaves out ``--due``, ``--late-penalty``, ``--submitted`` and ``--overrides`` keeps the
  grades penalised and overridden; one given another due date stops before grading, names
  the change and the student it affects, and writes nothing; with ``--policy-change`` it
  applies it.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from grading.classroom import policy
from grading.classroom.exports import CANVAS_POINTS_CELL, CANVAS_POINTS_ROW, Student, write_canvas
from grading.classroom.gradebook import Override
from grading.classroom.late import Lateness
from grading.classroom.rows import FAILED, MISSING, PASSED, REVIEW, Row
from grading.layout import ROOT, SOLUTIONS

STEM = "01_kv_memory"
CH11 = "11_sparse_attention"


# -- the record ---------------------------------------------------------------------------------
def _sheet(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _first(tmp_path: Path) -> policy.Policy:
    over = _sheet(tmp_path, "overrides.csv", "student,exercise,points,reason\nbob,1.2,1,typo\n")
    sub = _sheet(tmp_path, "submitted.csv", "student,submitted\nbob,2026-12-03T05:59:00+00:00\n")
    flags = policy.given("2026-12-01T23:59:00+00:00", "0.1:0.5", (over, [Override("bob", "1.2", 1, "typo", 2)]),
                         (sub, {"bob": datetime(2026, 12, 3, 5, 59, tzinfo=timezone.utc)}),
                         [("1", "90001", "--canvas-assignments 1=90001")], "1")
    return policy.resolve(flags, None).policy


def test_the_record_round_trips_and_names_no_folder(tmp_path):
    first = _first(tmp_path)
    path = policy.save(tmp_path / "out", first)
    data = json.loads(path.read_text())
    assert data["schema"] == policy.SCHEMA and data["version"] == policy.VERSION
    assert data["overrides"]["name"] == "overrides.csv" and str(tmp_path) not in path.read_text()
    assert policy.load(tmp_path / "out") == first
    assert policy.load(tmp_path / "nothing") is None


@pytest.mark.parametrize("text, error", [("{", "policy.json"), ('{"schema": "other"}', "not a run's policy"),
                                         ('{"schema": "grading.batch.policy", "version": 99}', "version 99"),
                                         ('{"schema": "grading.batch.policy", "version": 1, "due": 3}',
                                          "wrong kind")])
def test_an_unreadable_record_is_a_clear_error(tmp_path, text, error):
    (tmp_path / policy.FILE).write_text(text)
    with pytest.raises(ValueError, match=error):
        policy.load(tmp_path)


def test_a_resume_keeps_every_flag_it_is_not_given(tmp_path):
    first = _first(tmp_path)
    resumed = policy.resolve(policy.given(None, None, None, None, None, None), first)
    assert resumed.policy == first and not resumed.changes
    assert any(k.startswith("--due 2026-12-01T23:59:00+00:00") for k in resumed.kept)
    assert any(k.startswith("--overrides overrides.csv (sha256") for k in resumed.kept)
    # The same due date written in another offset, and the same file: no change.
    same = policy.given("2026-12-02T00:59:00+01:00", "0.1:0.50", None, None, None, None)
    assert not policy.resolve(same, first).changes


def test_a_flag_given_another_value_is_a_change(tmp_path):
    first = _first(tmp_path)
    over = _sheet(tmp_path, "overrides.csv", "student,exercise,points,reason\nbob,1.2,2,typo\n")
    flags = policy.given("2026-12-02T23:59:00+00:00", None, (over, [Override("bob", "1.2", 2, "typo", 2)]), None,
                         [("1", "90002", "x")], "1,11")
    resolved = policy.resolve(flags, first)
    assert [c.flag for c in resolved.changes] == ["--due", "--overrides", "--canvas-assignments", "--chapters"]
    assert [c.flag for c in resolved.blocking()] == ["--due", "--overrides", "--canvas-assignments"]
    assert resolved.policy.late_penalty == "0.1:0.5"  # left out: kept
    assert resolved.policy.override_entries[0].points == 2


def test_the_report_names_what_changes_for_whom():
    rows = [Row("bob", STEM, "1.1", 4, 4, PASSED), Row("bob", STEM, "1.2", 4, 4, PASSED),
            Row("ann", STEM, "1.1", 4, 4, PASSED)]
    before = policy.Effects({"bob": Lateness(2, 0.8, "late: ...")}, [Override("ann", "1.1", 1, "why", 2)])
    after = policy.Effects({"bob": Lateness(0, 1.0, "")}, [Override("ann", "1.1", 1, "why", 2)])
    lines = policy.report([policy.Change("--due", "a", "b")], before, after, rows)
    assert lines == ["policy change: --due: a -> b",
                     f"policy change for bob: late: 2 days late, x 0.8 -> on time; {STEM} 6.4 -> 8 of 8"]
    assert policy.report([policy.Change("--due", "a", "b")], after, after, rows)[-1] == \
        "policy change: no student's grade changes"
    # An edited overrides file: ann's override of 1.1 goes, bob gets one; each says so with the points.
    edited = policy.Effects(after.lateness, [Override("bob", "1.2", 1, "typo", 2)])
    lines = policy.report([policy.Change("--overrides", "o.csv (sha256 1)", "o.csv (sha256 2)")], after, edited, rows)
    assert lines[1:] == [f"policy change for ann: overrides: 1.1 1 -> none; {STEM} 1 -> 4 of 4",
                         f"policy change for bob: overrides: none -> 1.2 1; {STEM} 8 -> 5 of 8"]


# -- Canvas's import, as the manual states its rule ----------------------------------------------
def canvas_import(gradebook: dict[tuple[str, str], str], path: Path) -> dict[tuple[str, str], str]:
    """Canvas's gradebook as an import of ``path`` leaves it, by the rule docs/instructors.md
    states (from gradebook_importer.rb and process_gradebook_upload.js): the header's
    columns after the student's five are assignments; the row whose first cell holds
    "Points Possible" is no student; each student row's cell that differs from the grade
    Canvas has is posted, an empty cell included (which clears the grade); a student the
    file does not name is not touched. ``gradebook``: {(Canvas ID, column): grade}."""
    with open(path, newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    out = dict(gradebook)
    for row in rows:
        if CANVAS_POINTS_ROW in row[0]:
            continue
        for column, cell in zip(header[5:], row[5:]):
            if cell.strip() != out.get((row[1], column), ""):
                out[(row[1], column)] = cell.strip()
    return out


def test_the_model_of_the_importer_clears_a_grade_under_an_empty_cell(tmp_path):
    """The model is strict enough to catch the mistake: an empty cell over a grade clears it."""
    path = tmp_path / "old.csv"
    path.write_text(f"Student,ID,SIS User ID,SIS Login ID,Section,{STEM}\nB,2,,,,\n")
    assert canvas_import({("2", STEM): "7"}, path) == {("2", STEM): ""}


def test_an_import_leaves_a_grade_given_by_hand_alone(tmp_path):
    """Alice has both chapters; Bob has no notebook of Chapter 11, and his instructor gave him
    40 by hand in SpeedGrader; Carol's Chapter 1 waits for review and has a hand grade too.
    Importing every file written leaves both hand grades and posts every grade given."""
    rows = [Row("alice", STEM, "1.1", 4, 4, PASSED), Row("alice", CH11, "11.1", 50, 54, FAILED, "x"),
            Row("bob", STEM, "1.1", 1, 4, FAILED, "wrong"), Row("bob", CH11, "11.1", 0, 54, MISSING),
            Row("carol", STEM, "1.1", 0, 4, REVIEW, "homework1.ipynb"), Row("carol", CH11, "11.1", 9, 54, FAILED)]
    roster = [Student("1", "A"), Student("2", "B"), Student("3", "C")]
    canvas = {("2", CH11): "40", ("3", STEM): "3", ("1", STEM): "2"}
    paths, problems = write_canvas(tmp_path, rows, roster, dict(zip(["alice", "bob", "carol"], roster)))
    assert sorted(p.name for p in paths) == [f"gradebook_canvas_{STEM}.csv", f"gradebook_canvas_{CH11}.csv"]
    assert any("is split into" in p for p in problems), problems
    for path in paths:
        canvas = canvas_import(canvas, path)
    assert canvas == {("1", STEM): "4", ("2", STEM): "1", ("1", CH11): "50", ("3", CH11): "9",
                      ("2", CH11): "40", ("3", STEM): "3"}
    with open(paths[0], newline="", encoding="utf-8") as f:
        assert list(csv.reader(f))[1][0] == CANVAS_POINTS_CELL == "    Points Possible"  # as Canvas exports it
    # Everyone graded in every chapter: one file, and the split files of the last run are gone.
    everyone = [r for r in rows if r.student == "alice"]
    paths, _ = write_canvas(tmp_path, everyone, roster, {"alice": roster[0]})
    assert [p.name for p in paths] == ["gradebook_canvas.csv"]
    assert sorted(p.name for p in tmp_path.glob("gradebook_canvas*.csv")) == ["gradebook_canvas.csv"]


# -- through the batch ----------------------------------------------------------------------------
DUE = "2026-12-01T23:59:00+00:00"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("policy")
    subs = base / "subs"
    for name in ("ann", "bob"):
        (subs / name).mkdir(parents=True)
        shutil.copyfile(SOLUTIONS / f"{STEM}.ipynb", subs / name / f"{STEM}.ipynb")
    (base / "roster.csv").write_text("Student ID,Name,Email\ns001,Ann,ann@example.edu\ns002,Bob,bob@example.edu\n")
    (base / "submitted.csv").write_text("student,submitted\nbob@example.edu,2026-12-03T05:59:00+00:00\n")
    (base / "overrides.csv").write_text("student,exercise,points,reason\nann,1.2,1,a regrade request\n")
    out = base / "out"
    first = _batch(subs, out, "--roster", str(base / "roster.csv"), "--due", DUE, "--late-penalty", "0.1:0.5",
                   "--submitted", str(base / "submitted.csv"), "--overrides", str(base / "overrides.csv"))
    assert first.returncode == 0, first.stderr[-3000:]
    return {"subs": subs, "out": out, "first": _files(out), "roster": ("--roster", str(base / "roster.csv"))}


pytestmark = pytest.mark.timeout(900)


def _batch(subs: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grading.batch", str(subs), "--out", str(out), "--chapters", "1",
                           "--workers", "2", "--quiet", *extra], cwd=ROOT, capture_output=True, text=True, timeout=800)


def _files(out: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(out.iterdir()) if p.is_file()}


def _points(out: Path) -> dict[tuple[str, str], tuple[float, str]]:
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        return {(r["student"], r["exercise"]): (float(r["points"]), r["status"]) for r in csv.DictReader(f)
                if r["exercise"]}


def test_the_first_run_records_its_policy(graded):
    recorded = policy.load(graded["out"])
    assert (recorded.due, recorded.late_penalty, recorded.chapters) == (DUE, "0.1:0.5", "1")
    assert recorded.overrides.name == "overrides.csv" and recorded.submitted.name == "submitted.csv"
    points = _points(graded["out"])
    assert points[("ann", "1.2")] == (1, "overridden")
    assert "20% of the points taken" in (graded["out"] / "feedback" / "bob.md").read_text()


def test_a_resume_without_the_flags_keeps_the_grades_penalised_and_overridden(graded):
    again = _batch(graded["subs"], graded["out"], *graded["roster"], "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resume: kept from policy.json: --due {DUE}; --late-penalty 0.1:0.5" in again.stderr
    now = _files(graded["out"])
    for name in ("gradebook.csv", "gradebook_canvas.csv", "gradebook_wide.csv", "policy.json"):
        assert now.get(name) == graded["first"].get(name), name


def test_a_resume_with_another_due_date_says_what_changes_and_stops(graded):
    later = "2026-12-03T23:59:00+00:00"
    before = _files(graded["out"])
    stopped = _batch(graded["subs"], graded["out"], *graded["roster"], "--resume", "--due", later)
    assert stopped.returncode == 2, stopped.stderr[-3000:]
    assert f"policy change: --due: {DUE} -> {later}" in stopped.stderr
    assert "policy change for bob: late: 2 days late, x 0.8 -> on time" in stopped.stderr
    assert "policy change for ann" not in stopped.stderr
    assert "--policy-change" in stopped.stderr and _files(graded["out"]) == before

    applied = _batch(graded["subs"], graded["out"], *graded["roster"], "--resume", "--due", later, "--policy-change")
    assert applied.returncode == 0, applied.stderr[-3000:]
    assert "policy change for bob: late: 2 days late, x 0.8 -> on time" in applied.stderr
    assert policy.load(graded["out"]).due == later
    points = _points(graded["out"])
    assert points[("bob", "1.1")][0] > _first_points(graded)[("bob", "1.1")][0]  # no longer penalised
    assert points[("ann", "1.2")] == (1, "overridden")  # the recorded overrides still apply
    assert "policy change for bob" in (graded["out"] / "needs_review.md").read_text()


def _first_points(graded) -> dict:
    rows = csv.DictReader(graded["first"]["gradebook.csv"].splitlines())
    return {(r["student"], r["exercise"]): (float(r["points"]), r["status"]) for r in rows if r["exercise"]}
