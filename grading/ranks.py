"""What each gloo rank's calls returned, and how a rank that did not finish is named.

Two launchers run a notebook's function on several ``torch.distributed`` ranks: the
judge's :func:`grading.judge.run_ranks` (graders: one contestant per rank) and the book's
``distlab.run_on_ranks`` (a reader's notebook, the benchmark, the repository's checks).
Both hand back one :class:`RankResult` per rank, so a grader reads either alike, and
both name a failure here, in one place: a rank that raised (:func:`raised`), one killed
still running (:func:`killed`), one that ended without a word (:func:`crashed`).
:func:`raise_for_failures` turns the results into one :class:`RanksFailed`.

A face: it imports nothing of the grader's, so the judge, the contestant and ``distlab``
may all import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OK, NOT_IMPLEMENTED, ERROR = "ok", "not implemented", "error"
DEADLOCK = "deadlock"  # a send or receive waited past the process group's timeout
TIMEOUT = "timeout"  # killed still running after the whole run's timeout
CRASHED = "crashed"  # ended without a result
STATUSES = (OK, NOT_IMPLEMENTED, ERROR, DEADLOCK, TIMEOUT, CRASHED)


@dataclass
class CallResult:
    value: object = None  # what the function returned (tensors, tuples, numbers)
    bytes_sent: int = 0  # bytes of the tensors handed to torch.distributed.isend / send
    sends: int = 0  # how many tensors were sent
    seconds: float = 0.0  # wall time of the call in this rank (meaningless on a loaded 2-core machine)
    peak: object = None  # the judge's measure of the rank's memory during the call (grading.judge.measure.Peak)


@dataclass
class RankResult:
    rank: int
    status: str  # one of STATUSES
    message: str = ""
    calls: list[CallResult] = field(default_factory=list)


class RanksFailed(Exception):
    """Some rank did not finish its calls. ``not_implemented`` is True when the first
    failure was a NotImplementedError (an unsolved exercise); ``deadlock`` when some rank
    waited past the operation timeout or was killed still running. Which rank times out
    first and which sees its peer close the connection changes from run to run; the
    flag does not."""

    def __init__(self, message: str, not_implemented: bool = False, deadlock: bool = False):
        super().__init__(message)
        self.not_implemented = not_implemented
        self.deadlock = deadlock


def raised(message: str, op_timeout: float, not_implemented: bool = False, cause: str = "") -> tuple[str, str]:
    """``(status, message)`` of a rank whose call raised, described as ``message``: not
    implemented (a stub), a deadlock (gloo's own words for an operation past
    ``op_timeout`` seconds, which on a ring means every rank waits for another), or an error.
    Gloo's words are looked for in ``cause`` (the exception's own text, whole) when given,
    since ``message`` may be clipped for a student."""
    if not_implemented:
        return NOT_IMPLEMENTED, message
    if "timed out" in (cause or message).lower():  # gloo's words for an operation past its timeout
        return DEADLOCK, (f"{message}\n  (a send or receive waited more than {op_timeout:.0f} s: every rank "
                          "was waiting for another, which is a deadlock)")
    return ERROR, message


def killed(message: str) -> tuple[str, str]:
    """``(status, message)`` of a rank killed still running after the run's time limit."""
    return TIMEOUT, f"{message} (a deadlock, or an endless loop)"


def crashed(message: str) -> tuple[str, str]:
    """``(status, message)`` of a rank that ended without a result."""
    return CRASHED, message


def raise_for_failures(results: list[RankResult]) -> None:
    """Raise :class:`RanksFailed` naming every rank that did not finish; nothing when all did."""
    bad = [r for r in results if r.status != OK]
    if not bad:
        return
    first = min(bad, key=lambda r: (r.status != NOT_IMPLEMENTED, r.rank))
    lines = [f"rank {r.rank}: {r.status}: {r.message}" for r in bad]
    raise RanksFailed("\n".join(lines), not_implemented=first.status == NOT_IMPLEMENTED,
                      deadlock=any(r.status in (DEADLOCK, TIMEOUT) for r in bad))
