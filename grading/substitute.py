"""Grade each exercise alone: the other exercises' code is swapped for references.

A chapter's exercises build on each other: ``append`` (2.3) calls ``pages_needed``
(2.1) and the allocator (2.2); the graders of 2.6 fill a cache with ``append``. Graded
on the student's own code throughout, one mistake in 2.1 costs points in five
exercises, and a stub in 2.5 fails the tests of 2.3. Per-question grading (nbgrader,
otter) charges a mistake once, where it is. So while a test of exercise N runs, every
name that another exercise owns is, in the loaded notebook's namespace, the
reference's:

- *Ownership* comes from the exercise notebook: a function, or a method of a class,
  whose body holds the stub line ``raise NotImplementedError("Exercise M.K: ...")``
  belongs to M.K (``pages_needed``, ``BlockAllocator.allocate``). A function that a
  cell attaches to a class (``@add_to_class(PagedKVCache)``) is swapped on the class
  too: it is found there as the same object.
- *References* are declared by the chapter's ``tests/references/ref_NN_topic.py`` as
  ``SUBSTITUTES = {"pages_needed": pages_needed, "PagedKVCache.append": ...}``: the
  same name and signature as the exercise, written independently of the solutions.
  A key that names a whole class (``"RingKVCache"``) stands for all its methods.
- A name another exercise owns and the references do not declare becomes a stand-in
  that fails with "grader error" when called: a grader that still reaches into
  another exercise fails on the solution under ``pytest --prove``, not silently on a
  student's notebook.

A chapter opts in by declaring ``SUBSTITUTES`` (possibly empty); a chapter without it
is graded as before. The swap lasts one test (an autouse fixture) and is undone after
it, so the notebook, loaded once per module, serves every exercise.

``only_solved(solution, exercise)`` builds the notebook of the independence check
(``pytest --prove``): the stubs, with one exercise's solution regions put back.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import re
from pathlib import Path

import nbformat
import pytest

from grading.compare import GradingFailure
from grading.layout import EXERCISES, cell_source, chapter_of_test_file
from grading.regions import replace_regions, stub_lines

STUB_RAISE = re.compile(r"raise NotImplementedError\(\s*['\"]Exercise (\d+\.\d+)\b")

_TABLES: dict[str, tuple[dict[str, str], dict[str, object]] | None] = {}


def owned_names(exercise_notebook: Path) -> dict[str, str]:
    """``{"pages_needed": "2.1", "BlockAllocator.allocate": "2.2", ...}``: each function
    or method whose body holds an exercise's stub line, read from the exercise notebook."""
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
                if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or not node.lineno <= line <= node.end_lineno:
                    continue
                name = node.name
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef) and item.lineno <= line <= item.end_lineno:
                            name = f"{node.name}.{item.name}"
                owned[name] = exercise
    return owned


def chapter_table(stem: str):
    """(owned names, references) of a chapter that opted in, else None. Read once, at
    collection: the grading child hides ``tests.references`` before the notebook loads."""
    if stem not in _TABLES:
        table = None
        try:
            ref = importlib.import_module(f"tests.references.ref_{stem}")
        except ImportError:
            ref = None
        path = EXERCISES / f"{stem}.ipynb"
        if ref is not None and hasattr(ref, "SUBSTITUTES") and path.exists():
            table = (owned_names(path), dict(ref.SUBSTITUTES))
        _TABLES[stem] = table
    return _TABLES[stem]


def _stand_in(name: str, owner: str, exercise: str, stem: str):
    def stand_in(*args, **kwargs):
        raise GradingFailure(
            f"grader error: a test of Exercise {exercise} used `{name}` of Exercise {owner}, and "
            f"tests/references/ref_{stem}.py declares no reference for it in SUBSTITUTES")

    stand_in.__name__ = name.rsplit(".", 1)[-1]
    return stand_in


class _Swaps:
    """Set attributes and dictionary entries; put every one back on ``undo``."""

    MISSING = object()

    def __init__(self):
        self.log: list[tuple[object, str, object]] = []

    def set(self, target, key: str, value) -> None:
        if isinstance(target, dict):
            self.log.append((target, key, target.get(key, self.MISSING)))
            target[key] = value
        else:
            self.log.append((target, key, target.__dict__.get(key, self.MISSING)))
            setattr(target, key, value)

    def undo(self) -> None:
        for target, key, old in reversed(self.log):
            if isinstance(target, dict):
                if old is self.MISSING:
                    target.pop(key, None)
                else:
                    target[key] = old
            elif old is self.MISSING:
                with contextlib.suppress(AttributeError):
                    delattr(target, key)
            else:
                setattr(target, key, old)
        self.log.clear()


@contextlib.contextmanager
def graded_alone(namespace: dict, stem: str, exercise: str | None):
    """Within the block, every name of ``namespace`` that an exercise other than
    ``exercise`` owns is the reference's (or a stand-in that says none is declared)."""
    table = chapter_table(stem)
    if table is None or exercise is None:
        yield
        return
    owned, references = table
    swaps = _Swaps()
    try:
        classes_done = set()
        for name, owner in owned.items():
            if owner == exercise:
                continue
            cls_name, _, method = name.rpartition(".")
            if cls_name and cls_name in references:  # the whole class is swapped
                if cls_name not in classes_done and cls_name in namespace:
                    swaps.set(namespace, cls_name, references[cls_name])
                    classes_done.add(cls_name)
                continue
            replacement = references.get(name) or _stand_in(name, owner, exercise, stem)
            if cls_name:
                cls = namespace.get(cls_name)
                if isinstance(cls, type):
                    swaps.set(cls, method, replacement)
                continue
            if name not in namespace:
                continue
            original = namespace[name]
            for value in list(namespace.values()):  # attached to a class by the notebook
                if isinstance(value, type) and value.__dict__.get(name) is original:
                    swaps.set(value, name, replacement)
            swaps.set(namespace, name, replacement)
        yield
    finally:
        swaps.undo()


def only_solved(solution: nbformat.NotebookNode, exercise: str, name: str = "notebook") -> nbformat.NotebookNode:
    """The exercise notebook with the solution regions of ``exercise`` kept: what a
    student who solved that exercise alone hands in."""
    nb = nbformat.from_dict(solution)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        source = cell_source(cell)

        def keep_or_stub(region, body):
            return [region.indent + "### BEGIN SOLUTION", *body, region.indent + "### END SOLUTION"] \
                if region.exercise == exercise else stub_lines(region, body)

        cell.source = replace_regions(source, keep_or_stub, where=f"{name} cell {index}")
        cell.outputs = []
    return nb


# -- the pytest side: one fixture, one hook ------------------------------------


def pytest_collection_modifyitems(items):
    for item in items:
        chapter = chapter_of_test_file(getattr(item, "path", ""))
        if chapter is not None and "nb" in getattr(item, "fixturenames", ()):
            chapter_table(chapter.stem)


@pytest.fixture(autouse=True)
def _graded_alone(request):
    """Issue 16: a test of exercise N sees the references for every other exercise."""
    chapter = chapter_of_test_file(getattr(request.node, "path", ""))
    if chapter is None or "nb" not in request.fixturenames:
        yield
        return
    from grading.plugin import _exercise

    notebook = request.getfixturevalue("nb")
    module = getattr(notebook, "__dict__", {}).get("module")
    if module is None:  # a notebook that could not be read
        yield
        return
    with graded_alone(module.__dict__, chapter.stem, _exercise(request.node)):
        yield
