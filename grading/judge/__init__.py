"""The judge: the process that grades one student's chapter and never runs the notebook.

- ``main``:     the process (``python -m grading.judge.main``): pytest on the graders, one exit record.
- ``plugin``:   the pytest plugin: ``--notebooks``, ``--prove``, the ``nb`` fixture, each test's outcome.
- ``loading``:  the notebooks a run grades, each loaded once (``Unloadable`` when one cannot be read).
- ``points``:   the points a run earns per chapter, and their summary.
- ``proof``:    what ``--prove`` proved: stubs, catalogue bugs, diagnosis tables, the rule tables.
- ``variant``:  which notebook a test runs on (graded, solution, stub, a bug, ``alone-N.M``).
- ``messages``: what a student reads when a test fails.
- ``proxy``:    ``nb``, the notebook as a proxy (``RemoteNotebook``, ``Remote``).
- ``session``:  one contestant as the judge sees it: a socket, its answers and failures.
- ``inside``:   what only the contestant can see, asked for by a grader (``watching``, ``data_ptr``).
- ``ranks``:    Chapter 10's gloo ranks, one contestant each (``run_ranks``).
- ``measure``:  what a contestant costs, read from outside it (``peak_memory``, ``loopback_bytes``).
- ``substitute``: each exercise graded alone: what its contestant is sent, and the calls the judge answers.
- ``dependencies``: graded as a whole, the other exercise a failure comes from, named first.
- ``diagnosis``: the known mistake behind a failure, matched against the catalogue's stored table.
- ``replay``:   the student edition's expected values in place of the references (``expected``:
                how they are stored, keyed and matched; ``record_file``: the record's file;
                ``recording``: ``make release``'s run of each chapter's graders that makes it).
- ``triton_launch``: whether Chapter 7's answer came from its kernel.
- ``triton_compile``: Chapter 7's compile check, on the kernels' source read here, compiled in a child of its own.

Graders and instructors' hidden tests import ``watching``, ``data_ptr``, ``run_ranks``,
``peak_memory``, ``loopback_bytes``, ``Unmeasurable`` and ``open_notebook`` from here.
"""

import importlib

__all__ = ["RemoteNotebook", "Unmeasurable", "data_ptr", "loopback_bytes", "open_notebook", "peak_memory",
           "run_ranks", "watching"]
# Imported when first used (PEP 562): the proxy imports torch, and a process that needs
# only the judge's replay or substitute (make release, a rank) need not pay for it.
_HOME = {"RemoteNotebook": "grading.judge.proxy", "open_notebook": "grading.judge.proxy",
         "data_ptr": "grading.judge.inside", "watching": "grading.judge.inside", "run_ranks": "grading.judge.ranks",
         "peak_memory": "grading.judge.measure", "loopback_bytes": "grading.judge.measure",
         "Unmeasurable": "grading.judge.measure"}


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grading.judge' has no attribute {name!r}")
