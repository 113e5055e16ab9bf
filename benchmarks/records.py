"""One benchmark measurement and its goal.

A record is ``{"name", "value", "unit", "goal", "pass"}``; ``goal`` is a comparison
such as ``"<= 1.5"``, ``">= 10"``, ``"== 1.0"`` or ``"report"`` (no target: the
number is shown for context, e.g. the peer's own figure).
"""

from __future__ import annotations

import operator
import time
from dataclasses import asdict, dataclass
from typing import Callable

OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "<": operator.lt, ">": operator.gt}


@dataclass
class Record:
    name: str
    value: float
    unit: str
    goal: str = "report"
    passed: bool | None = None
    note: str = ""

    def __post_init__(self):
        if self.goal == "report":
            self.passed = None
            return
        op, target = self.goal.split()
        self.passed = bool(OPS[op](self.value, float(target)))

    def to_json(self) -> dict:
        out = asdict(self)
        out["pass"] = out.pop("passed")
        return out


def best_time(fn: Callable[[], object], *, repeat: int = 5, number: int = 1, warmup: int = 1) -> float:
    """Minimum over ``repeat`` runs of the mean time of ``number`` calls, in seconds.

    The minimum is the least noisy estimate of what the code costs on an otherwise
    idle machine; peers and our code are timed the same way, side by side."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best
