"""The points a run earns, per chapter: each test function's tally of cases, and the
``points`` section of the terminal summary.

A test function is worth its ``points`` marker (default 1); its parametrized cases share
them (partial credit), unless it is ``core`` (all or nothing): grading.scoring.earned.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from grading.outcome import ChapterPoints
from grading.scoring import earned


@dataclass
class Tally:
    """One test function's cases in this run."""

    passed: int = 0
    graded: int = 0
    skipped: int = 0
    points: float = 1
    core: bool = False


class Points:
    def __init__(self):
        self.tests: dict[tuple[str, str], Tally] = defaultdict(Tally)  # (stem, test function) -> its cases

    def record(self, stem: str, report, props: dict) -> None:
        """One report of a graded (or solution) test: ``props`` are its user properties."""
        tally = self.tests[(stem, report.nodeid.split("::")[-1].split("[")[0])]
        tally.points = props.get("points", 1)
        tally.core = props.get("core", False)
        if report.skipped:
            tally.skipped += 1
        else:
            tally.graded += 1
            tally.passed += 1 if report.passed and report.when == "call" else 0

    def by_chapter(self) -> dict[str, ChapterPoints]:
        """Points per chapter. A function whose every case was skipped is not counted;
        skipped cases of a function that ran are not counted either (its points are shared
        by the cases that ran)."""
        out: dict[str, ChapterPoints] = defaultdict(ChapterPoints)
        for (stem, _), t in self.tests.items():
            entry = out[stem]
            entry.skipped_cases += t.skipped
            if t.graded == 0:
                entry.skipped_tests += 1
                continue
            entry.earned += earned(t.points, t.passed, t.graded, t.core)
            entry.possible += t.points
        return dict(out)

    def summarise(self, tr) -> None:
        """The ``points`` section of the terminal summary (``tr``: pytest's reporter)."""
        chapters = self.by_chapter()
        if not chapters:
            return
        tr.section("points")
        total = [0.0, 0]
        for stem, p in sorted(chapters.items()):
            total[0] += p.earned
            total[1] += p.possible
            # pytest counts skipped cases; say the same number, and which whole tests it holds.
            cases, skipped = p.skipped_cases, p.skipped_tests
            note = f"  ({cases} skipped case(s), not counted" if cases else ""
            note += f"; {skipped} test(s) skipped entirely)" if skipped else (")" if cases else "")
            tr.write_line(f"{stem:<28} {p.earned:>6.1f} / {p.possible:<4}{note}")
        tr.write_line(f"{'total':<28} {total[0]:>6.1f} / {total[1]:<4}")
