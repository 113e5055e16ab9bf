"""Every text a student reads about how their work was graded, in one catalogue.

A :class:`Text` has three parts, as a grade shows them: ``short``, the word in the
status column (``timed out``, ``SIGSEGV``); ``message``, what happened, in one sentence;
``help``, what to do about it. The gradebook's feedback, Gradescope's results, nbgrader's
cell, the judge's failure messages and the class run's rows all take their words from
here, so one change of wording reaches every front door. Texts with ``{fields}`` are
templates, filled with :meth:`Text.format`.

This module imports nothing of the grader's: every other module may use it.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Text:
    """One student-facing text: ``short`` (a status word), ``message`` (what happened),
    ``help`` (what to do; "" when there is nothing to do)."""

    short: str
    message: str = ""
    help: str = ""

    def format(self, **fields) -> str:
        """``message`` with its ``{fields}`` filled. Raises KeyError for a field not given."""
        return self.message.format(**fields)


# -- a chapter's status (grading.outcome.Status values), as the feedback explains it ---------------
STATUS = {
    "timed out": Text("timed out", help="Look for an infinite loop, or training at the top level of a cell; move "
                                        "long runs into a function or a cell tagged `skip-grading`."),
    "memory limit": Text("memory limit", help="Something allocates far more memory than the exercise needs; check "
                                              "sizes (and units) in your cells."),
    "crashed": Text("crashed", help="The notebook ended the grading process (a segfault, `sys.exit()`, `os._exit()` "
                                    "or a kill). Run it top to bottom in a fresh kernel."),
    "tampered": Text("tampered", help="Your notebook interfered with the grader. This chapter scores zero; talk to "
                                      "your instructor."),
    # A chapter without a grade says its message instead of points.
    "missing": Text("missing", "No notebook for this chapter was found in your submission; no grade was given for it.",
                    "No notebook for this chapter was found in your submission."),
    "needs review": Text("needs review", "Your instructor will review this chapter by hand; no grade was given for "
                                         "it yet."),
}


def advice(status: str) -> str:
    """What to do about a chapter of this status; "" when the status asks nothing."""
    text = STATUS.get(str(status))
    return text.help if text else ""


def no_grade(status: str) -> str:
    """What a chapter without a grade, of this status, says instead of points."""
    text = STATUS.get(str(status))
    return text.message if text else ""


# -- a process ended by a signal (grading.outcome.describe_signal) ----------------------------------
SIGNALS = {
    signal.SIGSEGV: Text("SIGSEGV", "a segmentation fault: native code read or wrote outside every tensor (under "
                                    "TRITON_INTERPRET=1 the usual cause is a tl.load or tl.store without a mask; "
                                    "or ctypes)"),
    signal.SIGBUS: Text("SIGBUS", "a bus error: a misaligned or unmapped memory access"),
    signal.SIGABRT: Text("SIGABRT", "the process aborted (a failed assertion in a C++ extension?)"),
    signal.SIGKILL: Text("SIGKILL", "killed from outside, by the notebook itself, or by the kernel's out-of-memory "
                                    "killer"),
    signal.SIGFPE: Text("SIGFPE", "an arithmetic fault (integer division by zero in native code)"),
    signal.SIGXFSZ: Text("SIGXFSZ", "a file grew past the size limit"),
    signal.SIGXCPU: Text("SIGXCPU", "the CPU-time limit was reached"),
}
# -- a whole chapter stopped (grading.classroom.grade.chapter_verdict) -----------------------------
TOOK_TOO_LONG = Text("timed out", "grading this chapter took longer than {timeout:g} s and was stopped")
OUT_OF_MEMORY = Text("memory limit", "grading this chapter ran out of memory (limit {limit})")
CELL_OUT_OF_MEMORY = Text("memory limit", "cell {cell} ran out of memory (limit {limit})")
GRADERS_DID_NOT_RUN = Text("needs review", "the graders could not run: {why}")
KILLED_BY = Text("crashed", "the grading process was killed by {signal}")
EXITED_EARLY = Text("crashed", "the grading process exited with code {code} before grading finished "
                               "(os._exit() or sys.exit() where the grader cannot catch it?)")

# -- a failed test, as the judge words it (grading.judge.messages) ---------------------------------
NOT_IMPLEMENTED = Text("not attempted", "{label} not implemented yet ({error})")
CELL_DID_NOT_RUN = Text("error", "{label}: not graded: `{name}` is not defined because a cell of {notebook} did "
                                 "not run", "Fix that cell (run it in Jupyter to see the error), then grade again.")
CELL_REPORTED = Text("error", "{label}: not graded: cell {cells} did not run (reported above)")

# -- the class run's rows -----------------------------------------------------------------------------
# A submission-wide row about a notebook no chapter claimed (listed for review): "NAME {UNMATCHED}: why".
UNMATCHED = "was not matched to a chapter"
ALL_SKIPPED = Text("skipped", "every test was skipped here (needs a GPU?)")
# A hidden test's row says whether it passed, never its name, source or message.
HIDDEN_FAILED = Text("failed", "some of these tests did not pass")
HIDDEN_NAME = Text("hidden", "Exercise {exercise}, further tests (not published)")

# -- a Gradescope run that could not grade (grading.classroom.results.failure_results) -----------
NOT_GRADED = Text("failed", "The autograder could not grade this submission: {failure}",
                  "This submission scores 0 until it is graded again. What went wrong is recorded with it, in a part "
                  "of these results that only your instructor sees; Gradescope does not alert them, so tell your "
                  "instructor. Resubmitting may help if the failure was the platform's.")
