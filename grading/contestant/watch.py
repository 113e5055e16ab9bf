"""Watches on how a notebook computes, kept while the grader's calls run in the contestant.

Some rules are about the way, not the answer: no NaN or inf on the way to a finite
result (Chapter 3), no intermediate as large as the score matrix (Chapter 5). A torch
function mode sees every operation, so it must run where the notebook's code runs: in
the contestant (:mod:`grading.contestant.main`). The judge starts a watch by name, makes its
calls, and reads back what the watch saw as plain values (:func:`grading.judge.watching`).

A submission owns the process the watch runs in, so a hostile one could silence it: a
watch guards against honest mistakes, and every answer is still compared in the judge.
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


class LargestTensor(TorchFunctionMode):
    """Records the largest tensor any torch operation returns while active."""

    def __init__(self):
        super().__init__()
        self.numel, self.shape, self.op = 0, None, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                self.numel, self.shape, self.op = t.numel(), tuple(t.shape), getattr(func, "__name__", str(func))[:100]
        return result

    def result(self) -> dict:
        return {"numel": self.numel, "shape": self.shape, "op": self.op}


WATCHES = {"non_finite": NonFiniteWatch, "largest_tensor": LargestTensor}
