"""Grading machinery for the book's exercise notebooks.

One concern per module:

- ``regions``:   find ``### BEGIN SOLUTION`` / ``### END SOLUTION`` regions and the exercise they belong to.
- ``stubs``:     generate the exercise notebooks from the solution notebooks.
- ``loader``:    execute a notebook's code cells into a fresh module (linecache-backed, magics skipped).
- ``compare``:   assertions whose messages a student can act on.
- ``catalogue``: the wrong implementations that every grader must reject.
- ``isolation``: run checks on a notebook in a child process (crashes, timeouts).
- ``plugin``:    the pytest plugin (``--notebooks``, ``--prove``, points, summary).
"""

from grading.compare import assert_close, assert_equal, assert_raises
from grading.loader import LoadedNotebook, load_notebook, load_solutions

__all__ = ["LoadedNotebook", "assert_close", "assert_equal", "assert_raises", "load_notebook", "load_solutions"]
