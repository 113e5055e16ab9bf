"""One judge's report to its front door: every line it wrote, read strictly into one object.

A judge (:mod:`grading.judge.main`) writes one record per line on a pipe of its own
(:mod:`grading.wire.records`: its plan, each test's outcome, what loading the notebook
found, the diagnoses, what voids the chapter, how it ended). :func:`read_report` reads the
lines :mod:`grading.proc.judges` kept into a :class:`JudgeReport`, and every front door
(the class's rows, Gradescope's results, nbgrader's cell) formats that object and
nothing else: no front door reads a field by name.

A line that is not a record of its kind is never guessed at: it is named in
``malformed``, and the front door puts the chapter up for review. A stream no honest
judge writes (a record after the exit record, a test reported twice) is named in
``stream_problems``, and voids the chapter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grading.outcome import TestOutcome
from grading.wire.frames import WireError
from grading.wire.records import CollectError, Diagnoses, ExitRecord, LoadSummary, Plan, SetupRecord, Tamper

# The records a judge writes, by the ``kind`` of their line.
RECORDS = {cls.KIND: cls for cls in (Plan, CollectError, SetupRecord, TestOutcome, LoadSummary, Diagnoses, Tamper,
                                     ExitRecord)}
MALFORMED_KEPT = 20  # lines named in ``malformed``; the rest are left out
AFTER_EXIT = "outcome lines arrived after the grading process said it was done"


@dataclass
class JudgeReport:
    """Everything one judge reported, typed.

    ``plan``: the tests it collected (None: it wrote no plan); ``collect_errors``: test
    files that did not import; ``setup_seconds``: what loading a model took before the
    first test; ``results``: each test's outcome, in the order they ran; ``load``,
    ``diagnoses``, ``tamper``: what its end found; ``exit``: how it ended (read from its
    exit record, or, when it wrote none, how the process ended: ``crashed``). The
    process's side, which only its parent knows: ``timed_out``, ``output`` (the last of
    what it printed, for the instructor) and ``output_bytes``."""

    plan: Plan | None = None
    collect_errors: list[CollectError] = field(default_factory=list)
    setup_seconds: float = 0.0
    results: list[TestOutcome] = field(default_factory=list)
    load: LoadSummary = field(default_factory=LoadSummary)
    diagnoses: Diagnoses = field(default_factory=Diagnoses)
    tamper: Tamper = field(default_factory=Tamper)
    exit: ExitRecord = field(default_factory=lambda: ExitRecord("crashed"))
    malformed: list[str] = field(default_factory=list)
    stream_problems: list[str] = field(default_factory=list)
    timed_out: bool = False
    output: str = ""
    output_bytes: int = 0

    @property
    def finished(self) -> bool:
        return self.exit.status == "finished"

    def outcomes(self) -> dict[str, TestOutcome]:
        """{nodeid: outcome} of every test reported."""
        return {o.nodeid: o for o in self.results}

    def unplanned(self, planned: set[str]) -> list[str]:
        """The tests reported that ``planned`` (the front door's plan) does not hold."""
        return [o.nodeid for o in self.results if o.nodeid not in planned]


def _record(line: dict):
    """The record one line holds. Raises WireError for an unknown kind or a bad record."""
    kind = line.get("kind")
    cls = RECORDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise WireError(f"a line of no known kind ({str(kind)[:40]!r})")
    fields = {k: v for k, v in line.items() if k != "kind"}
    try:
        return cls.from_json(fields)
    except ValueError as exc:  # TestOutcome's refusal
        raise WireError(str(exc)) from None


def _add(report: JudgeReport, record, seen: set[str]) -> None:
    """One record into the report; the first of a kind that comes once wins."""
    if isinstance(record, TestOutcome):
        if record.nodeid in seen:
            report.stream_problems.append(f"a test was reported twice ({record.nodeid[:80]}): the grading process "
                                          "was forked or its results were written by the notebook")
        seen.add(record.nodeid)
        report.results.append(record)
    elif isinstance(record, CollectError):
        report.collect_errors.append(record)
    elif isinstance(record, SetupRecord):
        report.setup_seconds += record.seconds
    elif isinstance(record, Plan):
        report.plan = report.plan or record
    elif isinstance(record, LoadSummary):
        report.load = record
    elif isinstance(record, Diagnoses):
        report.diagnoses = record
    elif isinstance(record, Tamper):
        report.tamper = Tamper(report.tamper.violations + record.violations)


def read_report(lines: list[dict], crashed: ExitRecord) -> JudgeReport:
    """The report in a judge's ``lines`` (JSON objects, in the order written). Its exit is
    its last line's exit record; without one (the judge was killed, or its record is
    broken), ``crashed``, which its parent made from how the process ended."""
    report, seen, ended = JudgeReport(exit=crashed), set(), False
    for n, line in enumerate(lines):
        if ended:  # the exit record must be the last line: what follows it is no honest judge's
            report.stream_problems.append(AFTER_EXIT)
            report.exit = crashed
            break
        try:
            record = _record(line)
        except WireError as exc:
            if len(report.malformed) < MALFORMED_KEPT:
                report.malformed.append(f"line {n + 1}: {exc}")
            continue
        if isinstance(record, ExitRecord):
            report.exit, ended = record, True
        else:
            _add(report, record, seen)
    return report
