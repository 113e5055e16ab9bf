"""The notebook as data: regions, cells, loading, the catalogue. This package runs no process.

- ``regions``:   ``### BEGIN SOLUTION`` / ``### END SOLUTION`` regions and the exercise they belong to.
- ``loader``:    execute a notebook's code cells into a fresh module (in the contestant).
- ``catalogue``: the wrong implementations that every grader must reject.
- ``owners``:    which exercise owns which name, and the references a chapter declares for them.
- ``rules``:     each statement's graded rules, and the catalogue bugs that break each one.
- ``untrusted``: files handed in, read as regular files with one name, never through a link.
- ``review``:    what a notebook's namespace says about how it was written, for review.
"""
