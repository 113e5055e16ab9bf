"""Grading machinery for the book's exercise notebooks.

One pipeline, one concern per module. A submission becomes a sandboxed child, the child
gives outcomes, the outcomes become the gradebook:

    submission ──> matching ──> runner + sandbox ──> child (pytest + plugin) ──> outcome ──> gradebook
                   (which        (one bwrap-isolated    (loader runs the        (Status,     (rows, CSV,
                   notebook is   process per student    notebook; graders       summary)     feedback,
                   which chapter) and chapter)          compare with refs)                   review list)

- ``layout``:    the only module that knows where things live: paths, stems, exercise ids, markers.
- ``regions``:   find ``### BEGIN SOLUTION`` / ``### END SOLUTION`` regions and the exercise they belong to.
- ``stubs``:     generate the exercise notebooks from the solution notebooks.
- ``loader``:    execute a notebook's code cells into a fresh module (linecache-backed, magics skipped).
- ``compare``:   assertions whose messages a student can act on.
- ``outcome``:   the one vocabulary of results: ``Status``, signal descriptions, summaries, partial credit.
- ``catalogue``: the wrong implementations that every grader must reject.
- ``isolation``: run kernel checks on a notebook in a child process (Chapter 7: crashes, timeouts).
- ``plugin``:    the pytest plugin (``--notebooks``, ``--prove``, points, summary); it decides each outcome.

Batch grading of a class (``make grade``, ``python -m grading.batch``):

- ``batch``:     the command: students in parallel, progress, resume, hidden tests.
- ``matching``:  which notebook is which chapter, tolerating students' renames.
- ``sandbox``:   the bubblewrap command line around one child (namespaces, read-only files, uid).
- ``runner``:    start one child per student and chapter (spec in on stdin, outcomes out on a pipe).
- ``child``:     what runs inside that child: pytest on the student's notebook.
- ``tamper``:    detection inside the child of patched libraries, reads of the graders, stray writes.
- ``gradebook``: rows, ``gradebook.csv``, the wide export, the roster, overrides, feedback, ``needs_review.md``.
- ``gradescope``: the same grading behind Gradescope's front door (``make gradescope``, ``results.json``).
- ``nbgrader``:  nbgrader's cell metadata and autograder cells (written by ``stubs``), and the
                 same grading behind nbgrader's door (``nbgrader autograde``).

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
