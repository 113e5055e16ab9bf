"""Write a notebook from a plain-text outline (authoring aid for solution notebooks).

The outline is a Python-like file in which ``# %% [markdown]`` starts a markdown cell,
``# %%`` a code cell and ``# %% tags=skip-grading`` a code cell with tags
(jupytext's percent format, minus the dependency). Outputs are filled in by
``make solutions`` (it executes the notebooks in place).

    python tools/nbbuild.py OUTLINE.py NOTEBOOK.ipynb
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

MARKER = re.compile(r"^# %%(?: \[(markdown)\])?(?: tags=([\w,-]+))?\s*$")


def outline_to_notebook(text: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.nbformat_minor = 4  # no cell ids: smaller, stable diffs
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    kind, tags, lines = None, [], []

    def flush():
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell(body)
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)

    for line in text.splitlines():
        m = MARKER.match(line)
        if m:
            flush()
            kind = "markdown" if m.group(1) else "code"
            tags = m.group(2).split(",") if m.group(2) else []
            lines = []
        else:
            lines.append(line)
    flush()
    for cell in nb.cells:
        cell.pop("id", None)
    return nb


if __name__ == "__main__":
    src, dst = map(Path, sys.argv[1:3])
    nbformat.write(outline_to_notebook(src.read_text()), dst)
