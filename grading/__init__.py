"""Grading machinery for the book's exercise notebooks, laid out by process.

A submission is graded by a *judge* that never runs its code, and answered by a
*contestant*, the one process that does; a *front door* starts the judges and keeps the
grades:

    front door ──> proc.judges ──> judge.main (pytest + judge.plugin) ──> wire records ──> classroom
    (batch,         (one judge      │  graders, references, hidden tests      (plan, outcomes,   (rows, gradebook,
    gradescope,     per student     │                                         exit record)       feedback, exports)
    nbgrader)       and chapter)    └─ nb.f(x) ──> proc.zygote ──> contestant.main (sandbox: loads the
                                                                   notebook, answers calls; plain values back)

The faces, imported from everywhere (each imports only other faces):

- ``layout``:       the only module that knows where things live: paths, stems, exercise ids, markers.
- ``compare``:      assertions whose messages a student can act on.
- ``alternatives``: wrong readings of a statement, and the kind of mistake each names.
- ``outcome``:      the one vocabulary of results: ``Status``, signal descriptions, summaries.
- ``wire``:         what crosses between processes: frames, the one schema of values, typed records.
- ``determinism``:  torch deterministic, the same in the judge and the zygote.
- ``pins``:         the grader's own pinned requirements and their sections.

The commands (``python -m grading.X``): ``batch`` (a class), ``gradescope``, ``nbgrader``,
``release`` (the student edition), ``stubs`` (the exercise notebooks), ``diagnosis`` (the
catalogue's observations).

The processes, one package each (``tests/meta/test_layering.py`` keeps the lines):

- ``notebook/``:   the notebook as data: regions, loading, the catalogue, files handed in. Runs no process.
- ``judge/``:      the judge: its main, the pytest plugin, the notebook as a proxy, the references'
                   swap and replay, what it asks of the contestant. Never imports ``classroom/``.
- ``contestant/``: the process that runs a submission's code: the swap, watches, services,
                   ranks, isolation. Imports only the faces and ``notebook/``.
- ``proc/``:       how every child is started and contained: the sandbox, the zygote, the judges.
- ``classroom/``:  a class's submissions turned into grades: matching, LMS downloads, late work,
                   rows, the gradebook and its exports, the run's recorded policy, and
                   ``grade.grade_submission``.
"""

import importlib
import sys

# jsonschema checks the "iri" format with rfc3987_syntax when it is installed (jupyter's
# format extras bring it), and that module compiles a Lark grammar at import: 1.2 s of
# every process that imports nbformat, which every judge, contestant zygote and grading
# child does. No notebook schema uses that format, so jsonschema is told it is absent
# (an import of a module set to None raises ImportError, which jsonschema expects).
sys.modules.setdefault("rfc3987_syntax", None)

__all__ = ["LoadedNotebook", "assert_close", "assert_equal", "assert_raises", "load_notebook", "load_solutions"]
# Imported when first used (PEP 562), not with the package: ``grading.compare`` imports
# torch, and the processes that only start grading children (the batch grader, the
# Gradescope front door) need not hold torch's 200 MB beside each child.
_HOME = {"assert_close": "grading.compare", "assert_equal": "grading.compare", "assert_raises": "grading.compare",
         "LoadedNotebook": "grading.notebook.loader", "load_notebook": "grading.notebook.loader",
         "load_solutions": "grading.notebook.loader"}


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grading' has no attribute {name!r}")
