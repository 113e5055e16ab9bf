"""The class run survives ten kinds of fault, each as a fixture submission.

The submissions are made here, at run time, from ``solutions/01_kv_memory.ipynb``
with one fault injected each; one batch run grades them all (Chapter 1 only, two
workers, a short timeout), and the tests read its gradebook and feedback.
"""

from __future__ import annotations

import copy
import csv
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grading.classroom.grade import structure_review
from grading.classroom.matching import Chapter, match_folder, match_name, normalize
from grading.classroom.rows import Row, graded_rows, one_line
from grading.outcome import TestOutcome
from grading.wire.records import PlannedTest

ROOT = Path(__file__).resolve().parents[2]
STEM = "01_kv_memory"
SOLUTION = ROOT / "solutions" / f"{STEM}.ipynb"
STUB = ROOT / "exercises" / f"{STEM}.ipynb"
TIMEOUT_S = 300  # per chapter, for every fixture but the infinite loop: never reached by a normal run
LOOP_TIMEOUT_S = 10  # the infinite loop is graded in a batch of its own with this timeout
SECRET = "SECRET-ASSERTION-DETAIL-42"
# The module fixture runs about a dozen grading processes; whichever test asks first pays.
pytestmark = pytest.mark.timeout(900)


# -- building the fixture submissions ----------------------------------------------------
def _solution():
    return nbformat.read(SOLUTION, as_version=4)


def _index(nb, exercise: str) -> int:
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and re.search(rf"^# Exercise {re.escape(exercise)}:", cell.source, re.M):
            return i
    raise LookupError(exercise)


def _with_cell(source: str, after: str | None = None):
    """The solution with one code cell inserted (after the cell of exercise ``after``,
    or after the first code cell)."""
    nb = _solution()
    at = _index(nb, after) + 1 if after else 2
    nb.cells.insert(at, nbformat.v4.new_code_cell(source))
    return nb


def _write(folder: Path, name: str, nb) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(nbformat.writes(nb))
    return path


def _mixed_notebook(marker: Path):
    """Faults 4-8 in one notebook: magics, a stub, deleted/duplicated/moved cells,
    a wrong signature, a float where an int is due, an output flood, files in the cwd."""
    nb = _solution()
    stub = nbformat.read(STUB, as_version=4)
    i1 = _index(nb, "1.1")
    nb.cells[i1].source = nb.cells[i1].source.replace(
        'def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype="fp16"):',
        "def kv_bytes_per_token(num_layers, num_kv_heads, head_dim):").replace("DTYPE_BITS[dtype]", "16")
    nb.cells[i1].source = nb.cells[i1].source.replace("    _check_dtype(dtype)\n", "")
    i2 = _index(nb, "1.2")
    nb.cells[i2].source = re.sub(r"return (kv_bytes_per_token\(.*\)) \* seq_len \* batch_size",
                                 r"return float(num_layers * num_kv_heads * head_dim * 4 * seq_len * batch_size)",
                                 nb.cells[i2].source)
    nb.cells[_index(nb, "1.3")] = copy.deepcopy(stub.cells[_index(stub, "1.3")])
    del nb.cells[_index(nb, "1.4")]
    i5 = _index(nb, "1.5")
    nb.cells.insert(i5, copy.deepcopy(nb.cells[i5]))
    six = nb.cells.pop(_index(nb, "1.6"))
    nb.cells.insert(_index(nb, "1.3"), six)  # before 1.3: out of order
    nb.cells.insert(2, nbformat.v4.new_code_cell("!pip install definitely-not-a-real-package\n%timeit sum(range(10))"))
    nb.cells.insert(3, nbformat.v4.new_code_cell(f"%%bash\ntouch {marker}\n"))
    nb.cells.append(nbformat.v4.new_code_cell(
        "import os\n"
        "for i in range(100_000):\n    print('flood', i)\n"
        "os.write(1, b'x' * 3_000_000)\n"
        "with open('junk.bin', 'wb') as f:\n    f.write(b'0' * 1_000_000)\n"))
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nsys.exit('bye')"))
    return nb


def _tamper_notebook(out: Path):
    nb = _solution()
    tricks = [
        "import torch\ntorch.matmul = lambda a, b: a  # patch what references use",
        "import grading, pathlib\n_src = (pathlib.Path(grading.__file__).parents[1] / 'tests' / 'references' / "
        "'ref_01_kv_memory.py').read_text()",
        f"with open({str(out / 'gradebook.csv')!r}, 'a') as f:\n    f.write('tamper,{STEM},1.1,999,2,passed,\\n')",
    ]
    for n, trick in enumerate(tricks):
        nb.cells.insert(2 + n, nbformat.v4.new_code_cell(trick))
    # Peeking at the grader's frame (where `ref` lives) while a test calls the function.
    nb.cells.append(nbformat.v4.new_code_cell(
        "import sys\n_honest = kv_bytes_per_token\n\n\n"
        "def kv_bytes_per_token(*args, **kwargs):\n    sys._getframe(1).f_globals.get('ref')\n"
        "    return _honest(*args, **kwargs)\n"))
    return nb


def make_submissions(base: Path, out: Path) -> dict[str, object]:
    subs = base / "submissions"
    marker = base / "bash-ran"
    _write(subs / "good", f"{STEM}.ipynb", _solution())
    (subs / "good" / "README.txt").write_text("extra files are ignored")
    # A zip with a renamed copy in a folder, and macOS litter.
    with zipfile.ZipFile(subs / "good_zip.zip", "w") as zf:
        zf.writestr(f"alice_hw/Copy of {STEM} (1).ipynb", nbformat.writes(_solution()))
        zf.writestr("__MACOSX/alice_hw/._Copy of 01_kv_memory (1).ipynb", "binary junk")
        zf.writestr("alice_hw/notes.txt", "ignored")
    _write(base / "loop_submissions" / "loop", f"{STEM}.ipynb", _with_cell("while True:\n    pass"))
    _write(subs / "memory", f"{STEM}.ipynb", _with_cell("hog = bytearray(8 * 2**30)"))
    _write(subs / "segfault", f"{STEM}.ipynb", _with_cell("import ctypes\nctypes.string_at(0)", after="1.2"))
    _write(subs / "os_exit", f"{STEM}.ipynb", _with_cell("import os\nos._exit(3)", after="1.1"))
    _write(subs / "killed", f"{STEM}.ipynb", _with_cell("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"))
    _write(subs / "mixed", f"{STEM}.ipynb", _mixed_notebook(marker))
    _write(subs / "tamper", f"{STEM}.ipynb", _tamper_notebook(out))
    (subs / "not_json").mkdir()
    (subs / "not_json" / f"{STEM}.ipynb").write_text('{"cells": [ this is not json')
    (subs / "empty").mkdir()
    (subs / "empty" / f"{STEM}.ipynb").write_text("")
    (subs / "missing").mkdir()
    (subs / "missing" / "README.txt").write_text("I did not do it")
    _write(subs / "missing", "homework.ipynb", nbformat.v4.new_notebook())
    hidden = base / "hidden"
    hidden.mkdir()
    (hidden / f"test_{STEM}_hidden.py").write_text(
        "import pytest\n\n\n@pytest.mark.ex1_1\n@pytest.mark.points(2)\n"
        "def test_hidden_odd_shape(nb):\n"
        f"    assert nb.kv_bytes_per_token(3, 3, 3, 'int4') == 27, {SECRET!r}\n")
    return {"submissions": subs, "loop_submissions": base / "loop_submissions", "marker": marker, "hidden": hidden}


def batch_command(subs: Path, out: Path, *extra: str, timeout: float = TIMEOUT_S, workers: int = 2) -> list[str]:
    return [sys.executable, "-m", "grading.batch", str(subs), "--out", str(out), "--workers", str(workers),
            "--timeout", str(timeout), "--memory-mb", "3072", "--chapters", STEM, *extra]


def run_batch(subs: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(batch_command(subs, out, *extra), cwd=ROOT, capture_output=True, text=True, timeout=900)


def read_rows(out: Path) -> list[dict]:
    with open(out / "gradebook.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("batch")
    out = base / "out"
    made = make_submissions(base, out)
    # The infinite loop gets a batch of its own with a short timeout, side by side with the rest.
    loop_cmd = batch_command(made["loop_submissions"], base / "loop_out", timeout=LOOP_TIMEOUT_S, workers=1)
    loop = subprocess.Popen(loop_cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = run_batch(made["submissions"], out, "--extra-tests", str(made["hidden"]))
    loop_stderr = loop.communicate(timeout=900)[1]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert loop.returncode == 0, loop_stderr[-3000:]
    rows = read_rows(out) + read_rows(base / "loop_out")
    return {**made, "out": out, "proc": proc, "rows": rows}


def rows_of(graded, student, exercise_only=True):
    return [r for r in graded["rows"] if r["student"] == student and (r["exercise"] or not exercise_only)]


def statuses(graded, student):
    return {r["exercise"]: r["status"] for r in rows_of(graded, student)}


def total(graded, student):
    return sum(float(r["points"]) for r in rows_of(graded, student))


# -- the batch run -------------------------------------------------------------------------
def test_correct_submissions_get_full_marks_folder_or_renamed_zip(graded):
    for student in ("good", "good_zip"):
        rows = rows_of(graded, student)
        assert rows and all(r["status"] == "passed" for r in rows), rows
        assert all(r["points"] == r["max_points"] for r in rows)
    public = [r for r in rows_of(graded, "good") if not r["exercise"].endswith("hidden")]
    assert [r["exercise"] for r in public] == ["1.1", "1.2", "1.3", "1.4", "1.5", "1.6"]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "student"} for r in rows]  # noqa: E731
    assert strip(rows_of(graded, "good", False)) == strip(rows_of(graded, "good_zip", False))


def test_fault1_infinite_loop_times_out(graded):
    assert set(statuses(graded, "loop").values()) == {"timed out"}
    assert total(graded, "loop") == 0


def test_fault2_memory_limit(graded):
    rows = rows_of(graded, "memory", exercise_only=False)
    assert any(r["status"] == "memory limit" and not r["exercise"] for r in rows), rows


@pytest.mark.parametrize("student,expected", [("segfault", "SIGSEGV"), ("os_exit", "code 3"), ("killed", "SIGKILL")])
def test_fault3_crashes_report_the_signal(graded, student, expected):
    rows = rows_of(graded, student)
    assert {r["status"] for r in rows} == {"crashed"}
    assert expected in rows[0]["message"]


def test_fault4_magics_are_skipped_with_a_note_not_run(graded):
    notes = [r["message"] for r in rows_of(graded, "mixed", exercise_only=False) if r["status"] == "note"]
    assert any("pip install" in n for n in notes) and any("%%bash" in n for n in notes), notes
    assert not graded["marker"].exists()


def test_fault5_stub_is_not_attempted(graded):
    row = next(r for r in rows_of(graded, "mixed") if r["exercise"] == "1.3")
    assert (row["status"], row["points"]) == ("not attempted", "0")
    assert "not implemented yet" in row["message"]


def test_fault6_broken_notebooks(graded):
    for student in ("not_json", "empty"):
        assert set(statuses(graded, student).values()) == {"needs review"}, student
    assert "empty" in rows_of(graded, "empty")[0]["message"]
    assert "not valid notebook JSON" in rows_of(graded, "not_json")[0]["message"]
    s = statuses(graded, "mixed")
    assert s["1.4"] == "needs review" and s["1.5"] == "passed"  # deleted cell; duplicated cell still graded
    msg = next(r["message"] for r in rows_of(graded, "mixed") if r["exercise"] == "1.4")
    assert "missing" in msg


def test_fault7_wrong_signature_and_type_one_line(graded):
    rows = {r["exercise"]: r for r in rows_of(graded, "mixed")}
    assert rows["1.1"]["status"] in ("error", "failed") and "\n" not in rows["1.1"]["message"]
    assert "positional argument" in rows["1.1"]["message"]
    assert rows["1.2"]["status"] == "failed" and "expected" in rows["1.2"]["message"]


def test_fault8_output_flood_capped_and_files_confined(graded):
    notes = [r["message"] for r in rows_of(graded, "mixed", exercise_only=False) if r["status"] == "note"]
    assert any("discarded" in n for n in notes), notes
    assert not (ROOT / "junk.bin").exists() and not (graded["submissions"] / "mixed" / "junk.bin").exists()
    assert len(graded["proc"].stderr) < 100_000


def test_fault9_tampering_reaches_nothing(graded):
    """The judge runs none of the notebook's code: patching torch, reading the references
    (not in the sandbox), writing to the gradebook and walking the stack reach only the
    contestant. The code is graded as what it computes; the attempts that failed are
    listed as the notes of the cells that raised."""
    notes = [r["message"] for r in rows_of(graded, "tamper", exercise_only=False) if r["status"] == "note"]
    assert any("ref_01_kv_memory.py" in n for n in notes), notes
    assert any("gradebook.csv" in n for n in notes), notes
    assert "999" not in (graded["out"] / "gradebook.csv").read_text()


def test_fault10_missing_chapter_and_unmatched_notebook(graded):
    # homework.ipynb may be the chapter: it waits for review (no grade), it is not missing.
    assert set(statuses(graded, "missing").values()) == {"needs review"}
    unmatched = [r for r in rows_of(graded, "missing", False) if "homework.ipynb" in r["message"]]
    assert unmatched and {r["status"] for r in unmatched} == {"needs review"}
    feedback = (graded["out"] / "feedback" / "missing.md").read_text()
    assert f"## {STEM}: no grade yet" in feedback and "instructor's review" in feedback
    assert "No notebook" not in feedback


def test_hidden_tests_in_gradebook_not_in_feedback(graded):
    row = next(r for r in rows_of(graded, "mixed") if r["exercise"] == "1.1 hidden")
    assert row["status"] in ("failed", "error") and "test_hidden_odd_shape" in row["message"]
    assert SECRET not in row["message"]
    feedback = (graded["out"] / "feedback" / "mixed.md").read_text()
    assert "test_hidden_odd_shape" not in feedback and SECRET not in feedback
    assert "further tests (not published)" in feedback
    good = (graded["out"] / "feedback" / "good.md").read_text()
    # Full marks, whatever Chapter 1 is worth (the public tests only).
    assert re.search(r"\*\*Total: (\d+) / \1 points\.\*\*", good), good[:300]


def test_feedback_and_review_list(graded):
    names = {p.stem for p in (graded["out"] / "feedback").glob("*.md")}
    assert {"good", "good_zip", "mixed", "missing", "tamper"} <= names
    review = (graded["out"] / "needs_review.md").read_text()
    for student in ("segfault", "not_json"):
        assert f"**{student}**" in review
    assert "**good**" not in review


def test_resume_regrades_only_what_is_not_done_and_deterministically(graded):
    out = graded["out"]
    before = read_rows(out)
    done = (out / ".done").read_text().splitlines()
    (out / ".done").write_text("".join(f"{t}\n" for t in done if t != f"good\t{STEM}"))
    proc = run_batch(graded["submissions"], out, "--resume", "--extra-tests", str(graded["hidden"]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1/1" in proc.stderr  # one chapter regraded, nothing else
    assert read_rows(out) == before


# -- pieces, without subprocesses ---------------------------------------------------------------
CHAPTERS = [Chapter("01_kv_memory", 1), Chapter("02_paged_attention", 2), Chapter("03_flash_attention", 3)]


@pytest.mark.parametrize("name,stem", [
    ("01_kv_memory.ipynb", "01_kv_memory"),
    ("01_kv_memory (1).ipynb", "01_kv_memory"),
    ("Copy of 01_kv_memory.ipynb", "01_kv_memory"),
    ("Copy of Copy of 01_KV-Memory (2).ipynb", "01_kv_memory"),
    ("01_memory (1).ipynb", "01_kv_memory"),
    ("chapter2_paged.ipynb", "02_paged_attention"),
    ("flash_attention.ipynb", "03_flash_attention"),
    ("01_kv_memory - Copy.ipynb", "01_kv_memory"),
])
def test_renamed_notebooks_match(name, stem):
    assert match_name(name, CHAPTERS).chapter.stem == stem


@pytest.mark.parametrize("name", ["homework.ipynb", "01_flash.ipynb", "attention.ipynb", "07_extra.ipynb"])
def test_unclear_names_are_reported_not_guessed(name):
    m = match_name(name, CHAPTERS)
    assert m.chapter is None and m.reason


def test_two_different_copies_are_ambiguous_identical_ones_are_not(tmp_path):
    (tmp_path / "01_kv_memory (1).ipynb").write_text("a")
    (tmp_path / "Copy of 01_kv_memory.ipynb").write_text("b")
    sub = match_folder("x", tmp_path, CHAPTERS)
    assert "01_kv_memory" in sub.ambiguous and "01_kv_memory" not in sub.notebooks
    (tmp_path / "01_kv_memory.ipynb").write_text("c")  # an exactly named one wins
    assert match_folder("x", tmp_path, CHAPTERS).notebooks["01_kv_memory"].name == "01_kv_memory.ipynb"


def test_normalize():
    assert normalize("Copy of 01_kv_memory (1).ipynb") == "01_kv_memory"


def test_structure_review_names_deleted_duplicated_moved():
    review, notes = structure_review(["1.1", "1.3", "1.3", "1.2"], ["1.1", "1.2", "1.3", "1.4"])
    assert "missing" in review["1.4"] and "2 times" in review["1.3"] and notes


def test_core_tests_are_all_or_nothing_the_others_share_by_case():
    """The partial-credit policy of docs/instructors.md, on a plan of one exercise: a 2-point core test
    with 3 cases and a 1-point bad-input test with 2 cases."""
    tests = [PlannedTest(f"t::{fn}[{i}]", "t.py", fn, "1.3", points, core, False, False)
             for fn, points, core, n in [("test_convert", 2, True, 3), ("test_rejects", 1, False, 2)]
             for i in range(n)]

    def points(failing):
        outcomes = {t.nodeid: TestOutcome(t.nodeid, "failed" if t.nodeid in failing else "passed",
                                          status="failed" if t.nodeid in failing else "", message="wrong",
                                          exc_type="GradingFailure") for t in tests}
        return graded_rows("s", "01_kv_memory", tests, outcomes)[0].points

    assert points(set()) == 3
    assert points({"t::test_convert[0]"}) == 1  # one core case wrong: the core's 2 points are lost
    assert points({"t::test_rejects[1]"}) == 2.5  # an edge case wrong: its share only


def test_one_line_messages():
    msg = "Exercise 1.2: f(1) is wrong\n  expected: 4\n  got:      4.0\ntests/test_x.py:12: in test\n    boom"
    assert one_line(msg) == "Exercise 1.2: f(1) is wrong; expected: 4; got:      4.0"


def test_help():
    proc = subprocess.run([sys.executable, "-m", "grading.batch", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "--extra-tests" in proc.stdout and "--resume" in proc.stdout


def test_gradebook_points_are_written_plainly():
    # Whole points without ".0", fractions as written, float noise rounded away.
    assert Row("s", STEM, "1.1", 1.5, 2, "failed", "x").as_csv()["points"] == "1.5"
    assert Row("s", STEM, "1.1", 2.0, 2, "passed", "").as_csv()["points"] == "2"
    assert Row("s", STEM, "1.1", 0.1 + 0.2, 2, "failed", "x").as_csv()["points"] == "0.3"


def test_model_lab_solution_graded_as_a_submission_gets_full_marks(tmp_path):
    """Chapter 8's graders load a real model through transformers, which patches torch on
    import; the batch grader must not mistake that for the notebook tampering."""
    stem = "08_model_lab"
    student = tmp_path / "subs" / "solution"
    student.mkdir(parents=True)
    (student / f"{stem}.ipynb").write_bytes((ROOT / "solutions" / f"{stem}.ipynb").read_bytes())
    command = [sys.executable, "-m", "grading.batch", str(tmp_path / "subs"), "--out", str(tmp_path / "out"),
               "--workers", "1", "--chapters", stem, "--quiet"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [r for r in read_rows(tmp_path / "out") if r["exercise"]]
    assert rows and all(r["status"] in ("passed", "skipped") for r in rows), \
        [(r["exercise"], r["status"], r["message"]) for r in rows]
