"""Grades in and out of an LMS without hand work.

- A bulk download as Canvas, Moodle (in folders and flattened) and Blackboard name it is
  read as one submission per student, and each student part is matched to the roster
  (``grading/classroom/lms.py``, ``grading.classroom.exports.match_roster``).
- ``gradebook_canvas.csv`` has Canvas's import header and a ``Points Possible`` row.
- Late work: the policy, the one function that applies it (``grading/classroom/late.py``), the
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

from grading.classroom import gradebook as gb
from grading.classroom import late, lms
from grading.classroom.exports import (
    CANVAS_FIELDS,
    CanvasAssignment,
    Student,
    canvas_columns,
    match_roster,
    read_canvas_assignments,
    read_canvas_map,
    read_roster,
    unmapped_chapters,
    write_canvas,
    write_wide,
)
from grading.classroom.matching import list_students, match_folder
from grading.classroom.rows import FAILED, MISSING, NOTE, PASSED, REVIEW, Row, partial_chapters
from grading.layout import EXERCISES, ROOT, SOLUTIONS, discover_chapters
from grading.texts import UNMATCHED

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
    sub = match_folder("alice.smith", alice.folder, CHAPTERS, copied=True, attempts=alice.attempts)
    assert sub.notebooks[STEM].read_bytes() == SOLVED.read_bytes() and not sub.ambiguous
    (older,) = sub.not_graded  # the earlier attempt is listed, never dropped unsaid
    assert older.files == (f"{STEM}.ipynb (Blackboard attempt of 2026-12-01 10:00:00)",)


def test_each_layouts_student_part_is_matched_to_the_roster(tmp_path):
    roster_file = tmp_path / "roster.csv"
    roster_file.write_text(CANVAS_ROSTER)
    roster = read_roster(roster_file)
    assert [s.id for s in roster] == ["12345", "23456"]  # not the points row, not the test student
    assert roster[0].sis_user_id == "S001" and roster[0].sis_login_id == "asmith" and roster[0].section == "Section A"
    # Canvas: the sortable name, or the user id; Moodle: the full name; Blackboard: the login.
    aliases = {"smithalice": ["smithalice", "12345"], "Bob Jones": ["Bob Jones", "23456"], "asmith": ["asmith"]}
    matched, problems = match_roster(["smithalice", "Bob Jones"], roster, aliases)
    assert {k: v.id for k, v in matched.items()} == {"smithalice": "12345", "Bob Jones": "23456"}, problems
    by_name_only, _ = match_roster(["jonesbob"], roster)  # no id at hand: the sortable name alone
    assert by_name_only["jonesbob"].id == "23456"
    by_login, _ = match_roster(["asmith"], roster)  # Blackboard's user name, as SIS Login ID
    assert by_login["asmith"].id == "12345"


# -- attempts: the newest is graded, every other one is listed -------------------------------------
def _opened(folder: Path, scratch: Path, chapters=CHAPTERS[:1]) -> dict:
    """Each student of an LMS download as the batch opens them: (submission, review rows, tasks)."""
    from grading.classroom import grade

    found, _ = lms.gather(folder, scratch)
    out = {}
    for n, s in enumerate(found):
        sub = grade.open_submission(s.name, s.folder, discover_chapters(), scratch, n, s.attempts)
        out[s.name] = (sub, grade.submission_rows(s.name, sub, chapters), grade.submission_tasks(s.name, sub, chapters))
    return out


def test_a_canvas_resubmission_is_graded_at_its_newest_attempt(tmp_path):
    """Alice attached both attempts (``-1``: her resubmission, the higher attachment id);
    Bob's later download was unpacked over the first into the same folder. The newest is
    graded, whatever the exactly named older file is called, and the older is in review."""
    folder = _download(tmp_path / "canvas", {
        "smithalice_12345_700602_01_kv_memory.ipynb": UNSOLVED,
        "smithalice_12345_700603_01_kv_memory-1.ipynb": SOLVED,
        "jonesbob_23456_700610_01_kv_memory.ipynb": UNSOLVED})  # the first download
    _download(folder, {"jonesbob_LATE_23456_700611_01_kv_memory-1.ipynb": SOLVED})  # the later one, over it
    got = _opened(folder, tmp_path / "scratch")
    for name, (older, newer) in {"smithalice": ("700602", "700603"), "jonesbob": ("700610", "700611")}.items():
        sub, rows, (task,) = got[name]
        assert task.notebook.read_bytes() == SOLVED.read_bytes() and not sub.ambiguous, name
        (row,) = [r for r in rows if r.status == REVIEW]
        assert row.message.startswith(f"{STEM}: graded {STEM}-1.ipynb (Canvas attachment {newer}); not graded: "
                                      f"{STEM}.ipynb (Canvas attachment {older})"), row.message


def test_attempts_the_names_cannot_order_go_to_review(tmp_path):
    """Canvas's ``-N`` ordering two files of one name against their attachment ids, or a
    plain folder's two copies: nothing is guessed unsaid. A plain folder's exactly named
    copy is graded, and the other is listed."""
    folder = _download(tmp_path / "canvas", {"smithalice_12345_700603_01_kv_memory.ipynb": UNSOLVED,
                                             "smithalice_12345_700602_01_kv_memory-1.ipynb": SOLVED})
    sub, rows, (task,) = _opened(folder, tmp_path / "scratch")["smithalice"]
    assert task.notebook is None and "several different notebooks" in task.note and not sub.not_graded
    plain = _download(tmp_path / "plain", {f"{STEM}.ipynb": UNSOLVED, f"{STEM} (1).ipynb": SOLVED})
    sub = match_folder("carol", plain, CHAPTERS)
    assert sub.notebooks[STEM].name == f"{STEM}.ipynb"
    (listed,) = sub.not_graded
    assert listed.files == (f"{STEM} (1).ipynb",) and "do not say which is newer" in listed.why


def test_a_chapter_not_graded_is_never_spoken_of(tmp_path):
    """--chapters 12: a notebook of Chapter 1 is Chapter 1's, not "not matched", and its
    attempts are not listed; the rows speak of Chapter 12 only."""
    folder = _download(tmp_path / "canvas", {"smithalice_12345_700602_01_kv_memory.ipynb": UNSOLVED,
                                             "smithalice_12345_700603_01_kv_memory-1.ipynb": SOLVED})
    twelve = discover_chapters(only=["12"])
    sub, rows, (task,) = _opened(folder, tmp_path / "scratch", twelve)["smithalice"]
    assert rows == [] and task.chapter.number == 12 and task.notebook is None and task.note == ""


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
def _rows(student: str, points: dict[str, tuple[float, float]]) -> list[Row]:
    return [Row(student, f"0{e[0]}_x", e, p, m, PASSED if p == m else FAILED) for e, (p, m) in points.items()]


def test_gradebook_canvas_has_canvas_s_header_and_a_points_possible_row(tmp_path):
    roster = [Student("12345", "Smith, Alice", sis_user_id="S001", sis_login_id="asmith", section="A")]
    rows = _rows("smithalice", {"1.1": (4, 4), "1.2": (1, 4), "3.1": (2, 9)}) + _rows("ghost", {"1.1": (4, 4)})
    (path,), problems = write_canvas(tmp_path, rows, roster, {"smithalice": roster[0]})
    with open(path, newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01_x", "03_x"]
    assert table[1] == ["    Points Possible", "", "", "", "", "8", "9"]  # as Canvas's export writes it
    assert table[2] == ["Smith, Alice", "12345", "S001", "asmith", "A", "5", "2"]
    assert len(table) == 3
    assert problems == ["gradebook_canvas.csv: ghost is left out (no roster entry, so no Canvas id)"]


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
    assert len(notes) == 1 and notes[0].status == NOTE and notes[0].message.startswith(gb.LATE_NOTE)
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
    alice = Student("s001", "Alice Example", "alice@example.edu")
    overrides = [gb.Override("s001", "1.2", 1, "regrade", 2), gb.Override("alice", "1.1", 2, "typo", 3),
                 gb.Override("s999", "1.1", 2, "who?", 4)]
    with pytest.raises(ValueError, match="--overrides, line 4: 's999' names no student"):
        gb.resolve_override_students(overrides, ["alice"], {"alice": alice})
    resolved = gb.resolve_override_students(overrides[:2], ["alice"], {"alice": alice})
    assert [o.student for o in resolved] == ["alice", "alice"]
    rows = _rows("alice", {"1.1": (0, 4), "1.2": (0, 4)})
    applied, problems = gb.apply_overrides(rows, resolved)
    assert [r.points for r in applied] == [2, 1] and problems == []
    # A roster entry that handed in nothing: applied to no one, and said.
    ghost = Student("s999", "Ghost, Gus")
    resolved = gb.resolve_override_students(overrides, ["alice"], {"alice": alice}, roster=[alice, ghost])
    assert gb.apply_overrides(rows, resolved)[1] == ["override on line 4 (s999, 1.1) matches no submission: "
                                                     "'s999' names a roster entry that handed in nothing; not applied"]


# -- every roster id names a student in every sheet ------------------------------------------------
def test_lateness_may_name_the_student_by_each_roster_id(tmp_path):
    """--submitted by Canvas's ID, SIS User ID, SIS Login ID and the submission's name: one
    resolver (grading.classroom.sheets) for every sheet; a key that names no student, or
    several, is an error naming its line."""
    from grading.classroom.sheets import StudentKeys

    roster_file = tmp_path / "roster.csv"
    roster_file.write_text(CANVAS_ROSTER)
    roster = read_roster(roster_file)
    matched = {"smithalice": roster[0], "jonesbob": roster[1]}
    keys = StudentKeys(list(matched), matched, {"smithalice": ["smithalice", "12345"]}, roster)
    when = datetime(2026, 12, 3, 5, 59, tzinfo=UTC)
    for key in ("12345", "S001", "asmith", "smithalice"):  # ID, SIS User ID, SIS Login ID, the submission
        path = tmp_path / "submitted.csv"
        path.write_text(f"student,submitted\n{key},{when.isoformat()}\n")
        times = late.resolve_submitted(late.read_submitted(path), keys, late.submitted_where(path))
        assert times == {"smithalice": when}, key
        assert late.lateness(times["smithalice"], DUE, late.LatePolicy(0.1)).days == 2
    path.write_text(f"student,submitted\n12345,{when.isoformat()}\nS404,{when.isoformat()}\n")
    with pytest.raises(ValueError, match="--submitted submitted.csv, line 3: 'S404' names no student"):
        late.resolve_submitted(late.read_submitted(path), keys, late.submitted_where(path))
    path.write_text(f"student,submitted\n12345,{when.isoformat()}\nS001,2026-12-09T00:00:00+00:00\n")
    with pytest.raises(ValueError, match="line 3: 'S001' gives smithalice another time than"):
        late.resolve_submitted(late.read_submitted(path), keys, late.submitted_where(path))
    twins = StudentKeys(["smithalice", "jonesbob"], {"smithalice": roster[0],
                                                     "jonesbob": Student("23456", "Jones, Bob", sis_login_id="S001")})
    with pytest.raises(ValueError, match="'S001' names several students \\(jonesbob, smithalice\\)"):
        twins.resolve("S001", "--submitted, line 2")


def _batch(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    """``python -m grading.batch`` on a Canvas download of Alice and Bob, with Canvas's roster."""
    folder = _download(tmp_path / "download", {"smithalice_12345_678901_01_kv_memory.ipynb": UNSOLVED,
                                               "jonesbob_23456_678902_01_kv_memory.ipynb": UNSOLVED})
    (tmp_path / "roster.csv").write_text(CANVAS_ROSTER)
    return subprocess.run([sys.executable, "-m", "grading.batch", str(folder), "--out", str(tmp_path / "grades"),
                           "--quiet", "--roster", str(tmp_path / "roster.csv"), *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("sheet, text, said", [
    ("--submitted", "student,submitted\nS001,2026-12-02T10:00:00+00:00\nS003,2026-12-02T10:00:00+00:00\n",
     "--submitted sheet.csv, line 3: 'S003' names no student"),
    ("--overrides", "student,exercise,points,reason\nbjones,1.1,1,regrade\nnobody,1.2,1,typo\n",
     "--overrides, line 3: 'nobody' names no student"),
    ("--overrides", "student,exercise,points,reason\nsection a,1.1,1,regrade\n",
     "--overrides, line 2: 'section a' names no student")])
def test_a_sheet_line_that_names_no_one_stops_the_run_before_grading(tmp_path, sheet, text, said):
    (tmp_path / "sheet.csv").write_text(text)
    flags = ["--due", "2026-12-01T23:59:00+00:00", "--late-penalty", "0.1"] if sheet == "--submitted" else []
    done = _batch(tmp_path, sheet, str(tmp_path / "sheet.csv"), *flags)
    assert done.returncode == 2 and said in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "grades" / "gradebook.csv").exists()  # nothing was graded


def test_chapters_given_means_no_word_of_the_others(tmp_path):
    """``--chapters 12`` on a download of Chapter 1 notebooks: every feedback speaks of
    Chapter 12 alone (missing), never of a Chapter 1 notebook "not matched to a chapter"."""
    done = _batch(tmp_path, "--chapters", "12")
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("smithalice", "jonesbob"):
        feedback = (tmp_path / "grades" / "feedback" / f"{name}.md").read_text()
        assert UNMATCHED not in feedback and "01_kv_memory" not in feedback and "## 12_" in feedback, feedback
    assert UNMATCHED not in (tmp_path / "grades" / "needs_review.md").read_text()


# -- the round trip ----------------------------------------------------------------------------------
def test_a_canvas_download_graded_late_and_imported_back(tmp_path):
    """A Canvas download (Alice solved, on time, and handed in Chapter 3's stub too; a later
    download unpacked over the first holds her resubmission, ``01_kv_memory-1.ipynb``, beside
    the exactly named stub she first handed in; Bob
    solved, marked LATE and 30 hours late in submitted.csv, named there by his SIS User ID;
    María, an accented name, whose solved notebook is called homework1.ipynb; an anonymous
    submission; a file nothing reads), Canvas's roster export, a due date and 10% a day: no
    --chapters, so Chapters 1 and 3 (all the download holds) are graded, and the model of
    Chapter 8 is not converted. No cell holds a zero the grader did not give. The export
    holds the course's assignment of Chapter 1 (worth 100 points there), mapped with
    --canvas-assignments: the import updates it; Chapter 3 has none, and the review says so."""
    ch3 = "03_quantized_kv_cache"
    folder = _download(tmp_path / "download", {
        "smithalice_12345_678900_01_kv_memory.ipynb": UNSOLVED,  # the first download: her first attempt
        f"smithalice_12345_678907_{ch3}.ipynb": EXERCISES / f"{ch3}.ipynb"})
    _download(folder, {  # the later download, unpacked into the same folder
        "smithalice_12345_678908_01_kv_memory-1.ipynb": SOLVED,
        f"smithalice_12345_678907_{ch3}.ipynb": EXERCISES / f"{ch3}.ipynb",
        "jonesbob_LATE_23456_678902_01_kv_memory.ipynb": SOLVED,
        "deleónmaría_34567_678903_homework1.ipynb": SOLVED,
        "anon_Xy3Zq_678904_01_kv_memory.ipynb": SOLVED,
        "jonesbob_23456_678905_text.html": SOLVED})
    export = "Student,ID,SIS User ID,SIS Login ID,Section,Week 1: KV memory (90001),Current Score\n" \
             "    Points Possible,,,,,100,(read only)\n" + "".join(
                 line + ",,\n" for line in CANVAS_ROSTER.splitlines()[2:]) + \
             '"de León, María",34567,S003,mdeleon,Section A,,\n'
    (tmp_path / "roster.csv").write_text(export, encoding="utf-8")
    (tmp_path / "submitted.csv").write_text("student,submitted\nS002,2026-12-03T05:59:00+00:00\n")
    out = tmp_path / "grades"
    done = subprocess.run([sys.executable, "-m", "grading.batch", str(folder), "--out", str(out), "--workers", "2",
                           "--quiet", "--roster", str(tmp_path / "roster.csv"), "--due", "2026-12-01T23:59:00+00:00",
                           "--late-penalty", "0.1:0.5", "--submitted", str(tmp_path / "submitted.csv"),
                           "--canvas-assignments", "1=90001"],
                          cwd=ROOT, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"chapters graded: {STEM}, {ch3} (the chapters the submissions hold notebooks of" in done.stderr
    assert "modellab" not in done.stderr
    # The students with a grade differ between the chapters: a file each, naming only those.
    assert not (out / "gradebook_canvas.csv").exists()
    tables = {}
    for stem in (STEM, ch3):
        with open(out / f"gradebook_canvas_{stem}.csv", newline="", encoding="utf-8") as f:
            tables[stem] = list(csv.reader(f))
    table = tables[STEM]
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Week 1: KV memory (90001)"]
    assert tables[ch3][0][5:] == [ch3] and float(tables[ch3][1][5]) > 0
    with open(out / "gradebook_wide.csv", newline="", encoding="utf-8") as f:
        wide = {r["student"]: r for r in csv.DictReader(f)}
    full = float(wide["jonesbob"]["max_total"])  # Chapter 1's points: Bob handed in nothing else
    assert table[1] == ["    Points Possible", "", "", "", "", "100"] and full > 0
    got = {row[1]: row[5:] for row in table[2:]}
    # The anonymous submission has no Canvas id; María's homework1.ipynb waits for review: no row,
    # so the import keeps whatever grade Canvas has for her.
    assert set(got) == {"12345", "23456"}
    assert float(got["12345"][0]) == full  # the newest attempt
    assert float(got["23456"][0]) == pytest.approx(full * 0.8)  # 30 hours: two days
    assert {row[1]: row[5:] for row in tables[ch3][2:]} == {"12345": ["0"]}  # Chapter 3's stub: 0; no one else
    feedback = (out / "feedback" / "jonesbob.md").read_text()
    assert "late: submitted 2026-12-03T05:59+00:00" in feedback and "20% of the points taken" in feedback
    assert f"## {ch3}: no grade yet" in feedback and "0 / " not in feedback.split(f"## {ch3}")[1]
    assert "late" not in (out / "feedback" / "smithalice.md").read_text().lower()
    maria = (out / "feedback" / "deleónmaría.md").read_text(encoding="utf-8")
    assert "homework1.ipynb" in maria and "waiting for the instructor's review" in maria
    assert "No notebook" not in maria and "000/" not in maria
    review = (out / "needs_review.md").read_text(encoding="utf-8")
    assert f"chapters graded: {STEM}, {ch3}" in review
    assert (f"**smithalice**, submission: needs review. {STEM}: graded {STEM}-1.ipynb (Canvas attachment 678908); "
            f"not graded: {STEM}.ipynb (Canvas attachment 678900)") in review
    assert f"partly handed in: {ch3}: graded for 1 of 4 submissions" in review
    assert "ignored jonesbob_23456_678905_text.html" in review
    assert "deleónmaría" in review and "homework1.ipynb was not matched" in review
    assert "anon_Xy3Zq is not on the roster" in review
    assert f"canvas: gradebook_canvas.csv: {ch3} goes to none of the course's assignments" in review
    assert f"Week 1: KV memory (90001) is worth 100 points in Canvas, {STEM} {full:g} here" in review
    said = done.stderr.index(f"{ch3} goes to none of the course's assignments")  # once, before grading
    assert said < done.stderr.index("chapters graded:") and done.stderr.count(f"{ch3} goes to none") == 1
    assert float(wide["jonesbob"]["total"]) == pytest.approx(full * 0.8)
    assert wide["deleónmaría"]["total"] == "" and float(wide["anon_Xy3Zq"]["total"]) == full


# -- Canvas's names as Canvas writes them (lib/content_zipper.rb) ------------------------------------
def test_canvas_names_keep_unicode_letters_and_anonymous_prefixes(tmp_path):
    """The name part is the sortable name lowered with non-word characters removed (Unicode
    letters stay); under anonymous grading it is ``anon_<id>``, ``LATE_anon_<id>`` when late.
    A file nothing reads is listed in needs_review.md by the batch (``ignored ...``)."""
    import unicodedata

    maria = "deleónmaría_12354_678903_01_kv_memory.ipynb"
    assert lms.parse_name(maria) == lms.LmsFile("canvas", "deleónmaría", "01_kv_memory.ipynb", "12354",
                                                attachment_id="678903")
    decomposed = lms.parse_name(unicodedata.normalize("NFD", maria))  # as macOS's unzip writes it
    assert decomposed is not None and decomposed.student == "deleónmaría"
    anon = lms.parse_name("anon_Xy3Zq_678904_01_kv_memory.ipynb")
    assert (anon.student, anon.user_id, anon.late) == ("anon_Xy3Zq", "", False)
    late_anon = lms.parse_name("LATE_anon_abc12_678905_01_kv_memory.ipynb")
    assert (late_anon.student, late_anon.late) == ("anon_abc12", True)
    old_late = lms.parse_name("smithalice_late_12345_678901_01_kv_memory.ipynb")
    assert (old_late.student, old_late.late) == ("smithalice", True)
    # Canvas never leaves digits between underscores in a name: the uploader's reading only.
    assert len(lms.readings("jonesbob_23456_678_smithalice_12345_999_01_kv_memory.ipynb")) == 1
    assert lms.readings("Smith_1_2_x.ipynb") == []  # Canvas lowers the name
    folder = _download(tmp_path / "canvas", {maria: SOLVED, "anon_Xy3Zq_678904_01_kv_memory.ipynb": SOLVED,
                                             "LATE_anon_abc12_678905_01_kv_memory.ipynb": UNSOLVED,
                                             "smithalice_12345_678906_text.html": SOLVED})
    found, taken = lms.gather(folder, tmp_path / "scratch")
    assert sorted(s.name for s in found) == ["anon_Xy3Zq", "anon_abc12", "deleónmaría"]
    assert list_students(folder, skip=taken) == ([], ["smithalice_12345_678906_text.html"])
    roster_file = tmp_path / "roster.csv"
    roster_file.write_text('Student,ID,SIS User ID,SIS Login ID,Section\n"de León, María",12354,S003,mdeleon,A\n',
                           encoding="utf-8")
    matched, _ = match_roster(["deleónmaría"], read_roster(roster_file))
    assert matched["deleónmaría"].id == "12354"  # by the name alone, accents and all


def test_an_override_may_name_the_student_by_any_roster_id_column(tmp_path):
    roster_file = tmp_path / "roster.csv"
    roster_file.write_text(CANVAS_ROSTER)
    roster = read_roster(roster_file)
    matched = {"smithalice": roster[0], "jonesbob": roster[1]}
    overrides = [gb.Override("S001", "1.2", 1, "sis user id", 2), gb.Override("12345", "1.1", 2, "canvas id", 3),
                 gb.Override("bjones", "1.1", 3, "sis login id", 4), gb.Override("Jones, Bob", "1.2", 1, "name", 5)]
    resolved = gb.resolve_override_students(overrides, list(matched), matched)
    assert [o.student for o in resolved] == ["smithalice", "smithalice", "jonesbob", "jonesbob"]


# -- no zero the grader did not give -----------------------------------------------------------------
def test_no_grade_is_an_empty_cell_and_feedback_says_why(tmp_path):
    """Alice handed in Chapters 1 and 11; Bob only Chapter 1; Carol's notebook was named
    homework1.ipynb, which no chapter claimed (for review). The Canvas files name no one
    without a grade (a file per chapter: the import leaves Canvas's grade alone), the wide
    export gives no zero to Bob's Chapter 11 or Carol's Chapter 1, the review says so, and the
    feedback says what is missing or waiting instead of showing 0 points."""
    ch11 = "11_sparse_attention"
    review_note = "no notebook is named as 01_kv_memory, and homework1.ipynb was not matched to a chapter: " \
                  "waiting for the instructor's review"
    rows = [Row("alice", STEM, "1.1", 4, 4, PASSED), Row("alice", ch11, "11.1", 50, 54, FAILED, "x"),
            Row("bob", STEM, "1.1", 1, 4, FAILED, "wrong"),
            Row("bob", ch11, "11.1", 0, 54, MISSING, f"no notebook for {ch11} in the submission"),
            Row("carol", STEM, "1.1", 0, 4, REVIEW, review_note),
            Row("carol", ch11, "11.1", 0, 54, REVIEW, review_note),
            Row("carol", "", "", 0, 0, REVIEW, f"homework1.ipynb {UNMATCHED}: it names no chapter")]
    roster = [Student("1", "A"), Student("2", "B"), Student("3", "C")]
    matched = dict(zip(["alice", "bob", "carol"], roster))
    paths, _ = write_canvas(tmp_path, rows, roster, matched)
    tables = {p.name: list(csv.reader(p.open(newline=""))) for p in paths}
    assert {name: (t[1][5:], {r[1]: r[5:] for r in t[2:]}) for name, t in tables.items()} == {
        f"gradebook_canvas_{STEM}.csv": (["4"], {"1": ["4"], "2": ["1"]}),
        f"gradebook_canvas_{ch11}.csv": (["54"], {"1": ["50"]})}
    with open(write_wide(tmp_path, rows, roster, matched), newline="") as f:
        wide = {r["student"]: r for r in csv.DictReader(f)}
    assert (wide["bob"]["total"], wide["bob"]["max_total"], wide["bob"]["11.1"]) == ("1", "4", "")
    assert (wide["carol"]["total"], wide["carol"]["1.1"]) == ("", "")
    partial = partial_chapters(rows)
    assert len(partial) == 2 and partial[1].startswith(f"{ch11}: graded for 1 of 3 submissions; no grade for bob, "
                                                       "carol")
    bob = gb.feedback_markdown("bob", [r for r in rows if r.student == "bob"])
    assert "0 / 54" not in bob and f"## {ch11}: no grade yet" in bob and "Total: 1 / 4 points" in bob
    carol = gb.feedback_markdown("carol", [r for r in rows if r.student == "carol"])
    assert "waiting for the instructor's review" in carol and "No notebook" not in carol and "0 / 4" not in carol


def test_a_notebook_no_chapter_claimed_leaves_the_chapter_for_review_under_its_own_name(tmp_path):
    """A Canvas download's homework1.ipynb: the chapter is waiting for review (not missing),
    and every message names the student's file, never our scratch copy (``000/...``)."""
    from grading.classroom import grade

    folder = _download(tmp_path / "canvas", {"smithalice_12345_678901_homework1.ipynb": SOLVED})
    (alice,), _ = lms.gather(folder, tmp_path / "scratch")
    sub = grade.open_submission("smithalice", alice.folder, CHAPTERS[:1], tmp_path / "scratch")
    assert [name for name, _ in sub.unmatched] == ["homework1.ipynb"]
    rows = grade.submission_rows("smithalice", sub, CHAPTERS[:1])
    assert rows[0].message.startswith("homework1.ipynb was not matched") and rows[0].status == REVIEW
    (task,) = grade.submission_tasks("smithalice", sub, CHAPTERS[:1])
    assert task.notebook is None and "homework1.ipynb was not matched" in task.note
    assert "instructor's review" in task.note and "000" not in task.note


def test_resume_writes_the_chapters_now_chosen(tmp_path):
    """A run graded Chapters 1 and 11; ``--chapters 1 --resume`` keeps Chapter 1's grades
    and writes no Chapter 11 column (nor its zeros)."""
    book = gb.Gradebook(tmp_path, False, chapters=[STEM, "11_sparse_attention"])
    book.add("bob", "", [Row("bob", "", "", 0, 0, NOTE, "stray.ipynb was not matched")])
    book.add("bob", STEM, [Row("bob", STEM, "1.1", 4, 4, PASSED)])
    book.add("bob", "11_sparse_attention", [Row("bob", "11_sparse_attention", "11.1", 0, 54, MISSING)])
    book.finish()
    again = gb.Gradebook(tmp_path, True, chapters=[STEM])
    assert [(r.chapter, r.exercise) for r in again.final_rows()] == [(STEM, "1.1")]
    assert again.done == {gb.task_id("bob", STEM)}  # the submission-wide rows are made again
    again.add("bob", "", [])
    same = gb.Gradebook(tmp_path, True, chapters=[STEM])  # the same chapters: nothing made again
    assert same.done == {gb.task_id("bob", STEM), gb.task_id("bob", "")}


# -- the course's own assignments: the import updates them, it makes none -----------------------------
# Canvas's export of a course with two assignments: each column is "Title (id)", then the scores
# Canvas computes (no assignments), and the Points Possible row ("(read only)" under those).
CANVAS_COURSE = """Student,ID,SIS User ID,SIS Login ID,Section,Week 1: KV memory (90001),\
Week 11: Sparse attention (90011),Quiz (90020),Quiz (90021),Assignments Current Score,Current Score,Unposted Final Grade
    Points Possible,,,,,18,54,5,5,(read only),(read only),(read only)
"Smith, Alice",12345,S001,asmith,Section A,,,,,,,
"Jones, Bob",23456,S002,bjones,Section A,,,,,,,
"""


def _course(tmp_path: Path) -> Path:
    path = tmp_path / "canvas_export.csv"
    path.write_text(CANVAS_COURSE, encoding="utf-8")
    return path


def test_the_export_s_assignments_are_its_title_and_id_columns(tmp_path):
    course = read_canvas_assignments(_course(tmp_path))
    assert [(a.title, a.id, a.points) for a in course] == [("Week 1: KV memory", "90001", "18"),
                                                           ("Week 11: Sparse attention", "90011", "54"),
                                                           ("Quiz", "90020", "5"), ("Quiz", "90021", "5")]
    (tmp_path / "roster.csv").write_text(CANVAS_ROSTER)
    assert read_canvas_assignments(tmp_path / "roster.csv") == []  # a Canvas export of no assignment


def test_a_mapped_chapter_s_column_is_the_course_s_assignment(tmp_path):
    """Chapter 1 mapped by id on the command line, Chapter 11 by its exact title in a mapping
    file: each column is named as Canvas's export names the assignment (so the import updates
    it, found by its id), with the export's Points Possible; values are the grader's points."""
    course = read_canvas_assignments(_course(tmp_path))
    (tmp_path / "map.csv").write_text("chapter,assignment\n11_sparse_attention,Week 11: Sparse attention\n")
    mapping = read_canvas_map(["1=90001", str(tmp_path / "map.csv")])
    ch11 = "11_sparse_attention"
    columns = canvas_columns(mapping, course, [STEM, ch11], [STEM, ch11])
    assert {s: a.id for s, a in columns.items()} == {STEM: "90001", ch11: "90011"}
    roster = read_roster(_course(tmp_path))
    rows = [Row("smithalice", STEM, "1.1", 10, 10, PASSED), Row("smithalice", STEM, "1.2", 5, 8, FAILED),
            Row("smithalice", ch11, "11.1", 54, 54, PASSED),
            Row("jonesbob", STEM, "1.1", 4, 10, FAILED), Row("jonesbob", STEM, "1.2", 8, 8, PASSED),
            Row("jonesbob", ch11, "11.1", 0, 54, MISSING)]
    paths, problems = write_canvas(tmp_path, rows, roster, {"smithalice": roster[0], "jonesbob": roster[1]},
                                   columns)
    tables = [list(csv.reader(p.open(newline="", encoding="utf-8"))) for p in paths]
    assert [t[0] for t in tables] == [[*CANVAS_FIELDS, "Week 1: KV memory (90001)"],
                                      [*CANVAS_FIELDS, "Week 11: Sparse attention (90011)"]]
    assert [t[1] for t in tables] == [["    Points Possible", "", "", "", "", "18"],
                                      ["    Points Possible", "", "", "", "", "54"]]
    assert [{r[1]: r[5:] for r in t[2:]} for t in tables] == [{"12345": ["15"], "23456": ["12"]}, {"12345": ["54"]}]
    assert len(problems) == 1 and "is split into" in problems[0]  # Bob has no Chapter 11: no row in its file
    # An assignment worth other points than the chapter: written as the grader gives them, and said.
    rows[1] = Row("smithalice", STEM, "1.2", 5, 10, FAILED)
    _, problems = write_canvas(tmp_path, rows, roster, {"smithalice": roster[0]}, columns)
    assert any("Week 1: KV memory (90001) is worth 18 points in Canvas, 01_kv_memory 20 here" in p for p in problems)


def test_an_unmapped_chapter_makes_a_new_column_and_is_named(tmp_path):
    """No mapping for Chapter 1: its column stays 01_kv_memory (Canvas makes a new
    assignment), and the review list says so, with the option that maps it. A chapter
    titled exactly as an assignment (what an earlier import made) is found by that title."""
    course = read_canvas_assignments(_course(tmp_path))
    assert canvas_columns([], course, [STEM], [STEM]) == {}
    (line,) = unmapped_chapters([STEM], {}, course)
    assert "01_kv_memory goes to none of the course's assignments" in line and "--canvas-assignments 1=ID" in line
    assert "Week 1: KV memory (90001)" in line
    assert unmapped_chapters([STEM], {}, []) == []  # a roster that is no Canvas export: nothing to say
    made = [*course, CanvasAssignment(f"{STEM} (90099)", STEM, "90099", "20")]
    assert canvas_columns([], made, [STEM], [STEM])[STEM].id == "90099"


def test_a_mapping_that_is_ambiguous_or_names_nothing_is_an_error_naming_it(tmp_path):
    course = read_canvas_assignments(_course(tmp_path))
    stems = [STEM, "11_sparse_attention"]
    cases = {"1=Quiz": "--canvas-assignments 1=Quiz: 'Quiz' is ambiguous, it names several assignments "
                       r"\(Quiz \(90020\), Quiz \(90021\)\); give the id, e.g. 1=90020",
             "1=Week 2": "--canvas-assignments 1=Week 2: no assignment 'Week 2' in the roster's header",
             "12=90001": "--canvas-assignments 12=90001: no chapter '12'"}
    for spec, message in cases.items():
        with pytest.raises(ValueError, match=message):
            canvas_columns(read_canvas_map([spec]), course, stems, stems)
    with pytest.raises(ValueError, match="Week 1: KV memory \\(90001\\) is mapped to two chapters"):
        canvas_columns(read_canvas_map(["1=90001", "11=90001"]), course, stems, stems)
    with pytest.raises(ValueError, match="needs --roster to be Canvas's gradebook export"):
        canvas_columns(read_canvas_map(["1=90001"]), [], stems, stems)
    with pytest.raises(ValueError, match="neither CHAPTER=ASSIGNMENT"):
        read_canvas_map(["no-such-file.csv"])
    twice = [*course, CanvasAssignment(f"{STEM} (90098)", STEM, "90098"),
             CanvasAssignment(f"{STEM} (90099)", STEM, "90099")]
    with pytest.raises(ValueError, match="several of the course's assignments are titled 01_kv_memory"):
        canvas_columns([], twice, stems, [STEM])
