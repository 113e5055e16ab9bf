"""What a student reads when a test fails: one message, in the notebook's terms.

pytest's traceback is for the grader's authors. A student reads the first line of the
check that failed, where in their notebook it was raised, the cell that did not run, or
the exercise their answer depends on, graded first; in the words of :mod:`grading.texts`.
"""

from __future__ import annotations

import traceback

from grading import texts
from grading.compare import GradingFailure
from grading.judge import dependencies, substitute
from grading.judge.variant import Variant, chapter_stem
from grading.layout import EXERCISE_ID, exercise_of
from grading.notebook.loader import CellDidNotRun


def brief_failure(excinfo, style=None) -> str:
    """A grader's failure as pytest records it before :func:`pytest_runtest_makereport`
    puts the student's message in its place (or drops it: a catalogue bug's failure is
    its rejection). pytest's own report parses the source of every frame of the
    traceback, 30-100 ms a failure through the judge's proxies; the proof of the
    catalogue fails thousands of times. Where the full traceback is shown, it is made there."""
    return f"{type(excinfo.value).__name__}: {str(excinfo.value)[:2000]}"


def variant_of(item) -> Variant | None:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "nb" in callspec.params:
        return callspec.params["nb"]
    return Variant("graded") if "nb" in getattr(item, "fixturenames", ()) else None



def raised_where(exc: BaseException) -> str:
    """``raised in notebook cell 4, line 7: x = y / z``: the innermost notebook line (as
    the contestant saw it, for an exception that came from there)."""
    where = getattr(exc, "grading_where", "")
    if where:
        return where
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if "#cell-" in frame.filename:
            cell = frame.filename.rsplit("#cell-", 1)[1]
            return f"raised in notebook cell {cell}, line {frame.lineno}: {(frame.line or '').strip()}"
    return ""


def cell_did_not_run(item, exc: BaseException) -> CellDidNotRun | None:
    """The load error behind a failure: a name the test needs is missing because its
    cell did not run. The grader asked for it (``CellDidNotRun``, possibly chained), or
    the student's code did (a ``NameError`` in a notebook whose cells did not all run)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, CellDidNotRun):
            return exc
        if isinstance(exc, NameError) and getattr(exc, "name", None):
            notebook = getattr(item, "funcargs", {}).get("nb")
            errors = getattr(notebook, "errors", None) if notebook is not None else None
            if errors:
                return CellDidNotRun(exc.name, notebook.name, errors)
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def load_error_message(label: str, error: CellDidNotRun, first: bool) -> str:
    """One paragraph for the first test of an exercise that a broken cell stops, one line
    for every later one: a typo is reported once, not once per test, and without internals."""
    if not first:
        return texts.CELL_REPORTED.format(label=label, cells=", ".join(map(str, error.cells)))
    lines = [texts.CELL_DID_NOT_RUN.format(label=label, name=error.name, notebook=error.notebook)]
    lines += [f"  cell {p.cell}: {p.message}" for p in error.problems]
    lines.append(f"  {texts.CELL_DID_NOT_RUN.help}")
    return "\n".join(lines)


def student_message(item, excinfo) -> str:
    """What the student sees instead of a traceback (the terminal's long form)."""
    exc = excinfo.value
    exercise = exercise_of(item)
    label = f"Exercise {exercise}" if exercise else item.name
    load_error = cell_did_not_run(item, exc)
    if load_error is not None:
        reported = item.config._grading.load_errors_reported
        key = (chapter_stem(item.path), exercise, load_error.cells)
        first = key not in reported
        reported.add(key)
        return load_error_message(label, load_error, first)
    if isinstance(exc, NotImplementedError):
        m = EXERCISE_ID.search(str(exc))
        return texts.NOT_IMPLEMENTED.format(label=f"Exercise {m.group(1)}" if m else label, error=exc)
    label = dependency_first(item, exercise) + label
    if isinstance(exc, GradingFailure):
        return f"{label}: {exc}"
    if isinstance(exc, AssertionError):
        return f"{label}: {exc or 'assertion failed'}\n{excinfo.getrepr(style='short')}"
    where = raised_where(exc)
    if not where:
        return f"{label}: {type(exc).__name__}: {exc}\n{excinfo.getrepr(style='short')}"
    return f"{label}: {type(exc).__name__}: {exc}\n  {where}"


def dependency_first(item, exercise: str | None) -> str:
    """Where a chapter is graded as a whole (the student edition, which ships no
    references to swap in), an exercise calls the student's own functions of the others;
    a failure says first which of them fails its own tests."""
    stem = chapter_stem(item.path)
    if exercise is None or stem is None or substitute.chapter_table(stem) is not None:
        return ""
    state = item.config._grading
    failed = {e for s, e in state.exercises_failed if s == stem}
    ran = {e for s, e in state.exercises_ran if s == stem}
    notebook = getattr(item, "funcargs", {}).get("nb")
    called = set(getattr(notebook, "called", ()))
    for other in getattr(notebook, "variants", {}).values():
        called |= other.called
    return dependencies.dependency_note(state.notebook_dir() / f"{stem}.ipynb", stem, exercise, failed, ran, called)
