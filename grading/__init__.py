"""Grading machinery for the book's exercise notebooks, laid out by process.

A submission is graded by a *judge* that never runs its code, and answered by a
*contestant*, the one process that does; a *front door* starts the judges and keeps the
grades:

    front door ──> proc.judges ──> judge.main (pytest + judge.plugin) ──> wire records ──> classroom
    (batch,         (one judge      │  graders, references, hidden tests      (read into one     (rows, gradebook,
    gradescope,     per student     │                                         JudgeReport)       feedback, exports)
    nbgrader)       and chapter)    └─ nb.f(x) ──> proc.zygote ──> contestant.zygote ──> contestant.server
                                                   (sandbox: a fork per exercise loads the notebook,
                                                   answers calls; plain values back)

The faces, imported from everywhere (each imports only other faces):

- ``layout``:       the only module that knows where things live: paths, stems, exercise ids, markers.
- ``compare``:      assertions whose messages a student can act on.
- ``alternatives``: wrong readings of a statement, and the kind of mistake each names.
- ``outcome``:      the one vocabulary of results: ``Status``, signal descriptions, summaries.
- ``wire``:         what crosses between processes: frames, the one schema of values, typed records.
- ``determinism``:  torch deterministic, the same in the judge and the zygote.
- ``pins``:         the grader's own pinned requirements and their sections.
- ``texts``:        every text a student reads about how their work was graded.
- ``scoring``:      how outcomes become points: partial credit, core tests, late work, overrides.
- ``ranks``:        what each gloo rank returned, and how a rank that did not finish is named.

The commands (``python -m grading.X``): ``batch`` (a class), ``gradescope``, ``nbgrader``,
``release`` (the student edition), ``stubs`` (the exercise notebooks), ``diagnosis`` (the
catalogue's observations).

The processes, one package each (``tests/meta/test_layering.py`` keeps the lines, as
:data:`LAYERS` and :data:`MAY_IMPORT` below say them; an import inside a function counts):

- ``notebook/``:   the notebook as data: regions, loading, the catalogue, files handed in. Runs no process.
- ``judge/``:      the judge: its main, the pytest plugin, the notebook as a proxy, the references'
                   swap and replay, what it asks of the contestant. Never imports ``classroom/``.
- ``contestant/``: the process that runs a submission's code: its limits, the zygote and the
                   server of one fork, the swap, watches, services, ranks, isolation. Imports
                   only the faces and ``notebook/``.
- ``proc/``:       how every child is started and contained: the sandbox, the zygote, the judges.
- ``classroom/``:  a class's submissions turned into grades: matching, LMS downloads, late work,
                   rows, the gradebook and its exports, the run's recorded policy, and
                   ``grade.grade_submission``. Never reaches ``judge/`` or ``contestant/``.

The book's own packages use the grader too: ``modellab`` (models, paths), ``gpucompile``
(Chapter 7's compile check, run in a child of the contestant's limits) and ``distlab``
(Chapter 10's gloo ranks, for a reader's notebook: it never reaches ``judge/``).

Layers, lowest first: the faces; ``notebook/`` and ``modellab``; ``contestant/``; ``proc/``
and ``gpucompile``; ``judge/`` and ``distlab``; ``classroom/``; the commands. No import
climbs to a higher layer or crosses to another package of its own.
"""

import importlib
import sys

# The map above, as data: tests/meta/test_layering.py reads it (and checks that the text
# above names every package it names), so the map and the test cannot drift apart.
FACES = ("layout", "compare", "alternatives", "outcome", "wire", "determinism", "pins", "texts", "scoring", "ranks")
COMMANDS = ("batch", "gradescope", "nbgrader", "release", "stubs", "diagnosis")
PROCESSES = {  # package -> the process its code runs in
    "notebook": "none of its own: read by every process",
    "contestant": "the contestant, in the sandbox: the only one that runs a submission's code",
    "proc": "the front door and the judge, which start children",
    "judge": "the judge, which never runs a submission's code",
    "classroom": "the front door",
    "modellab": "any: the book's models and their paths",
    "gpucompile": "a child of the judge, under the contestant's limits",
    "distlab": "a reader's notebook or a test, and the ranks it forks",
}
# Lowest first: a module may import from its own layer's package and from lower layers
# only, and among those only what MAY_IMPORT names (the faces are layer 0, the commands
# the top; a face imports faces only, and nothing imports a command but a command).
LAYERS = (("faces",), ("notebook", "modellab"), ("contestant",), ("proc", "gpucompile"), ("judge", "distlab"),
          ("classroom",), ("commands",))
MAY_IMPORT = {
    "faces": set(),
    "notebook": set(),
    "modellab": set(),
    "contestant": {"notebook"},
    "gpucompile": {"notebook", "contestant"},
    "proc": {"notebook"},
    "judge": {"notebook", "contestant", "proc", "gpucompile", "modellab"},
    "distlab": {"notebook", "contestant", "proc"},
    "classroom": {"notebook", "proc", "modellab"},
    "commands": {"notebook", "contestant", "proc", "judge", "classroom", "gpucompile", "modellab", "distlab"},
}

# jsonschema checks the "iri" format with rfc3987_syntax when it is installed (jupyter's
# format extras bring it), and that module compiles a Lark grammar at import: 1.2 s of
# every process that imports nbformat, which every judge and contestant zygote does. No
# notebook schema uses that format, so jsonschema is told it is absent (an import of a
# module set to None raises ImportError, which jsonschema expects).
sys.modules.setdefault("rfc3987_syntax", None)

__all__ = ["LoadedNotebook", "assert_close", "assert_equal", "assert_raises", "load_notebook", "load_solutions"]
# Imported when first used (PEP 562), not with the package: ``grading.compare`` imports
# torch, and the front doors, which only start judges (the class run, Gradescope's),
# need not hold torch's 200 MB beside each judge.
_HOME = {"assert_close": "grading.compare", "assert_equal": "grading.compare", "assert_raises": "grading.compare",
         "LoadedNotebook": "grading.notebook.loader", "load_notebook": "grading.notebook.loader",
         "load_solutions": "grading.notebook.loader"}


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grading' has no attribute {name!r}")
