"""What grading says about one test or one exercise: one vocabulary for every process.

The pytest plugin decides a test's :class:`Status` from the exception itself (never from
its text); the judge sends it to the front door as a field of a typed record; the
judge's stopped contestants (:mod:`grading.judge`) use the same statuses; the gradebook,
the feedback and the terminal summary only format them. A process killed by a signal is
described by :func:`describe_signal` wherever that happens (in the words of
:mod:`grading.texts`); points are :mod:`grading.scoring`'s.
"""

from __future__ import annotations

import re
import signal
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import ClassVar

from grading.texts import NOT_IMPLEMENTED, SIGNALS


class Status(str, Enum):
    """A test's or an exercise's status; the value is what the gradebook shows."""

    PASSED = "passed"
    FAILED = "failed"  # a wrong answer: the message says the call, expected and got
    NOT_ATTEMPTED = "not attempted"  # the stub still raises NotImplementedError
    ERROR = "error"  # the student's code raised (a wrong signature, a NameError)
    TIMED_OUT = "timed out"
    MEMORY = "memory limit"
    CRASHED = "crashed"  # a signal, os._exit(), a killed process
    TAMPERED = "tampered"
    REVIEW = "needs review"
    MISSING = "missing"
    SKIPPED = "skipped"  # a GPU-only test on a machine without one: not counted
    NOTE = "note"
    OVERRIDDEN = "overridden"  # the instructor set the points (--overrides); the message says why


    def __str__(self) -> str:
        return self.value


# Statuses that want a human look (written to needs_review.md).
FOR_REVIEW = (Status.TIMED_OUT, Status.MEMORY, Status.CRASHED, Status.TAMPERED, Status.REVIEW)

def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_signal(number: int) -> str:
    """``"SIGSEGV: a segmentation fault: ..."``: the signal and its likely cause."""
    try:
        text = SIGNALS.get(signal.Signals(number))
    except ValueError:
        text = None
    return signal_name(number) + (f": {text.message}" if text else "")


# What torch's CPU allocator and the C++ runtime say when an allocation fails: torch
# raises RuntimeError("... DefaultCPUAllocator: can't allocate memory ..."), not MemoryError.
OUT_OF_MEMORY = re.compile(r"can't allocate memory|DefaultCPUAllocator|std::bad_alloc|Cannot allocate memory|"
                           r"out of memory", re.I)


def out_of_memory(exc: BaseException) -> bool:
    """Did ``exc`` come from an allocation that failed (the memory limit)?"""
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and bool(OUT_OF_MEMORY.search(str(exc))))


def classify(exc: BaseException) -> Status:
    """The status of a test that raised ``exc``, from the exception itself."""
    from grading.compare import GradingFailure

    if isinstance(exc, NotImplementedError):
        return Status.NOT_ATTEMPTED
    declared = getattr(type(exc), "status", None)  # grading.judge: the contestant crashed, timed out, ...
    if isinstance(exc, GradingFailure) and isinstance(declared, str):
        return Status(declared)
    if out_of_memory(exc):
        return Status.MEMORY
    if isinstance(exc, (GradingFailure, AssertionError)):
        return Status.FAILED
    return Status.ERROR


MESSAGE_CHARS = 400  # a gradebook message; the full text stays in the outcome's details


def summary(exc: BaseException, where: str = "") -> str:
    """The one line a student can act on, built from the exception itself: a wrong
    answer's lines (what, expected, got, first bad index) joined; any other exception as
    ``Type: text``, then ``where`` (the notebook cell and line that raised it)."""
    from grading.compare import GradingFailure

    if isinstance(exc, NotImplementedError):
        text = NOT_IMPLEMENTED.format(label="", error=exc).lstrip()
    elif isinstance(exc, GradingFailure):
        text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    elif isinstance(exc, AssertionError):
        text = " ".join(str(exc).split()) or "assertion failed"
    else:
        text = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    text += f"; {where}" if where else ""
    return clip(text)


def clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- one test, and one exercise, decided once -------------------------------------------------
OUTCOMES = ("passed", "failed", "skipped")


@dataclass
class TestOutcome:
    """One test as the judge decided it (:mod:`grading.judge.main`), the one schema of the
    ``test`` lines of a judge's report (:mod:`grading.wire.report`)."""

    __test__ = False  # not a pytest test class, whatever its name
    KIND: ClassVar[str] = "test"

    nodeid: str
    outcome: str  # one of OUTCOMES
    status: str = ""  # a Status value, for a failed test: from its exception (classify)
    summary: str = ""  # the one line a student can act on (summary)
    message: str = ""  # the grader's whole message, for a failure that has no summary
    exc_type: str = ""
    when: str = ""  # "setup", "call" or "teardown": where it failed

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "TestOutcome":
        """Strict: exactly the fields of this class, each a string; the outcome and status
        known. Raises ValueError."""
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            raise ValueError("a test outcome without exactly its fields")
        if not all(isinstance(v, str) and len(v) <= 64 * 1024 for v in data.values()):
            raise ValueError("a test outcome with fields not of text")
        if data["outcome"] not in OUTCOMES or data["status"] not in ("", *(s.value for s in Status)):
            raise ValueError(f"a test outcome of no known kind ({data['outcome'][:40]!r}, {data['status'][:40]!r})")
        return cls(**data)

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


def exercise_status(failures: list[TestOutcome], passed_any: bool, *, memory: bool = False,
                    review: bool = False) -> Status:
    """An exercise's status from its failed tests (the gradebook's rows and the terminal
    say the same): out of memory first; not attempted when every failure is a stub and
    nothing passed; then what stopped a contestant (tampered, crashed, timed out); a
    structural problem for review; a wrong answer; otherwise an error."""
    statuses = {f.status for f in failures}
    if memory or Status.MEMORY in statuses:
        return Status.MEMORY
    if not passed_any and failures and statuses == {Status.NOT_ATTEMPTED.value}:
        return Status.NOT_ATTEMPTED
    for stopped in (Status.TAMPERED, Status.CRASHED, Status.TIMED_OUT):
        if stopped.value in statuses:
            return stopped
    if review:
        return Status.REVIEW
    if passed_any or Status.FAILED.value in statuses:
        return Status.FAILED
    return Status.ERROR


@dataclass
class ChapterPoints:
    """A chapter's points as the terminal summary shows them (the same ``earned`` as the gradebook)."""

    earned: float = 0.0
    possible: int = 0
    skipped_tests: int = 0  # test functions every case of which was skipped: not counted
    skipped_cases: int = 0  # as pytest counts them
