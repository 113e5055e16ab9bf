"""What grading says about one test or one exercise: one vocabulary for every process.

The pytest plugin decides a test's :class:`Status` from the exception itself (never from
its text); the grading child sends it to the batch grader as a field of a JSON line; the
judge's stopped contestants (:mod:`grading.judge`) use the same statuses; the gradebook,
the feedback and the terminal summary only format them. A process killed by a signal is
described by :func:`describe_signal` wherever that happens, and partial credit is
computed by :func:`earned` alone.
"""

from __future__ import annotations

import re
import signal
from dataclasses import asdict, dataclass
from enum import Enum


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

SIGNAL_HINTS = {
    signal.SIGSEGV: "a segmentation fault: native code read or wrote outside every tensor (under "
                    "TRITON_INTERPRET=1 the usual cause is a tl.load or tl.store without a mask; or ctypes)",
    signal.SIGBUS: "a bus error: a misaligned or unmapped memory access",
    signal.SIGABRT: "the process aborted (a failed assertion in a C++ extension?)",
    signal.SIGKILL: "killed from outside, by the notebook itself, or by the kernel's out-of-memory killer",
    signal.SIGFPE: "an arithmetic fault (integer division by zero in native code)",
    signal.SIGXFSZ: "a file grew past the size limit",
    signal.SIGXCPU: "the CPU-time limit was reached",
}


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_signal(number: int) -> str:
    """``"SIGSEGV: a segmentation fault: ..."``: the signal and its likely cause."""
    try:
        hint = SIGNAL_HINTS.get(signal.Signals(number), "")
    except ValueError:
        hint = ""
    return signal_name(number) + (f": {hint}" if hint else "")


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
        text = f"not implemented yet ({exc})"
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


def earned(points: float, passed: int, graded: int, core: bool = False) -> float:
    """What a test function earns: its points shared equally by its graded cases
    (partial credit), or, for a ``core`` function (``@pytest.mark.core``: the cases
    an exercise exists to teach), all of its points when every graded case passed and
    none otherwise. A function whose every case was skipped earns and costs nothing."""
    if not graded:
        return 0.0
    if core:
        return float(points) if passed == graded else 0.0
    return points * passed / graded


# -- one test, and one exercise, decided once -------------------------------------------------
OUTCOMES = ("passed", "failed", "skipped")


@dataclass
class TestOutcome:
    """One test as the judge decided it (:mod:`grading.judge.main`), the one schema of the
    ``test`` lines the batch grader reads (:mod:`grading.batch`, :mod:`grading.classroom.gradebook`)."""

    __test__ = False  # not a pytest test class, whatever its name

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
        """Strict: the fields of this class, each a string; the outcome and status known."""
        if not isinstance(data, dict):
            raise ValueError("a test outcome that is not an object")
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if "nodeid" not in fields or "outcome" not in fields or not all(isinstance(v, str) for v in fields.values()):
            raise ValueError("a test outcome without its nodeid and outcome, or with fields not of text")
        if fields["outcome"] not in OUTCOMES or fields.get("status", "") not in ("", *(s.value for s in Status)):
            raise ValueError(f"a test outcome of no known kind ({fields['outcome']!r}, {fields.get('status')!r})")
        return cls(**fields)

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
