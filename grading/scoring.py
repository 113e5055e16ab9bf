"""Scoring policy: how test outcomes become points, in one place for every front door.

The rules (docs/instructors.md, "Points and partial credit" and "Late work"; the student
README's "Points" section tells a student the same, and ``tests/meta/test_release.py``
checks its worked example against :func:`earned` and :func:`score_exercise`):

1. A test *function* is worth its ``points`` mark (default 1). Its parametrized cases
   share them equally (partial credit), unless it is ``core`` (``@pytest.mark.core``, the
   cases an exercise exists to teach): then it earns all of its points when every case
   passed and none otherwise. Skipped cases (a GPU-only case on a CPU) are not counted;
   a function whose every case was skipped earns and costs nothing.
2. An exercise is worth the sum of its counted functions; its hidden tests are an
   exercise of their own (``1.2 hidden``).
3. A late submission's points are multiplied by ``1 - min(cap, per_day * started days)``
   (:func:`late_factor`, :func:`late_points`).
4. An instructor's override sets an exercise's points after the penalty, so it wins; it
   may not give more than the exercise is worth (:func:`override_fits`).

The class run's rows (:mod:`grading.classroom.rows`), its late work and overrides, the
Gradescope results, nbgrader's cells and the release's own terminal summary
(:mod:`grading.judge.points`) all count through these functions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from grading.outcome import TestOutcome
from grading.wire.records import PlannedTest


def earned(points: float, passed: int, graded: int, core: bool = False) -> float:
    """What a test function earns: its points shared equally by its graded cases
    (partial credit), or, for a ``core`` function, all of its points when every graded
    case passed and none otherwise. A function whose every case was skipped earns nothing."""
    if not graded:
        return 0.0
    if core:
        return float(points) if passed == graded else 0.0
    return points * passed / graded


@dataclass
class TestFunction:
    """One test function of a plan: its points, whether it is core, and its cases (their
    node ids, and whether each is skipped in this environment)."""

    __test__ = False  # not a pytest test class, whatever its name

    name: str
    points: float
    core: bool
    nodeids: list[str] = field(default_factory=list)
    skip: list[bool] = field(default_factory=list)

    @property
    def counted(self) -> bool:
        """Does it count at all (not every case skipped here)?"""
        return not all(self.skip)


def group_plan(tests: list[PlannedTest]) -> dict[str, list[TestFunction]]:
    """A chapter's plan by exercise: ``{"1.2": [TestFunction, ...], "1.2 hidden": ...}``,
    in the plan's order; a test with no exercise marker is under ``other``."""
    groups: dict[str, dict[tuple[str, str], TestFunction]] = defaultdict(dict)
    for t in tests:
        label = (t.exercise or "other") + (" hidden" if t.hidden else "")
        fn = groups[label].setdefault((t.path, t.function), TestFunction(t.function, t.points, t.core))
        fn.nodeids.append(t.nodeid)
        fn.skip.append(t.skip)
    return {label: list(fns.values()) for label, fns in groups.items()}


def max_points(functions: list[TestFunction]) -> float:
    """What an exercise is worth here: its functions that are not skipped entirely."""
    return sum(f.points for f in functions if f.counted)


def core_points(functions: list[TestFunction]) -> float:
    """The part of :func:`max_points` that the exercise's core tests carry, all or nothing."""
    return sum(f.points for f in functions if f.core and f.counted)


@dataclass
class ExerciseScore:
    """An exercise's points from its tests' outcomes: ``points`` of ``possible`` (0 of 0
    when every case was skipped), the failed cases in order (a case that never reported
    is a failure that "did not run"), the functions they belong to, and whether any case
    passed."""

    points: float = 0.0
    possible: float = 0.0
    failures: list[TestOutcome] = field(default_factory=list)
    failed_functions: list[str] = field(default_factory=list)
    passed_any: bool = False


def score_exercise(functions: list[TestFunction], outcomes: dict[str, TestOutcome]) -> ExerciseScore:
    """An exercise's :class:`ExerciseScore`: each function's cases counted by :func:`earned`."""
    score = ExerciseScore()
    for fn in functions:
        graded = passed = 0
        for nodeid in fn.nodeids:
            o = outcomes.get(nodeid) or TestOutcome(nodeid, "failed", message="this test did not run")
            if o.outcome == "skipped":
                continue
            graded += 1
            if o.passed:
                passed += 1
                continue
            score.failures.append(o)
            if fn.name not in score.failed_functions:
                score.failed_functions.append(fn.name)
        if graded:
            score.points += earned(fn.points, passed, graded, fn.core)
            score.possible += fn.points
            score.passed_any = score.passed_any or passed > 0
    return score


# -- late work and overrides ----------------------------------------------------------------------
def late_factor(days: int, per_day: float, cap: float = 1.0) -> float:
    """What a submission ``days`` started days late keeps of its points: ``1 - min(cap,
    per_day * days)`` (1.0 on time)."""
    return round(1.0 - min(cap, per_day * days), 6) if days > 0 else 1.0


def late_points(points: float, factor: float) -> float:
    """A graded exercise's points after the late penalty."""
    return round(points * factor, 6)


def override_fits(points: float, max_points: float) -> bool:
    """May an override give an exercise of ``max_points`` these ``points``? (0 to its worth.)"""
    return 0 <= points <= max_points
