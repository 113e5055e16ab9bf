"""Which exercise owns which name, and the references a chapter declares for them.

Read from data, never run: the exercise notebook's stub lines say who owns a name
(``raise NotImplementedError("Exercise 2.1: ...")`` in the body of ``pages_needed``),
and the chapter's ``tests/references/ref_NN_topic.py`` declares ``SUBSTITUTES``, the
references bound in their place while another exercise is graded
(:mod:`grading.judge.substitute` says why). The judge reads both to build what a
contestant is sent; a child that loads the notebook itself (the book's ``distlab``
ranks) reads them to bind the swap it was handed (:func:`grading.contestant.swap.swap_named`).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import nbformat

from grading.layout import EXERCISES, cell_source

STUB_RAISE = re.compile(r"raise NotImplementedError\(\s*['\"]Exercise (\d+\.\d+)\b")


def owned_names(exercise_notebook: Path) -> dict[str, str]:
    """``{"pages_needed": "2.1", "BlockAllocator.allocate": "2.2", ...}``: each function
    or method whose body holds an exercise's stub line, read from the exercise notebook.
    Raises what ``nbformat.read`` raises for a missing or malformed notebook."""
    nb = nbformat.read(exercise_notebook, as_version=4)
    owned: dict[str, str] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source = cell_source(cell)
        stubs = [(i + 1, m.group(1)) for i, line in enumerate(source.splitlines()) if (m := STUB_RAISE.search(line))]
        if not stubs:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            for line, exercise in stubs:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.lineno <= line <= node.end_lineno:
                    owned[_owner_name(node, line)] = exercise
    return owned


def _owner_name(node: ast.FunctionDef | ast.ClassDef, line: int) -> str:
    """``f`` for a function; ``Class.method`` for the method of a class that holds ``line``."""
    if isinstance(node, ast.ClassDef):
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.lineno <= line <= item.end_lineno:
                return f"{node.name}.{item.name}"
    return node.name


def read_table(stem: str) -> tuple[dict[str, str], dict[str, object]] | None:
    """``(owned names, SUBSTITUTES)`` of a chapter that declares ``SUBSTITUTES``, else None
    (no reference module, none declared, or no exercise notebook). Imports the chapter's
    reference module: call it where references may be held (the judge, at collection; a
    child the book starts itself), never in a graded contestant."""
    try:
        ref = importlib.import_module(f"tests.references.ref_{stem}")
    except ImportError:
        return None
    path = EXERCISES / f"{stem}.ipynb"
    if not hasattr(ref, "SUBSTITUTES") or not path.exists():
        return None
    return owned_names(path), dict(ref.SUBSTITUTES)
