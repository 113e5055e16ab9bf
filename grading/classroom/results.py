"""Gradescope's ``results.json`` from one student's gradebook rows, and for a run that failed.

The Gradescope front door (:mod:`grading.gradescope`) grades a submission as the class
run does (:func:`grading.classroom.grade.grade_submission`: a judge's report becomes rows)
and writes them here as Gradescope's autograder specification asks::

    {"score", "execution_time", "output", "stdout_visibility", "extra_data",
     "tests": [{"name", "number", "score", "max_score", "status", "output", "visibility"}]}

one test per exercise (``number`` "5.3"); the hidden tests of an exercise are a test of
their own with ``visibility: after_published`` whose output never names them. The words
a student reads are :mod:`grading.texts`'.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from grading import texts
from grading.classroom.rows import OVERRIDDEN, PASSED, SKIPPED, Row, exercise_order, num


def _test_output(row: Row) -> str:
    """What the student reads under one test: the status and the grader's message; for
    hidden tests only whether they passed (never their names, source or messages)."""
    if row.exercise.endswith(" hidden"):
        if row.status == PASSED:
            return "passed"
        if row.status == OVERRIDDEN:
            return f"{row.status}: {row.message}"
        return f"{row.status}: {texts.HIDDEN_FAILED.message}"
    advice = texts.advice(row.status)
    text = f"{row.status}"
    text += f": {row.message}" if row.message else ""
    return text + (f"\n{advice}" if advice else "")


def results_from_rows(rows: list[Row], seconds: float, extra: dict | None = None) -> dict:
    """Gradebook rows of one student -> Gradescope's results.json (a dict)."""
    tests = []
    for r in sorted((r for r in rows if r.exercise), key=lambda r: (exercise_order(r.exercise))):
        hidden = r.exercise.endswith(" hidden")
        number = r.exercise.split()[0]
        test = {"name": f"Exercise {number}" + (", further tests" if hidden else "") + f" ({r.chapter})",
                "number": number + (" hidden" if hidden else ""),
                "score": round(float(r.points), 3), "max_score": round(float(r.max_points), 3),
                "output": _test_output(r), "visibility": "after_published" if hidden else "visible"}
        if r.status != SKIPPED:  # a GPU-only test on a CPU container: neither passed nor failed
            test["status"] = "passed" if r.status == PASSED or (
                r.status == OVERRIDDEN and r.points >= r.max_points) else "failed"
        tests.append(test)
    graded = [r for r in rows if r.exercise]
    score, possible = sum(r.points for r in graded), sum(r.max_points for r in graded)
    lines = [f"Total: {num(score)} / {num(possible)} points."]
    lines += [f"- {r.chapter + ': ' if r.chapter else ''}{r.message}" for r in rows if not r.exercise and r.message]
    return {"score": round(score, 3), "execution_time": round(seconds, 1), "output": "\n".join(lines),
            "stdout_visibility": "hidden", "tests": tests, "extra_data": extra or {}}


# Gradescope tells no one when an autograder fails: what it shows is the submission's results.
# A failure is written where an instructor reads them and a student does not: a test of its
# own with visibility "hidden" (shown to instructors only, Gradescope's specification), beside
# the log on stdout ("Autograder Output", stdout_visibility "hidden"). run_autograder's own
# fallback, for a Python that cannot start, writes the same test.
FAILURE_TEST = "Autograder failure (instructors only)"


def failure_results(message: str, seconds: float = 0.0) -> dict:
    """A valid results.json for a run that could not grade: score 0, the failure named to
    the student, and to the instructor in a test only instructors see (:data:`FAILURE_TEST`)."""
    return {"score": 0.0, "execution_time": round(seconds, 1), "stdout_visibility": "hidden",
            "output": f"{texts.NOT_GRADED.format(failure=message)}\n{texts.NOT_GRADED.help}",
            "tests": [{"name": FAILURE_TEST, "number": "0", "score": 0.0, "max_score": 0.0, "status": "failed",
                       "output": f"The autograder failed: {message}\nThe log is under Autograder Output. Once "
                                 "the autograder is fixed, regrade the submissions that show this test.",
                       "visibility": "hidden"}],
            "extra_data": {"failure": message}}


def write_results(path: Path, results: dict) -> None:
    """``results`` as ``path`` (JSON), replaced whole: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
