"""One benchmark measurement and its goal.

A record is ``{"name", "value", "unit", "goal", "pass"}``; ``goal`` is a comparison
such as ``"<= 1.5"``, ``">= 10"``, ``"== 1.0"`` or ``"report"`` (no target: the
number is shown for context, e.g. the peer's own figure).
"""

from __future__ import annotations

import operator
import statistics
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


def paired_times(fns: list[Callable[[], object]], *, rounds: int = 9) -> list[list[float]]:
    """Wall times, in seconds, of several functions called in turn, round after round:
    ``times[i][r]`` is function ``i`` in round ``r``, after one warm-up call of each.

    Calls that sit next to each other in time share the machine's state (a burst of
    load from a neighbour, the clock), so the ratio of two functions' times *within a
    round* is the fair comparison; see :func:`median_ratio`."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - start)
    return times


def median_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of ``numerator[r] / denominator[r]``.

    On a shared machine the two minima of a best-of-N comparison can come from
    different rounds, one lucky and one not; the median of per-round ratios pairs
    calls that ran back to back and ignores a minority of disturbed rounds."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))
