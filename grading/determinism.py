"""Deterministic torch, set the same way in the judge and in every contestant's zygote.

Memory a notebook allocates and never writes (``torch.empty``) reads as NaN (floats) or
the largest value (ints), never as whatever lay there: a kernel that leaves part of its
output unwritten fails the same way on every run, and its outputs can be diagnosed. And
an operation with a deterministic algorithm uses it (a warning where there is none).

``torch.use_deterministic_algorithms`` does both, but it imports ``torch._inductor.config``
to set inductor's own flag, and that import brings torch._dynamo and sympy with it: 2 s
of every grading run, in the judge and again in the zygote, neither of which compiles
anything. So the flag is set where inductor reads it when it is first imported (its
``TORCHINDUCTOR_DETERMINISTIC`` variable), or on its config if that is loaded already.
"""

from __future__ import annotations

import os
import sys


def make_deterministic() -> None:
    """What ``torch.use_deterministic_algorithms(True, warn_only=True)`` does, and memory
    filled on allocation, without importing torch's compiler."""
    import torch

    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"  # read by torch._inductor.config at its import
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = True
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:  # a torch that no longer has it: the public call, at its cost
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        setter(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
