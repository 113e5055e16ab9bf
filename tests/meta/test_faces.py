"""The grader's faces keep working wherever its modules live.

Instructors, their hidden tests, every committed autograder cell and the chapters' graders
reach the grader through a few names. Those names are its contract: moving a module
inside ``grading/`` must never break one.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from grading.layout import ROOT, discover_chapters

COMMANDS = ("batch", "gradescope", "release", "stubs", "diagnosis")


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_runs(command):
    """``python -m grading.X --help`` for every command the README and the docs name."""
    done = subprocess.run([sys.executable, "-m", f"grading.{command}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()


@pytest.mark.parametrize("name", [
    "grading.nbgrader:autograde",  # every autograder cell of the exercise notebooks imports it
    "grading.compare:assert_close", "grading.compare:assert_equal", "grading.compare:assert_raises",
    "grading.compare:GradingFailure",
    "grading.judge:watching", "grading.judge:data_ptr", "grading.judge:run_ranks", "grading.judge:open_notebook",
    "grading:load_solutions",  # the chapters load finished implementations with it
    "grading.notebook.catalogue:Bug", "grading.contestant.swap:calling", "grading.contestant.swap:beside",
])
def test_each_name_the_graders_and_instructors_import(name):
    module, _, attribute = name.partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))


def test_autograder_cells_import_what_exists():
    """The hidden autograder cells the generator writes import the face above."""
    import json

    for path in sorted((ROOT / "exercises").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        imports = {line.strip() for s in sources for line in s.splitlines() if "import" in line and "grading" in line}
        assert imports <= {"from grading.nbgrader import autograde", "from grading import load_solutions"}, \
            (path, imports)


def test_every_chapter_has_its_test_file_where_the_layout_says():
    for chapter in discover_chapters():
        assert chapter.test_file == ROOT / "tests" / f"test_{chapter.stem}.py"
        assert chapter.test_file.exists()
