"""What a notebook's namespace says about how it was written, reported for review.

This module used to be a tripwire inside the one process that ran both the notebook and
the graders: audit hooks against writes and reads, a snapshot of library functions to
catch patches, a watch on stack frames. Since the judge and the contestant are two
processes (:mod:`grading.judge`, :mod:`grading.contestant`), nothing the notebook does
reaches the graders, and the sandbox (:mod:`grading.sandbox`) stops reads of
``solutions/``, ``tests/`` and the hidden tests outright. What remains worth an
instructor's look is the notebook's own namespace, read in the contestant after loading.
"""

from __future__ import annotations

import types


def borrowed_names(module: types.ModuleType) -> list[str]:
    """Names in a notebook's namespace that come from the graders' own modules."""
    out = []
    for name, value in list(vars(module).items()):
        origin = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(origin, str) and origin.split(".")[0] == "tests":
            out.append(f"`{name}` comes from the graders' module {origin}")
    return out
