"""The instructors' manual's examples run as written.

Every command of the "Grading a class" section of ``docs/instructors.md`` (its ``bash``
blocks) and every file it shows (its ``csv NAME`` blocks) is taken from that page, not copied
here: the files are written as shown, the commands run as shown, from a working folder
that looks like a clone (the ``Makefile`` and what it depends on are links to this
checkout's, and so is every entry of ``.venv``), so ``make grade`` writes into that folder,
never into this checkout's ``_build/``. The folders the commands name (``path/to/submissions``,
``path/to/private_tests``, ``path/to/canvas_download``) hold small classes; the one file
the page describes without showing, ``canvas_export.csv``, is Canvas's gradebook
export of that class. The folder's ``.venv`` holds a stamp of its own, newer than what
the stamp depends on, so ``make`` never reinstalls the shared environment: an install
there would register that folder, which has no packages, in place of this checkout
(GNU make reads no ``-o`` from MAKEFLAGS, so the stamp is the one way to say it).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grading.layout import EXERCISES, ROOT, SOLUTIONS
from grading.notebook.catalogue import load_catalogue

STEM = "01_kv_memory"
MANUAL = ROOT / "docs" / "instructors.md"
SECTION = ("## Grading a class", "## Importing the grades")
LINKED = ("Makefile", "requirements.txt", "requirements-nodeps.txt", "pyproject.toml")
HIDDEN_TEST = '''
import pytest

@pytest.mark.ex1_1
def test_private_case(nb):
    assert nb.kv_bytes_per_token(1, 1, 1, "fp16") == 4
'''
CANVAS_EXPORT = """Student,ID,SIS User ID,SIS Login ID,Section
    Points Possible,,,,
"Smith, Alice",12345,S001,asmith,Section A
"Jones, Bob",23456,S002,bjones,Section A
"""
pytestmark = pytest.mark.timeout(1500)


def section() -> str:
    text = MANUAL.read_text(encoding="utf-8")
    start, end = text.index(SECTION[0]), text.index(SECTION[1])
    return text[start:end]


def commands(text: str) -> list[str]:
    """The commands of the section's ``bash`` blocks: continuation lines joined, comments cut."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line:
                out.append(line)
    return out


def files(text: str) -> dict[str, str]:
    """``{name: text}`` of the section's ```` ```csv NAME ```` blocks."""
    return {name: body for name, body in re.findall(r"```csv ([\w.]+)\n(.*?)```", text, re.DOTALL)}


def _mistaken():
    bug = next(b for b in load_catalogue(STEM) if b.name == "gb_for_gib")  # Exercise 1.3
    return bug.apply(nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4), f"{STEM}.ipynb")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    work = tmp_path_factory.mktemp("readme")
    for name in LINKED:
        (work / name).symlink_to(ROOT / name)
    stamp = f".installed-{sys.version_info.major}.{sys.version_info.minor}"
    (work / ".venv").mkdir()
    for entry in (ROOT / ".venv").iterdir():
        if not entry.name.startswith(".installed-"):
            (work / ".venv" / entry.name).symlink_to(entry)
    (work / ".venv" / stamp).touch()  # newer than the files it depends on: make installs nothing
    text = section()
    shown = files(text)
    assert {"roster.csv", "overrides.csv", "submitted.csv"} <= set(shown), sorted(shown)
    for name, body in shown.items():
        (work / name).write_text(body)
    (work / "canvas_export.csv").write_text(CANVAS_EXPORT)
    subs = work / "path" / "to" / "submissions"
    for student, notebook in (("alice", SOLUTIONS), ("bob", EXERCISES)):
        (subs / student).mkdir(parents=True)
        shutil.copyfile(notebook / f"{STEM}.ipynb", subs / student / f"{STEM}.ipynb")
    (work / "path" / "to" / "private_tests").mkdir()
    (work / "path" / "to" / "private_tests" / f"test_{STEM[:2]}_private.py").write_text(HIDDEN_TEST)
    canvas = work / "path" / "to" / "canvas_download"
    canvas.mkdir()
    nbformat.write(_mistaken(), canvas / f"smithalice_12345_678901_{STEM}.ipynb")
    shutil.copyfile(SOLUTIONS / f"{STEM}.ipynb", canvas / f"jonesbob_LATE_23456_678902_{STEM}.ipynb")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MAKEFLAGS", "MAKELEVEL")}
    runs = []
    for command in commands(text):
        done = subprocess.run(["bash", "-c", command], check=False, cwd=work, env=env, capture_output=True, text=True,
                              timeout=900)
        runs.append((command, done))
    return {"work": work, "runs": runs}


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_section_shows_its_commands_and_files():
    text = section()
    assert len(commands(text)) >= 5
    assert "bob,1.2,1,regrade request: a typo, the method is right" in files(text)["overrides.csv"]


def test_every_command_runs_as_written(ran):
    for command, done in ran["runs"]:
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    helped = next(done.stdout for command, done in ran["runs"] if command.endswith("--help"))
    for option in ("--due", "--late-penalty", "--submitted", "--roster", "--overrides", "--chapters"):
        assert option in helped


def test_make_grade_writes_the_default_folder_and_grades_only_the_chapters_handed_in(ran):
    rows = _rows(ran["work"] / "_build" / "grades" / "gradebook.csv")
    assert {r["chapter"] for r in rows if r["exercise"]} == {STEM}
    assert "chapters graded: 01_kv_memory" in (ran["work"] / "_build" / "grades" / "needs_review.md").read_text()


def test_the_overrides_example_applies_by_name_and_by_roster_id(ran):
    out = ran["work"] / "grades" / "week5"
    rows = {(r["student"], r["exercise"]): r for r in _rows(out / "gradebook.csv")}
    bob, alice = rows[("bob", "1.2")], rows[("alice", "1.3")]
    assert bob["status"] == "overridden" and float(bob["points"]) == 1
    assert bob["message"].startswith("regrade request: a typo, the method is right")
    assert alice["status"] == "overridden" and float(alice["points"]) == 2  # named s001 in overrides.csv
    review = (out / "needs_review.md").read_text()
    assert "overrides:" not in review, review
    wide = {r["student"]: r for r in _rows(out / "gradebook_wide.csv")}
    assert wide["alice"]["id"] == "s001" and wide["bob"]["id"] == "s002"


def test_the_hidden_tests_example_grades_them(ran):
    rows = _rows(ran["work"] / "grades" / "gradebook.csv")
    assert {(r["student"], r["points"]) for r in rows if r["exercise"] == "1.1 hidden"} == {("alice", "1"),
                                                                                          ("bob", "0")}


def test_the_canvas_example_reads_the_download_and_applies_the_late_policy(ran):
    out = ran["work"] / "grades" / "canvas"
    with open(out / "gradebook_canvas.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", STEM]
    full = float(table[1][5])
    got = {row[1]: float(row[5]) for row in table[2:]}
    # Bob: solved, 30 hours late (submitted.csv, by his Canvas id): two started days, 20% off.
    assert got["23456"] == pytest.approx(full * 0.8)
    # Alice: on time, with the GB-for-GiB mistake in 1.3.
    assert 0 < got["12345"] < full
    assert "20% of the points taken" in (out / "feedback" / "jonesbob.md").read_text()
