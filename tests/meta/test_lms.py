"""Grades in and out of an LMS without hand work (issue 27, items 4, 7, 8 and 9).

- A bulk download as Canvas, Moodle (in folders and flattened) and Blackboard name it is
  read as one submission per student, and each student part is matched to the roster
  (``grading/lms.py``, ``grading.gradebook.match_roster``).
- ``gradebook_canvas.csv`` has Canvas's import header and a ``Points Possible`` row.
- Late work: the policy, the one function that applies it (``grading/late.py``), the
  submission time from Gradescope's ``submission_metadata.json``.
- Overrides may name the student by roster id.
- One round trip through ``python -m grading.batch``: a Canvas download graded with
  Canvas's own roster export, a due date and a penalty, without ``--chapters``.
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

from grading import gradebook as gb
from grading import late, lms
from grading.layout import EXERCISES, ROOT, SOLUTIONS, discover_chapters
from grading.matching import list_students, match_folder

STEM = "01_kv_memory"
SOLVED, UNSOLVED = SOLUTIONS / f"{STEM}.ipynb", EXERCISES / f"{STEM}.ipynb"
CHAPTERS = discover_chapters(only=["1", "3"])
# Canvas's gradebook export, as Canvas writes it (its own import format): the points row first.
CANVAS_ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section
    Points Possible,,,,
"Smith, Alice",12345,S001,asmith,Section A
"Jones, Bob",23456,S002,bjones,Section A
"Student, Test",99999,,,Section A
"""
pytestmark = pytest.mark.timeout(900)


def _download(folder: Path, names: dict[str, Path]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in names.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return folder


def _gathered(folder: Path, scratch: Path) -> dict[str, lms.LmsStudent]:
    found, taken = lms.gather(folder, scratch)
    students, ignored = list_students(folder, skip=taken)
    assert not students and not ignored, (students, ignored)  # every entry was the LMS's
    return {s.name: s for s in found}


# -- the layouts ------------------------------------------------------------------------------------
def test_a_canvas_download_is_one_submission_per_student(tmp_path):
    folder = _download(tmp_path / "canvas", {
        "smithalice_12345_678901_01_kv_memory.ipynb": SOLVED,
        "smithalice_12345_678901_03_quantized_kv_cache-1.ipynb": SOLUTIONS / "03_quantized_kv_cache.ipynb",
        "jonesbob_LATE_23456_678902_01_kv_memory.ipynb": UNSOLVED})
    got = _gathered(folder, tmp_path / "scratch")
    assert sorted(got) == ["jonesbob", "smithalice"]
    alice, bob = got["smithalice"], got["jonesbob"]
    assert alice.lms == "canvas" and alice.keys == ["smithalice", "12345"] and not alice.late
    assert bob.late and bob.keys == ["jonesbob", "23456"]
    sub = match_folder("smithalice", alice.folder, CHAPTERS)
    assert sorted(sub.notebooks) == [STEM, "03_quantized_kv_cache"] and not sub.unmatched
    assert match_folder("jonesbob", bob.folder, CHAPTERS).notebooks[STEM].read_bytes() == UNSOLVED.read_bytes()


def test_a_moodle_download_in_folders_and_flattened(tmp_path):
    folder = _download(tmp_path / "moodle", {
        "Alice Smith_12345_assignsubmission_file_/01_kv_memory.ipynb": SOLVED,
        "Bob Jones_23456_assignsubmission_file_01_kv_memory.ipynb": UNSOLVED})
    got = _gathered(folder, tmp_path / "scratch")
    assert sorted(got) == ["Alice Smith", "Bob Jones"]
    assert got["Alice Smith"].folder == folder / "Alice Smith_12345_assignsubmission_file_"  # used as it is
    assert got["Alice Smith"].keys == ["Alice Smith", "12345"]
    for name in got:
        assert STEM in match_folder(name, got[name].folder, CHAPTERS).notebooks


def test_a_blackboard_download_keeps_the_latest_attempt_and_drops_the_receipts(tmp_path):
    folder = _download(tmp_path / "blackboard", {
        "Assignment_alice.smith_attempt_2026-12-01-10-00-00_01_kv_memory.ipynb": UNSOLVED,
        "Assignment_alice.smith_attempt_2026-12-02-09-30-00_01_kv_memory.ipynb": SOLVED,
        "Assignment_alice.smith_attempt_2026-12-01-10-00-00.txt": SOLVED,  # the receipts
        "Assignment_alice.smith_attempt_2026-12-02-09-30-00.txt": SOLVED})
    got = _gathered(folder, tmp_path / "scratch")
    alice = got["alice.smith"]
    assert alice.lms == "blackboard" and alice.attempt == datetime(2026, 12, 2, 9, 30)
    sub = match_folder("alice.smith", alice.folder, CHAPTERS)
    assert sub.notebooks[STEM].read_bytes() == SOLVED.read_bytes() and not sub.ambiguous


def test_each_layouts_student_part_is_matched_to_the_roster(tmp_path):
    roster_file = tmp_path / "roster.csv"
    roster_file.write_text(CANVAS_ROSTER)
    roster = gb.read_roster(roster_file)
    assert [s.id for s in roster] == ["12345", "23456"]  # not the points row, not the test student
    assert roster[0].sis_user_id == "S001" and roster[0].sis_login_id == "asmith" and roster[0].section == "Section A"
    # Canvas: the sortable name, or the user id; Moodle: the full name; Blackboard: the login.
    aliases = {"smithalice": ["smithalice", "12345"], "Bob Jones": ["Bob Jones", "23456"], "asmith": ["asmith"]}
    matched, problems = gb.match_roster(["smithalice", "Bob Jones"], roster, aliases)
    assert {k: v.id for k, v in matched.items()} == {"smithalice": "12345", "Bob Jones": "23456"}, problems
    by_name_only, _ = gb.match_roster(["jonesbob"], roster)  # no id at hand: the sortable name alone
    assert by_name_only["jonesbob"].id == "23456"
    by_login, _ = gb.match_roster(["asmith"], roster)  # Blackboard's user name, as SIS Login ID
    assert by_login["asmith"].id == "12345"


def test_a_link_named_as_canvas_names_files_is_not_read(tmp_path):
    folder = _download(tmp_path / "canvas", {"smithalice_12345_678901_01_kv_memory.ipynb": SOLVED})
    (folder / "jonesbob_23456_678902_01_kv_memory.ipynb").symlink_to(SOLVED)
    found, taken = lms.gather(folder, tmp_path / "scratch")
    assert [s.name for s in found] == ["smithalice"]
    assert list_students(folder, skip=taken) == ([], ["jonesbob_23456_678902_01_kv_memory.ipynb"])


def test_entries_that_are_no_lms_s_stay_ordinary_submissions(tmp_path):
    folder = _download(tmp_path / "mixed", {"carol/01_kv_memory.ipynb": SOLVED, "dave.zip": SOLVED,
                                            "notes.txt": SOLVED})
    found, taken = lms.gather(folder, tmp_path / "scratch")
    assert not found and not taken
    students, ignored = list_students(folder, skip=taken)
    assert [s for s, _ in students] == ["carol", "dave"] and ignored == ["notes.txt"]


# -- Canvas's import ---------------------------------------------------------------------------------
def _rows(student: str, points: dict[str, tuple[float, float]]) -> list[gb.Row]:
    return [gb.Row(student, f"0{e[0]}_x", e, p, m, gb.PASSED if p == m else gb.FAILED) for e, (p, m) in points.items()]


def test_gradebook_canvas_has_canvas_s_header_and_a_points_possible_row(tmp_path):
    roster = [gb.Student("12345", "Smith, Alice", sis_user_id="S001", sis_login_id="asmith", section="A")]
    rows = _rows("smithalice", {"1.1": (4, 4), "1.2": (1, 4), "3.1": (2, 9)}) + _rows("ghost", {"1.1": (4, 4)})
    path, problems = gb.write_canvas(tmp_path, rows, roster, {"smithalice": roster[0]})
    with open(path, newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01_x", "03_x"]
    assert table[1] == ["Points Possible", "", "", "", "", "8", "9"]
    assert table[2] == ["Smith, Alice", "12345", "S001", "asmith", "A", "5", "2"]
    assert len(table) == 3 and problems == ["gradebook_canvas.csv: ghost is left out (no roster entry, so no Canvas id)"]


# -- late work ---------------------------------------------------------------------------------------
UTC = timezone.utc
DUE = datetime(2026, 12, 1, 23, 59, tzinfo=UTC)


def test_the_late_policy_is_parsed_and_bad_ones_are_refused():
    assert late.LatePolicy.parse("0.1") == late.LatePolicy(0.1, 1.0)
    assert late.LatePolicy.parse("0.1:0.5") == late.LatePolicy(0.1, 0.5)
    for bad in ("", "10%", "0", "1.5", "0.1:2", "0.1:0.5:1"):
        with pytest.raises(ValueError, match="late-penalty"):
            late.LatePolicy.parse(bad)
    with pytest.raises(ValueError, match="--due"):
        late.parse_time("tomorrow", "--due")


def test_lateness_counts_started_days_and_stops_at_the_cap():
    policy = late.LatePolicy.parse("0.1:0.25")
    on_time = late.lateness(datetime(2026, 12, 1, 23, 0, tzinfo=UTC), DUE, policy)
    assert on_time.days == 0 and on_time.factor == 1
    one = late.lateness(datetime(2026, 12, 2, 0, 0, tzinfo=UTC), DUE, policy)  # one minute late
    assert one.days == 1 and one.factor == pytest.approx(0.9) and "10% of the points taken" in one.note
    assert late.lateness(datetime(2026, 12, 3, 23, 58, tzinfo=UTC), DUE, policy).factor == pytest.approx(0.8)
    assert late.lateness(datetime(2026, 12, 9, tzinfo=UTC), DUE, policy).factor == pytest.approx(0.75)  # capped
    marked = late.lateness(None, DUE, policy, marked_late=True)
    assert marked.days == 1 and "no time given" in marked.note
    assert late.Lateness.from_json(json.loads(json.dumps(one.to_json()))) == one


def test_the_penalty_scales_every_graded_row_and_leaves_a_note():
    rows = _rows("bob", {"1.1": (4, 4), "1.2": (0, 4)})
    out = late.apply(rows, late.lateness(datetime(2026, 12, 2, 12, tzinfo=UTC), DUE, late.LatePolicy(0.25)))
    assert [(r.points, r.max_points) for r in out if r.exercise] == [(3.0, 4), (0, 4)]
    notes = [r for r in out if not r.exercise]
    assert len(notes) == 1 and notes[0].status == gb.NOTE and notes[0].message.startswith(gb.LATE_NOTE)
    assert late.apply(rows, None) == rows


def test_gradescope_s_metadata_gives_the_time_and_the_student_s_own_due_date(tmp_path):
    meta = {"created_at": "2026-12-02T10:00:00.000000-07:00",
            "assignment": {"due_date": "2026-12-01T23:59:00.000000-07:00", "title": "Chapter 1"},
            "users": [{"email": "alice@example.edu", "name": "Alice Smith",
                       "assignment": {"due_date": "2026-12-03T23:59:00.000000-07:00"}}]}  # an extension
    path = tmp_path / "submission_metadata.json"
    path.write_text(json.dumps(meta))
    submitted, due = late.from_gradescope(path)
    assert submitted < due and due.utcoffset().total_seconds() == -7 * 3600
    del meta["users"][0]["assignment"]
    path.write_text(json.dumps(meta))
    submitted, due = late.from_gradescope(path)
    assert late.lateness(submitted, due, late.LatePolicy(0.1)).days == 1
    assert late.from_gradescope(tmp_path / "absent.json") == (None, None)
    path.write_text("[]")
    with pytest.raises(ValueError, match="not Gradescope's submission metadata"):
        late.from_gradescope(path)


def test_submitted_csv_names_its_bad_line(tmp_path):
    path = tmp_path / "submitted.csv"
    path.write_text("student,submitted\nalice,2026-12-02T10:00:00+00:00\nbob,yesterday\n")
    with pytest.raises(ValueError, match="line 3"):
        late.read_submitted(path)


# -- overrides by roster id --------------------------------------------------------------------------
def test_an_override_may_name_the_student_by_roster_id():
    alice = gb.Student("s001", "Alice Example", "alice@example.edu")
    overrides = [gb.Override("s001", "1.2", 1, "regrade", 2), gb.Override("alice", "1.1", 2, "typo", 3),
                 gb.Override("s999", "1.1", 2, "who?", 4)]
    resolved = gb.resolve_override_students(overrides, ["alice"], {"alice": alice})
    assert [o.student for o in resolved] == ["alice", "alice", "s999"]
    rows = _rows("alice", {"1.1": (0, 4), "1.2": (0, 4)})
    applied, problems = gb.apply_overrides(rows, resolved)
    assert [r.points for r in applied] == [2, 1]
    assert problems == ["override on line 4 (s999, 1.1) matches no submission: 's999' is neither a submission's "
                        "name nor the roster id, email or name of one (--roster); not applied"]


# -- the round trip ----------------------------------------------------------------------------------
def test_a_canvas_download_graded_late_and_imported_back(tmp_path):
    """A Canvas download (Alice solved, on time; Bob solved, marked LATE and 30 hours late
    in submitted.csv, named there by his roster id), Canvas's roster export, a due date and
    10% a day: no --chapters, so only Chapter 1 (all the download holds) is graded, and the
    model of Chapter 8 is not converted."""
    folder = _download(tmp_path / "download", {
        "smithalice_12345_678901_01_kv_memory.ipynb": SOLVED,
        "jonesbob_LATE_23456_678902_01_kv_memory.ipynb": SOLVED})
    (tmp_path / "roster.csv").write_text(CANVAS_ROSTER)
    (tmp_path / "submitted.csv").write_text("student,submitted\n23456,2026-12-03T05:59:00+00:00\n")
    out = tmp_path / "grades"
    done = subprocess.run([sys.executable, "-m", "grading.batch", str(folder), "--out", str(out), "--workers", "2",
                           "--quiet", "--roster", str(tmp_path / "roster.csv"), "--due", "2026-12-01T23:59:00+00:00",
                           "--late-penalty", "0.1:0.5", "--submitted", str(tmp_path / "submitted.csv")],
                          cwd=ROOT, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"chapters graded: {STEM} (the chapters the submissions hold notebooks of" in done.stderr
    assert "modellab" not in done.stderr
    with open(out / "gradebook_canvas.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", STEM]
    full = float(table[1][5])
    assert table[1][:5] == ["Points Possible", "", "", "", ""] and full > 0
    got = {row[1]: float(row[5]) for row in table[2:]}
    assert got == {"12345": full, "23456": pytest.approx(full * 0.8)}  # 30 hours: two started days
    feedback = (out / "feedback" / "jonesbob.md").read_text()
    assert "late: submitted 2026-12-03T05:59+00:00" in feedback and "20% of the points taken" in feedback
    assert "late" not in (out / "feedback" / "smithalice.md").read_text().lower()
    review = (out / "needs_review.md").read_text()
    assert f"chapters graded: {STEM}" in review
    with open(out / "gradebook_wide.csv", newline="") as f:
        wide = {r["student"]: r for r in csv.DictReader(f)}
    assert float(wide["jonesbob"]["max_total"]) == full and float(wide["jonesbob"]["total"]) == pytest.approx(full * 0.8)
