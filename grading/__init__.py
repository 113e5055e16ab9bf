"""Grading machinery for the book's exercise notebooks.

One pipeline, one concern per module. A submission is graded by a *judge* that never runs
its code, and answered by a *contestant*, the one process that does:

    submission ──> matching ──> runner ──> judge (child: pytest + plugin) ──> outcome ──> gradebook
                   (which        (one judge     │  graders, references, hidden tests,   (Status,   (rows, CSV,
                   notebook is   per student    │  comparisons, the result writer)      summary)   feedback,
                   which chapter) and chapter)  │                                                  review list)
                                                └─ nb.f(x) ──> contestant (sandbox: loads the notebook,
                                                               answers calls; plain values come back)

- ``layout``:    the only module that knows where things live: paths, stems, exercise ids, markers.
- ``regions``:   find ``### BEGIN SOLUTION`` / ``### END SOLUTION`` regions and the exercise they belong to.
- ``stubs``:     generate the exercise notebooks from the solution notebooks.
- ``loader``:    execute a notebook's code cells into a fresh module (linecache-backed, magics skipped).
- ``compare``:   assertions whose messages a student can act on.
- ``outcome``:   the one vocabulary of results: ``Status``, signal descriptions, summaries, partial credit.
- ``catalogue``: the wrong implementations that every grader must reject.
- ``substitute``: each exercise graded alone: the other exercises' names swapped for references, and
                  what a contestant is sent of them (``reference_package``).
- ``pins``:      the grader's own pinned requirements (``requirements-grader.txt``) and their sections.
- ``determinism``: torch deterministic, the same in the judge and the zygote, without importing its compiler.
- ``plugin``:    the pytest plugin (``--notebooks``, ``--prove``, points, summary); it decides each outcome.

The judge and the contestant:

- ``judge``:      the ``nb`` fixture as a proxy (``RemoteNotebook``), crashes and timeouts as statuses;
                  Chapter 10's ranks (``run_ranks``).
- ``launcher``:   the one launcher of processes that run a submission's code: the zygote that forks
                  contestants, their limits (``Limits``); started before the judge imports torch.
- ``contestant``: what runs in the sandbox: load the notebook, answer calls, keep its objects as handles;
                  a call into another exercise's plain function is asked of the judge, which runs
                  its reference (``substitute.judge_answers``).
- ``isolation``:  each contestant in namespaces of its own: a private tmpfs work folder, the rest
                  read-only, no process outliving it, no keyrings (a seccomp filter).
- ``wire``:       the framed messages between them and the one schema of the values that cross.
- ``watch``, ``services``, ``ranks``: what only the contestant can do for a grader: watch how the
                  notebook computes, compile its kernels (Chapter 7), join a gloo group (Chapter 10).
- ``triton_bounds``: every load and store of an interpreted kernel checked (in the contestant).
- ``triton_launch``: whether Chapter 7's answer came from its kernel: the judge reads the launch in
                  the notebook's text and rules on the stores the contestant saw.

Batch grading of a class (``make grade``, ``python -m grading.batch``):

- ``batch``:     the command: students in parallel, progress, resume, hidden tests.
- ``matching``:  which notebook is which chapter, tolerating students' renames; links are refused.
- ``lms``:       an LMS's bulk download (Canvas, Moodle, Blackboard) as one submission per student.
- ``late``:      the due date and the late policy, applied in one place.
- ``sandbox``:   the bubblewrap command line around the contestants (namespaces, read-only files, uid).
- ``runner``:    start one judge per student and chapter (spec in on stdin, outcomes out on a pipe).
- ``child``:     the judge's main: pytest on the graders, the notebook served by contestants.
- ``tamper``:    what the notebook's namespace says about how it was written (for review).
- ``gradebook``: rows, ``gradebook.csv``, the wide and Canvas exports, the roster, overrides, feedback,
                 ``needs_review.md``.
- ``gradescope``: the same grading behind Gradescope's front door (``make gradescope``, ``results.json``).
- ``nbgrader``:  nbgrader's cell metadata and autograder cells (written by ``stubs``), and the
                 same grading behind nbgrader's door (``nbgrader autograde``).

The student edition (``make release``): ``release`` builds it and proves no solution leaks into it.
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
         "LoadedNotebook": "grading.loader", "load_notebook": "grading.loader", "load_solutions": "grading.loader"}


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grading' has no attribute {name!r}")
