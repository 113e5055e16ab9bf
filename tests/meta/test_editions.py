"""Each exercise notebook prints the command that grades it.

The grader opens ``<--notebooks folder>/<stem>.ipynb`` (grading/plugin.py, notebook_dir),
so the command a notebook prints, run from the top folder (the one that holds
``exercises/`` and ``tests/``), must name that notebook's own folder: a Chinese notebook
(``exercises/zh_CN/``) that printed ``--notebooks exercises/`` graded the English stub of
the same name instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from grading import release
from grading.layout import ROOT, cell_source


def _printed_commands(path: Path) -> list[tuple[str, str]]:
    """(test file, --notebooks folder) of every grading command in a notebook's markdown."""
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(cell_source(c) for c in nb.cells if c.cell_type == "markdown")
    return re.findall(r"pytest\s+(tests/test_\S+\.py)\s+--notebooks\s+(\S+)", text)


def _exercise_notebooks() -> list[tuple[Path, Path]]:
    """(top folder, notebook) for the repository's exercise notebooks and, where it is
    built, the release's."""
    tops = [ROOT] + ([release.RELEASE] if (release.RELEASE / "exercises").is_dir() else [])
    return [(top, path) for top in tops for path in sorted((top / "exercises").rglob("*.ipynb"))]


@pytest.mark.parametrize("top, path", _exercise_notebooks(),
                         ids=[str(path.relative_to(ROOT)) for _top, path in _exercise_notebooks()])
def test_each_exercise_notebook_prints_a_command_that_grades_itself(top, path):
    """The grader opens ``<--notebooks folder>/<stem>.ipynb`` (grading/plugin.py,
    notebook_dir), so the command a notebook prints, run from the top folder, must name
    that notebook's own folder: ``exercises/zh_CN/`` in a Chinese one."""
    commands = _printed_commands(path)
    assert commands, f"{path.relative_to(top)} prints no grading command"
    for test_file, folder in commands:
        assert test_file == f"tests/test_{path.stem}.py"
        assert (top / folder / path.name).resolve() == path.resolve(), (
            f"{path.relative_to(top)} prints `--notebooks {folder}`, which grades "
            f"{(Path(folder) / path.name).as_posix()}")
