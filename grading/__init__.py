"""Grading machinery for the book's exercise notebooks.

One concern per module:

- ``regions``:   find ``### BEGIN SOLUTION`` / ``### END SOLUTION`` regions and the exercise they belong to.
- ``stubs``:     generate the exercise notebooks from the solution notebooks.
- ``loader``:    execute a notebook's code cells into a fresh module (linecache-backed, magics skipped).
- ``compare``:   assertions whose messages a student can act on.
- ``catalogue``: the wrong implementations that every grader must reject.
- ``isolation``: run checks on a notebook in a child process (crashes, timeouts).
- ``plugin``:    the pytest plugin (``--notebooks``, ``--prove``, points, summary).

Batch grading of a class (``make grade``, ``python -m grading.batch``):

- ``batch``:     the command: students in parallel, progress, resume, hidden tests.
- ``matching``:  which notebook is which chapter, tolerating students' renames.
- ``runner``:    one child process per student and chapter (timeout, limits, temp dir).
- ``child``:     what runs inside that child: pytest on the student's notebook.
- ``tamper``:    detection of patched libraries, reads of the graders, stray writes.
- ``gradebook``: rows, statuses, ``gradebook.csv``, the wide export, the roster, overrides, feedback files.
- ``gradescope``: the same grading behind Gradescope's front door (``make gradescope``, ``results.json``).

The student edition (``make release``): ``release`` builds it and proves no solution leaks into it.
"""

import importlib

__all__ = ["LoadedNotebook", "assert_close", "assert_equal", "assert_raises", "load_notebook", "load_solutions"]
# Imported when first used (PEP 562), not with the package: ``grading.compare`` imports
# torch, and the processes that only start grading children (the batch grader, the
# Gradescope front door) need not hold torch's 200 MB beside each child.
_HOME = {"assert_close": "grading.compare", "assert_equal": "grading.compare", "assert_raises": "grading.compare",
         "LoadedNotebook": "grading.loader", "load_notebook": "grading.loader", "load_solutions": "grading.loader"}


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grading' has no attribute {name!r}")
