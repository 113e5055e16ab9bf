"""The grading machinery itself: regions, stubs, the loader, the catalogue."""

from __future__ import annotations

import inspect
import subprocess
import sys

import nbformat
import pytest

from grading.layout import ROOT, SOLUTIONS, TESTS
from grading.notebook.catalogue import Bug
from grading.notebook.loader import CellDidNotRun, NotebookLoadError, NotImplementedExercise, load_notebook
from grading.notebook.regions import RegionError, find_regions, replace_regions, stub_lines
from grading.stubs import make_stub

SOLVED = '''\
import math

# Exercise 9.1: add two numbers.
def add(a, b):
    """a + b"""
    ### BEGIN SOLUTION
    if not isinstance(a, int):
        raise TypeError("a must be an int")
    return a + b
    ### END SOLUTION
'''


def notebook(*sources, tags=None) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# title")]
    for i, src in enumerate(sources):
        cell = nbformat.v4.new_code_cell(src)
        if tags and i in tags:
            cell.metadata["tags"] = tags[i]
        nb.cells.append(cell)
    return nb


def write(tmp_path, nb, name="09_demo.ipynb"):
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_regions_are_tied_to_their_exercise():
    (region,) = find_regions(SOLVED)
    assert (region.exercise, region.task, region.indent) == ("9.1", "add two numbers.", "    ")


def test_stub_raises_with_the_exercise_text():
    stub = replace_regions(SOLVED, stub_lines)
    assert "raise NotImplementedError('Exercise 9.1: add two numbers.')" in stub
    assert "return a + b" not in stub and "TypeError" not in stub


def test_top_level_assignment_becomes_a_placeholder():
    src = "# Exercise 9.2: the answer.\n### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION\n"
    assert (replace_regions(src, stub_lines).strip()
            == "# Exercise 9.2: the answer.\nanswer = ...  # Exercise 9.2: the answer.")


@pytest.mark.parametrize(
    "src",
    [
        "### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n",  # no exercise line
        "# Exercise 1.1: x\n### BEGIN SOLUTION\nx = 1\n",  # never closed
        "# Exercise 1.1: x\nx = 1\n### END SOLUTION\n",  # END without BEGIN
    ],
    ids=["no-exercise-line", "unclosed", "end-without-begin"],
)
def test_malformed_regions_are_errors(src):
    with pytest.raises(RegionError):
        find_regions(src)


def test_make_stub_drops_outputs(tmp_path):
    nb = notebook(SOLVED)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="hi")]
    nb.cells[1].execution_count = 3
    stub = make_stub(nb)
    assert stub.cells[1].outputs == [] and stub.cells[1].execution_count is None


def test_loader_runs_cells_and_getsource_works(tmp_path):
    loaded = load_notebook(write(tmp_path, notebook(SOLVED)))
    assert loaded.add(2, 3) == 5
    assert "return a + b" in inspect.getsource(loaded.add)  # triton.jit depends on this


def test_loader_reports_stub_placeholders(tmp_path):
    src = "# Exercise 9.2: the answer.\n### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION\n"
    stub = make_stub(notebook(src))
    loaded = load_notebook(write(tmp_path, stub))
    with pytest.raises(NotImplementedExercise, match="Exercise 9.2"):
        loaded.answer


def test_loader_skips_magics_tags_and_survives_errors(tmp_path):
    nb = notebook(
        "%matplotlib inline\n!pip install nothing\nx = 1",
        "%%bash\necho never",
        "raise RuntimeError('boom')",
        "import sys\nsys.exit(3)",
        "y = x + 1",
        "z = 1",
        tags={5: ["skip-grading"]},
    )
    loaded = load_notebook(write(tmp_path, nb))
    assert loaded.y == 2
    assert not loaded.has("z")
    kinds = [(p.cell, p.kind) for p in loaded.problems]
    assert (1, "skipped") in kinds and (2, "skipped") in kinds
    assert (3, "error") in kinds and (4, "error") in kinds
    with pytest.raises(CellDidNotRun, match="cell 3: RuntimeError: boom"):
        loaded.undefined_name


def test_a_cell_that_does_not_compile_is_described_by_its_line(tmp_path):
    loaded = load_notebook(write(tmp_path, notebook("def f():\n    return 1\n      x = 2", "g = 1")))
    assert loaded.g == 1
    with pytest.raises(CellDidNotRun, match=r"cell 1: IndentationError: unexpected indent \(line 3: `x = 2`\)"):
        loaded.f


def test_a_load_error_is_reported_once_per_exercise_without_internals(tmp_path):
    """One typo in one cell printed 104 tracebacks of pytest internals."""
    nb = nbformat.read(SOLUTIONS / "01_kv_memory.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "def kv_bytes_per_token" in c.source)
    cell.source = cell.source.replace("    _check_int(\"num_layers\", num_layers)",
                                      "      _check_int(\"num_layers\", num_layers)")
    nbformat.write(nb, tmp_path / "01_kv_memory.ipynb")
    run = subprocess.run([sys.executable, "-m", "pytest", str(TESTS / "test_01_kv_memory.py"),
                          "--notebooks", str(tmp_path), "-m", "ex1_1 or ex1_2", "-q", "-p", "no:cacheprovider"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    out = run.stdout
    # pytest's closing summary repeats each failure's message in full when it believes it runs
    # on CI (the CI variable is set), and clips it to the terminal width otherwise; count only in
    # the failure reports above it, which are the same everywhere.
    reports = out.split("short test summary info")[0]
    assert reports.count("IndentationError: unexpected indent") == 2, out[-3000:]  # once for 1.1, once for 1.2
    assert "not graded: cell" in out and "(reported above)" in out
    assert "pluggy" not in out and "Traceback" not in out and "_pytest" not in out


def test_loader_rejects_non_notebooks(tmp_path):
    bad = tmp_path / "01_x.ipynb"
    bad.write_text("{not json")
    with pytest.raises(NotebookLoadError):
        load_notebook(bad)
    with pytest.raises(NotebookLoadError):
        load_notebook(tmp_path / "missing.ipynb")


def test_bug_code_replaces_the_region(tmp_path):
    bugged = Bug("minus", "9.1", "subtracts", code="return a - b").apply(notebook(SOLVED))
    assert load_notebook(write(tmp_path, bugged)).add(5, 3) == 2


def test_bug_substitution_must_match_once():
    with pytest.raises(ValueError, match="changed it 0 times"):
        Bug("typo", "9.1", "no match", old="a * b", new="a").apply(notebook(SOLVED))


def test_a_library_implementation_of_an_exercise_is_listed_for_review():
    """9.6 earned full marks through transformers' ROPE_INIT_FUNCTIONS. The
    values are right, so no grader fails; the judge lists the name from the notebook's
    code cells (its text: no notebook code runs) for the instructor instead."""
    import nbformat

    from grading.notebook import review as tamper

    solution = (ROOT / "solutions" / "09_rope_scaling.ipynb").read_text()
    assert tamper.library_answers(solution) == []
    nb = nbformat.reads(solution, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("ROPE_INIT_FUNCTIONS in prose is not code"))
    assert tamper.library_answers(nbformat.writes(nb)) == []
    nb.cells.append(nbformat.v4.new_code_cell("from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS as R"))
    found = tamper.library_answers(nbformat.writes(nb))
    assert [f.split("`")[1] for f in found] == ["modeling_rope_utils", "ROPE_INIT_FUNCTIONS"]
