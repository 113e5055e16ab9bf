"""Graded as a whole (the student edition): say when another exercise is the cause.

Where each exercise is not graded alone, a mistake in 5.2 fails the tests of 5.3 that
call it. :func:`dependency_note` names that dependency first, read from the student's
source (nothing is run), so the student fixes the exercise at fault.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat

from grading.layout import EXERCISES, cell_source
from grading.notebook.owners import owned_names


def _code_of(notebook: Path) -> list[ast.stmt]:
    """The top-level statements of a notebook's code cells that parse (magics left out)."""
    body: list[ast.stmt] = []
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception:  # noqa: BLE001 - no notebook, no dependencies to name
        return body
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell_source(cell).splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            body += ast.parse(source).body
        except SyntaxError:
            continue
    return body


def dependencies(notebook: Path, stem: str, exercise: str) -> list[tuple[str, str]]:
    """``[("online_update", "5.2"), ...]``: the names of other exercises that the code of
    ``exercise`` in ``notebook`` (a student's) calls, directly or through a function no
    exercise owns, in the order found. Read from the source; nothing is run."""
    path = EXERCISES / f"{stem}.ipynb"
    if not path.exists():
        return []
    owned = owned_names(path)
    defs: dict[str, ast.AST] = {}
    for node in _code_of(notebook):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defs[f"{node.name}.{item.name}"] = item
    # A method is found by its attribute name (``self.allocator.allocate``), unless a
    # built-in container has one of that name too (``pages.append`` is a list's).
    # (A function attached to a class by the notebook, ``@add_to_class``, is found so too.)
    by_method = {name.rpartition(".")[2]: name for name in owned
                 if not any(hasattr(t, name.rpartition(".")[2]) for t in (list, dict, set, str))}
    found: dict[str, str] = {}
    todo = [name for name, owner in owned.items() if owner == exercise and name in defs]
    seen = set(todo)
    while todo:
        for node in ast.walk(defs[todo.pop(0)]):
            if isinstance(node, ast.Name):
                name, full = node.id, node.id if node.id in owned else None
            elif isinstance(node, ast.Attribute):
                name, full = node.attr, by_method.get(node.attr)
            else:
                continue
            if full is not None and owned[full] != exercise:
                found.setdefault(full, owned[full])
            elif name in defs and name not in owned and name not in seen:
                seen.add(name)
                todo.append(name)
    return list(found.items())


def dependency_note(notebook: Path, stem: str, exercise: str, failed: set[str], ran: set[str],
                    called: set[str] = frozenset()) -> str:
    """The first line of a failure of ``exercise`` graded with the student's own functions
    throughout: the dependency that fails its own tests, to fix first; or the ones whose
    tests this run left out. Empty when neither.

    A dependency is another exercise's function that the code of ``exercise`` calls
    (:func:`dependencies`) or that the failing test itself called, by name (``called``:
    2.5's fork test appends with the student's ``append``, 7.4's runs their kernel)."""
    who = {"code": f"{exercise} calls", "test": f"{exercise}'s test calls"}
    deps = [(name, owner, "code") for name, owner in dependencies(notebook, stem, exercise)]
    path = EXERCISES / f"{stem}.ipynb"
    if called and path.exists():
        known = {name for name, _, _ in deps}
        for name, owner in owned_names(path).items():
            if owner != exercise and name.rpartition(".")[2] in called and name not in known:
                deps.append((name, owner, "test"))
    bad = [(name, owner, how) for name, owner, how in deps if owner in failed]
    if bad:
        return "".join(f"{who[how]} your `{name}` ({owner}), which fails its own tests: fix {owner} first.\n"
                       for name, owner, how in bad)
    unrun = [(name, owner, how) for name, owner, how in deps if owner not in ran]
    return "".join(f"{who[how]} your `{name}` ({owner}), whose tests did not run here: if {owner} fails them "
                   f"(-m ex{owner.replace('.', '_')}), fix it first.\n" for name, owner, how in unrun)
