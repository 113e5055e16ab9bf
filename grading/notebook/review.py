"""What a notebook's namespace says about how it was written, reported for review.

This module used to be a tripwire inside the one process that ran both the notebook and
the graders: audit hooks against writes and reads, a snapshot of library functions to
catch patches, a watch on stack frames. Since the judge and the contestant are two
processes (:mod:`grading.judge`, :mod:`grading.contestant.main`), nothing the notebook does
reaches the graders, and the sandbox (:mod:`grading.proc.sandbox`) stops reads of
``solutions/``, ``tests/`` and the hidden tests outright. What remains worth an
instructor's look is the notebook's own namespace, read in the contestant after loading.
"""

from __future__ import annotations

import json
import re
import types

# Library code that computes an exercise's answer itself. A notebook that calls it earns
# the points by delegation, which the graders cannot tell from a derivation (the values
# are the same): the names are listed for an instructor's review instead.
LIBRARY_ANSWERS = {
    "ROPE_INIT_FUNCTIONS": "transformers' RoPE initialisers, which compute Chapter 9's frequencies",
    "modeling_rope_utils": "transformers' RoPE module, which computes Chapter 9's frequencies",
    "_compute_yarn_parameters": "transformers' YaRN frequencies (Exercise 9.5)",
    "_compute_llama3_parameters": "transformers' Llama 3.1 frequencies (Exercise 9.6)",
    "flash_attn_func": "flash-attn's kernel (Chapters 5 and 7)",
    "fla.ops": "flash-linear-attention's kernels (Chapter 6; its function names are the exercises' own)",
}
_LIBRARY_WORD = re.compile(r"\b(" + "|".join(map(re.escape, LIBRARY_ANSWERS)) + r")\b")


def borrowed_names(module: types.ModuleType) -> list[str]:
    """Names in a notebook's namespace that come from the graders' own modules."""
    out = []
    for name, value in list(vars(module).items()):
        origin = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(origin, str) and origin.split(".")[0] == "tests":
            out.append(f"`{name}` comes from the graders' module {origin}")
    return out


def library_answers(notebook_text: str) -> list[str]:
    """The :data:`LIBRARY_ANSWERS` that the code cells of a notebook (its JSON text)
    name, each once: read by the judge from the text, so no notebook code runs."""
    try:
        cells = json.loads(notebook_text).get("cells", [])
    except (ValueError, AttributeError):
        return []
    found: dict[str, None] = {}
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        for m in _LIBRARY_WORD.finditer(source):
            found[m.group(1)] = None
    return [f"the notebook uses `{name}`: {LIBRARY_ANSWERS[name]}; check that the graded functions do not "
            "delegate to it" for name in found]
