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
- ``gradebook``: rows, statuses, ``gradebook.csv``, feedback files.
"""

from grading.compare import assert_close, assert_equal, assert_raises
from grading.loader import LoadedNotebook, load_notebook, load_solutions

__all__ = ["LoadedNotebook", "assert_close", "assert_equal", "assert_raises", "load_notebook", "load_solutions"]
