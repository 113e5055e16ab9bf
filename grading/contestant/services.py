"""Library code the judge asks a contestant to run on the notebook it loaded.

Some checks need the notebook's own objects and the machinery that runs them in one
process: what a Triton kernel's wrapper launches (Chapter 7; the judge compiles the
kernel's source itself, grading.judge.triton_compile), SmolLM2 decoding
through the notebook's cache (Chapter 8), whether two of a cache's block tables are one
list (Chapter 2). They run in
the contestant, by name from :data:`SERVICES`, with the loaded notebook as their first
argument, and send back plain values. Like a watch (:mod:`grading.contestant.watch`), they run in
the process the submission owns; the judge still checks every value they return.
"""

from __future__ import annotations

import importlib

SERVICES = {
    "chapter07.launch_request": "gpucompile.chapter07:launch_request",
    "chapter08.generate": "modellab.chapter08:generate",
    "chapter02.tables_shared": "grading.contestant.services:tables_shared",
}


def tables_shared(notebook, cache, a, b) -> bool:
    """Whether sequences ``a`` and ``b`` of a paged cache hold one and the same block-table
    list (Exercise 2.5's fork must give its child a list of its own). Only this process
    can tell: a list sent to the judge arrives as a copy."""
    tables = cache.block_tables
    return tables[a] is tables[b]


def run(notebook, name: str, *args):
    if name not in SERVICES:
        raise ValueError(f"no service {name!r}")
    module, _, function = SERVICES[name].partition(":")
    return getattr(importlib.import_module(module), function)(notebook, *args)
