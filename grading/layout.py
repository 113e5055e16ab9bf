"""Where everything lives: the one module that knows the book's layout.

Every chapter has one stem, ``NN_topic`` (two digits, then words), and the same stem
names its files in every folder::

    chapters/NN_topic.md            solutions/NN_topic.ipynb     exercises/NN_topic.ipynb
    tests/test_NN_topic.py          tests/references/ref_NN_topic.py
    tests/catalogue/NN_topic.py     benchmarks/bench_NN_topic.py

An exercise is ``N.M`` (chapter number, then its number in the chapter). A solution cell
names it on a comment line ``# Exercise N.M: what to do``; a grader marks its tests
``@pytest.mark.exN_M``. Chapters are discovered, never listed: a chapter exists when its
grader and its solution notebook both do, so adding Chapter 11 needs no change here.
Other modules import these names instead of writing their own paths or patterns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
CHAPTERS = ROOT / "chapters"
TESTS = ROOT / "tests"
REFERENCES = TESTS / "references"
CATALOGUE = TESTS / "catalogue"
DIAGNOSIS = TESTS / "diagnosis"  # what each catalogue bug outputs where it fails (grading.diagnosis)
BUILD = ROOT / "_build"
# Committed runs of `python -m benchmarks --results`: docs/benchmarks.md's table and the numbers
# the chapters quote from `make bench`, each run with the machine it was measured on.
BENCH_RESULTS = ROOT / "benchmarks" / "results"
GRADES = BUILD / "grades"
GRADESCOPE = BUILD / "gradescope"  # make gradescope: autograder.zip and the tree it is made from
RELEASE = BUILD / "release"  # make release: the student edition
PYTEST_INI = ROOT / "pytest.ini"

TEST_FILE = re.compile(r"^test_(?P<stem>(?P<number>\d\d)_\w+)\.py$")
# "# Exercise 2.3: append tokens ..." at the start of a line of a cell.
EXERCISE_LINE = re.compile(r"^\s*#\s*Exercise\s+(\d+\.\d+)\s*:\s*(.+?)\s*$")
EXERCISE_ID = re.compile(r"\bExercise (\d+\.\d+)\b")
EXERCISE_MARK = re.compile(r"^ex(\d+)_(\d+)$")
# Markers are registered for every chapter number a stem can have and for up to this
# many exercises per chapter (pytest --strict-markers refuses unregistered ones).
MAX_EXERCISES_PER_CHAPTER = 30


@dataclass(frozen=True)
class Chapter:
    stem: str  # "01_kv_memory"
    number: int  # 1

    @property
    def words(self) -> set[str]:
        return set(self.stem.split("_")[1:])

    @property
    def test_file(self) -> Path:
        return TESTS / f"test_{self.stem}.py"

    @property
    def solution(self) -> Path:
        return SOLUTIONS / f"{self.stem}.ipynb"

    @property
    def exercise(self) -> Path:
        return EXERCISES / f"{self.stem}.ipynb"

    @property
    def reference(self) -> Path:
        return REFERENCES / f"ref_{self.stem}.py"

    @property
    def diagnosis(self) -> Path:
        return DIAGNOSIS / f"{self.stem}.json"

    @property
    def catalogue(self) -> Path:
        return CATALOGUE / f"{self.stem}.py"


def chapter_of_test_file(path) -> Chapter | None:
    """The chapter a ``test_NN_topic.py`` grades, or None for any other file."""
    m = TEST_FILE.match(Path(str(path)).name)
    return Chapter(m.group("stem"), int(m.group("number"))) if m else None


def discover_chapters(only: list[str] | None = None, root: Path | None = None) -> list[Chapter]:
    """Chapters with both graders and a solution notebook (in a tree without a
    ``solutions/`` folder: graders and an exercise notebook), in order. ``only`` keeps
    the chapters whose stem or number is listed (``["01_kv_memory"]``, ``["1", "3"]``)."""
    root = root or ROOT
    chapters = []
    for path in sorted((root / "tests").glob("test_[0-9][0-9]_*.py")):
        chapter = chapter_of_test_file(path)
        if chapter is None:
            continue
        if (root / "solutions" / f"{chapter.stem}.ipynb").exists():
            chapters.append(chapter)  # graders without a solution: a chapter still being written
        elif not (root / "solutions").is_dir() and (root / "exercises" / f"{chapter.stem}.ipynb").exists():
            # A tree shipped without solutions (the Gradescope autograder, the student
            # release): its chapters are the graders that have an exercise notebook.
            chapters.append(chapter)
    if only:
        wanted = {w.strip() for w in only if w.strip()}
        chapters = [c for c in chapters if c.stem in wanted or str(c.number) in wanted or f"{c.number:02d}" in wanted]
    return chapters


def marker(exercise: str) -> str:
    """``"2.3"`` -> ``"ex2_3"``, the pytest marker of an exercise."""
    chapter, number = exercise.split(".")
    return f"ex{int(chapter)}_{int(number)}"


def exercise_of_marker(name: str) -> str | None:
    """``"ex2_3"`` -> ``"2.3"``; None for any other marker."""
    m = EXERCISE_MARK.match(name)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def all_markers() -> list[str]:
    """Every exercise marker a grader may use: each two-digit chapter number, each exercise."""
    return [f"ex{c}_{e}" for c in range(1, 100) for e in range(1, MAX_EXERCISES_PER_CHAPTER + 1)]


def cell_source(cell) -> str:
    """A notebook cell's source as one string (nbformat stores a string or a list of lines)."""
    source = cell.get("source", "") if isinstance(cell, dict) else getattr(cell, "source", "")
    return source if isinstance(source, str) else "".join(source)


def exercise_of(item) -> str | None:
    """The exercise a pytest item is marked with (``@pytest.mark.ex2_3``: "2.3"), or None."""
    for mark in item.iter_markers():
        exercise = exercise_of_marker(mark.name)
        if exercise:
            return exercise
    return None
