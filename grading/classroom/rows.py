"""Gradebook rows: a judge's outcomes as points (grading.scoring), a status and a message.

One row per student, chapter and exercise (hidden tests get their own row, ``1.2
hidden``); rows with an empty exercise are notes about the whole chapter or the
whole submission (0 of 0 points).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from grading import scoring, texts
from grading.classroom.matching import readable
from grading.outcome import MESSAGE_CHARS, Status, TestOutcome, clip, describe_signal, exercise_status
from grading.wire.records import PlannedTest

FIELDS = ["student", "chapter", "exercise", "points", "max_points", "status", "message"]
PASSED, FAILED, NOT_ATTEMPTED, ERROR = Status.PASSED, Status.FAILED, Status.NOT_ATTEMPTED, Status.ERROR
TIMED_OUT, MEMORY, CRASHED, TAMPERED = Status.TIMED_OUT, Status.MEMORY, Status.CRASHED, Status.TAMPERED
REVIEW, MISSING, SKIPPED, NOTE = Status.REVIEW, Status.MISSING, Status.SKIPPED, Status.NOTE
OVERRIDDEN = Status.OVERRIDDEN


@dataclass
class Row:
    student: str
    chapter: str
    exercise: str
    points: float
    max_points: float
    status: str
    message: str = ""

    def as_csv(self) -> dict:
        d = asdict(self)
        d["points"], d["max_points"] = num(self.points), num(self.max_points)
        return dict(zip(d, csv_row(d.values())))


# A cell a spreadsheet would run as a formula (OWASP's CSV injection): text beginning with
# one of these. A leading quote is escaped too, so that reading a cell back is exact.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")
PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value) -> str:
    """``value`` as one CSV cell that no spreadsheet runs: text beginning with ``=``, ``+``,
    ``-``, ``@``, a tab, a carriage return or ``'`` gets a leading ``'``; a plain number
    (``-2.5``: a late penalty, a negative score) is left a number. :func:`csv_value` undoes it.
    A name's byte that is not UTF-8 is written ``\\xNN`` (:func:`grading.classroom.matching.readable`):
    names are made readable where they are read, and no cell can stop the file being written."""
    text = readable("" if value is None else str(value))
    if text.startswith(FORMULA_START) and not PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def csv_value(cell: str) -> str:
    """The text :func:`csv_cell` was given for ``cell``."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(FORMULA_START) else cell


def csv_row(values) -> list[str]:
    """A row of cells, each through :func:`csv_cell`: what every CSV writer here writes."""
    return [csv_cell(v) for v in values]


def num(x: float) -> str:
    x = round(float(x), 3)
    return str(int(x)) if x == int(x) else f"{x:g}"


def one_line(message: str, limit: int = MESSAGE_CHARS) -> str:
    """The part of a grader message a student can act on, on one line: the first
    line and any ``expected:`` / ``got:`` lines, without tracebacks."""
    keep = []
    for n, line in enumerate(message.splitlines()):
        s = line.strip()
        if not s:
            continue
        if re.match(r"^(\S+\.py:\d+|E\s|>\s|Traceback|File \")", s) or s.startswith(("def ", "@")):
            break
        if n == 0 or re.match(r"^(expected|got|max|first|at |raised in|  )", s) or line.startswith("  "):
            keep.append(s)
    text = "; ".join(keep) or message.strip().splitlines()[0] if message.strip() else ""
    text = re.sub(r"0x[0-9a-f]{6,}", "0x...", text)
    text = re.sub(r"/\S*/grade-[^/\s]+/work/notebooks/", "", text)  # the child's temporary paths
    return clip(text, limit)


def exercise_order(label: str) -> tuple:
    m = re.match(r"^(\d+)\.(\d+)", label)
    return (0, int(m.group(1)), int(m.group(2)), label) if m else (1 if label else -1, 0, 0, label)


def crash_text(returncode: int | None, signal: int | None = None) -> str:
    """Why a child ended before grading finished, with the likely cause."""
    if signal is not None:
        return texts.KILLED_BY.format(signal=describe_signal(signal))
    return texts.EXITED_EARLY.format(code=returncode)


# -- from a plan and outcomes to rows -----------------------------------------------
def by_exercise(tests: list[PlannedTest]) -> list[tuple[str, list[scoring.TestFunction]]]:
    """The plan's test functions by exercise label, in exercise order (grading.scoring.group_plan)."""
    return sorted(scoring.group_plan(tests).items(), key=lambda kv: exercise_order(kv[0]))


def zero_rows(student: str, chapter: str, tests: list[PlannedTest], status: str, message: str) -> list[Row]:
    """Every exercise of a chapter at zero with one status: missing, timed out, crashed..."""
    groups = by_exercise(tests)
    if not groups:
        return [Row(student, chapter, "", 0, 0, status, message)]
    return [Row(student, chapter, label, 0, scoring.max_points(fns), status, message) for label, fns in groups]


def graded_rows(student: str, chapter: str, tests: list[PlannedTest], outcomes: dict[str, TestOutcome],
                review: dict[str, str] | None = None, memory_note: str = "",
                diagnoses: dict[str, str] | None = None) -> list[Row]:
    """Rows from the outcomes of a chapter that ran to the end, scored by
    :func:`grading.scoring.score_exercise`. A failed exercise's message starts with its
    diagnosis, when the catalogue names the mistake."""
    rows = []
    for label, functions in by_exercise(tests):
        score = scoring.score_exercise(functions, outcomes)
        if score.possible == 0:
            rows.append(Row(student, chapter, label, 0, 0, SKIPPED, texts.ALL_SKIPPED.message))
        elif not score.failures:
            rows.append(Row(student, chapter, label, score.points, score.possible, PASSED, ""))
        else:
            status, message = failure_text(label, score, review or {}, memory_note, diagnoses or {})
            rows.append(Row(student, chapter, label, score.points, score.possible, status, message))
    return rows


def failure_text(label: str, score: scoring.ExerciseScore, review: dict[str, str], memory_note: str,
                 diagnoses: dict[str, str]) -> tuple[str, str]:
    """A failed exercise's status and message: its first failure's summary (a hidden
    exercise's failed test names only), after the reason it needs review or ran out of
    memory, the diagnosis first where the catalogue names the mistake."""
    hidden, exercise, failures = label.endswith(" hidden"), label.split()[0], score.failures
    if hidden:
        # Names only: the source and the assertion of a hidden test stay private.
        message = "failed hidden tests: " + ", ".join(score.failed_functions)
    else:
        # The one-line summary the judge made from the exception; only a test that never
        # reported (it did not run) has none, and then the message is the grader's own words.
        first = failures[0]
        message = first.summary or re.sub(rf"^Exercise {re.escape(exercise)}:? ", "", one_line(first.message))
    # Each failing test's status was decided in the judge from its exception; the
    # exercise's, from theirs, in one place (grading.outcome.exercise_status).
    status = exercise_status(failures, score.passed_any, memory=bool(memory_note), review=exercise in review)
    if status == MEMORY and memory_note:
        message = f"{memory_note}; {message}"
    elif status == REVIEW:
        message = f"{review[exercise]}; {message}"
    if len(failures) > 1 and not hidden and status != NOT_ATTEMPTED:
        message += f" (and {len(failures) - 1} more failing case{'s' if len(failures) > 2 else ''})"
    if status == FAILED and not hidden and diagnoses.get(exercise):
        message = f"{diagnoses[exercise]} First failure: {message}"
    return status, message


# -- grades known and not ------------------------------------------------------------------
# A chapter whose every exercise row has one of these statuses has no grade the grader gave:
# nothing was handed in for it, or what was handed in waits for a person (an unplaced or
# ambiguous notebook, an unreadable one, a failure of ours). Its cells in the exports are
# left empty, not 0, and the student's feedback says so; the instructor decides.
NO_GRADE = (MISSING, REVIEW)


def graded_chapters(rows: list[Row]) -> set[tuple[str, str]]:
    """(student, chapter) for every chapter with a grade: one of its exercise rows was
    graded (or overridden), not only missing or waiting for review."""
    return {(r.student, r.chapter) for r in rows if r.exercise and r.status not in NO_GRADE}


def partial_chapters(rows: list[Row]) -> list[str]:
    """needs_review.md's lines for the chapters that some students have a grade for and
    others not: their cells are empty, not 0, for the others."""
    graded = graded_chapters(rows)
    students = sorted({r.student for r in rows})
    lines = []
    for chapter in sorted({r.chapter for r in rows if r.exercise}):
        have = [s for s in students if (s, chapter) in graded]
        others = [s for s in students if (s, chapter) not in graded]
        if have and others:
            shown = ", ".join(others[:20]) + (f" and {len(others) - 20} more" if len(others) > 20 else "")
            lines.append(f"{chapter}: graded for {len(have)} of {len(students)} submissions; no grade for {shown} "
                         "(no notebook of it, or one waiting for review): they are in no Canvas file of it (Canvas "
                         "keeps the grade it has) and their cells in gradebook_wide.csv are empty, not 0")
    return lines
