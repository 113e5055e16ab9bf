"""One catalogue of student-facing texts (grading.texts) and one module of scoring policy
(grading.scoring): the texts are written nowhere else, and the rules count as the
student README and docs/instructors.md say."""

from __future__ import annotations

import signal

import pytest

from grading import scoring, texts
from grading.classroom.late import LatePolicy, lateness
from grading.layout import ROOT
from grading.outcome import Status, TestOutcome, describe_signal
from grading.wire.records import PlannedTest


def _catalogue() -> list[str]:
    """Every text of the catalogue (messages and help; the short words are status names)."""
    found = [t for t in vars(texts).values() if isinstance(t, texts.Text)]
    found += [*texts.STATUS.values(), *texts.SIGNALS.values()]
    return [s for t in found for s in (t.message, t.help) if s] + [texts.UNMATCHED]


def _fragments(text: str) -> list[str]:
    """The clauses of a text (between its ``{fields}`` and its punctuation), long enough to
    be its own words."""
    import re

    return [f.strip() for f in re.split(r"\{[^}]*\}|[,;:.()] ", text) if len(f.strip()) >= 24]


def written_outside(sources: dict[str, str]) -> list[str]:
    """``"name: fragment"`` for each catalogue text that one of ``sources`` writes itself."""
    return [f"{name}: {fragment!r}" for text in _catalogue() for fragment in _fragments(text)
            for name, source in sources.items() if fragment in source]


def test_every_student_facing_text_is_written_in_the_catalogue_only():
    sources = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
               for p in sorted((ROOT / "grading").rglob("*.py")) if p.name != "texts.py"}
    found = written_outside(sources)
    assert not found, "student-facing texts written outside grading/texts.py:\n" + "\n".join(found)


def test_the_catalogue_check_finds_a_text_written_twice():
    probe = 'ADVICE = {"timed out": "Look for an infinite loop, or training at the top level of a cell"}\n'
    assert written_outside({"probe.py": probe}) == ["probe.py: 'Look for an infinite loop'",
                                                    "probe.py: 'or training at the top level of a cell'"]


def test_every_status_a_chapter_stops_with_has_its_advice_and_a_signal_its_cause():
    for status in (Status.TIMED_OUT, Status.MEMORY, Status.CRASHED, Status.TAMPERED, Status.MISSING):
        assert texts.advice(status), status
    assert texts.no_grade(Status.REVIEW) and texts.no_grade(Status.MISSING) and not texts.advice(Status.PASSED)
    assert describe_signal(signal.SIGSEGV).startswith("SIGSEGV: a segmentation fault")
    assert describe_signal(99) == "signal 99"


def test_core_tests_are_all_or_nothing_and_the_others_share_their_points():
    assert scoring.earned(2, 3, 3, core=True) == 2 and scoring.earned(2, 2, 3, core=True) == 0
    assert scoring.earned(1, 5, 6) == pytest.approx(5 / 6) and scoring.earned(3, 0, 0) == 0


def test_an_exercise_is_scored_over_the_cases_that_ran():
    plan = [PlannedTest(f"t::core[{i}]", "t.py", "core", "1.1", 2, True, False, False) for i in range(2)]
    plan += [PlannedTest(f"t::edge[{i}]", "t.py", "edge", "1.1", 1, False, False, i == 2) for i in range(3)]
    plan += [PlannedTest("t::gpu", "t.py", "gpu", "1.1", 4, False, False, True)]
    [(label, functions)] = scoring.group_plan(plan).items()
    assert label == "1.1" and scoring.max_points(functions) == 3 and scoring.core_points(functions) == 2
    outcomes = {"t::core[0]": TestOutcome("t::core[0]", "passed"), "t::core[1]": TestOutcome("t::core[1]", "passed"),
                "t::edge[0]": TestOutcome("t::edge[0]", "passed"),
                "t::edge[1]": TestOutcome("t::edge[1]", "failed", status="failed"),
                "t::edge[2]": TestOutcome("t::edge[2]", "skipped"), "t::gpu": TestOutcome("t::gpu", "skipped")}
    score = scoring.score_exercise(functions, outcomes)
    assert (score.points, score.possible, score.failed_functions) == (2.5, 3, ["edge"])
    missing = scoring.score_exercise(functions, {})
    assert missing.points == 0 and missing.failures[0].message == "this test did not run"


def test_late_work_and_overrides_follow_the_policy():
    from datetime import datetime, timedelta, timezone

    due = datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert scoring.late_factor(0, 0.1) == 1.0 and scoring.late_factor(3, 0.1) == 0.7
    assert scoring.late_factor(9, 0.1, cap=0.5) == 0.5
    late = lateness(due + timedelta(hours=30), due, LatePolicy.parse("0.1:0.5"))
    assert (late.days, late.factor) == (2, 0.8) and "20% of the points taken" in late.note
    assert scoring.late_points(2.5, late.factor) == 2.0
    assert scoring.override_fits(3, 3) and not scoring.override_fits(3.5, 3) and not scoring.override_fits(-1, 3)
