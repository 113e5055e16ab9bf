"""Watches on how a notebook computes, kept while the grader's calls run in the contestant.

Some rules are about the way, not the answer: no NaN or inf on the way to a finite
result (Chapter 3). A torch function mode sees every operation, so it must run where the
notebook's code runs: in the contestant (:mod:`grading.contestant.main`). The judge starts
a watch by name, makes its calls, and reads back what the watch saw as plain values
(:func:`grading.judge.watching`).

A submission owns the process the watch runs in, so a hostile one could silence it: a
watch guards against honest mistakes, is worth at most a point of its exercise, and every
answer is still compared in the judge. What can be measured from outside (memory, bytes
on the wire) is measured there instead (:mod:`grading.judge.measure`).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode


class NonFiniteWatch(TorchFunctionMode):
    """Records every torch operation that returns a NaN or inf."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                # float8 tensors have no isfinite of their own: upcasting keeps NaN and inf.
                values = t.float() if t.element_size() == 1 else t
                if not torch.isfinite(values).all():
                    self.seen.append(getattr(func, "__name__", str(func))[:100])
        return out

    def result(self) -> dict:
        return {"seen": self.seen[:1000]}


WATCHES = {"non_finite": NonFiniteWatch}
