"""One typed report from judge to front door (grading.wire.report).

Every line a judge writes is a strict record of grading.wire.records (or a
grading.outcome.TestOutcome): unknown or missing fields are refused. The parent reads
them into one JudgeReport, and no front door reads a field of it by string key: the
check below reads the front doors' source (with ``ast``) and fails on a probe that does.
"""

from __future__ import annotations

import ast
from dataclasses import fields

import pytest

from grading.layout import ROOT
from grading.outcome import TestOutcome
from grading.wire import WireError
from grading.wire.records import (
    CellProblem,
    CollectError,
    Diagnoses,
    ExitRecord,
    Found,
    LoadSummary,
    Plan,
    PlannedTest,
    SetupRecord,
    Tamper,
    line,
)
from grading.wire.report import RECORDS, read_report

PLANNED = PlannedTest("tests/test_01_x.py::test_a[0]", "tests/test_01_x.py", "test_a", "1.1", 2, True, False, False)
SAMPLES = [Plan((PLANNED,), ("an error",)), CollectError("Traceback...", "ImportError: no"),
           SetupRecord("model", 1.5), TestOutcome(PLANNED.nodeid, "failed", "failed", "f(1) is wrong", "", "", "call"),
           LoadSummary((CellProblem.of(3, "error", "boom", True),), 12),
           Diagnoses((Found("1.1", "b", "h", "§1", "m"),)), Tamper(("calls torch's own",)),
           ExitRecord("finished", pytest_exit=0)]
CRASHED = ExitRecord("crashed", returncode=-9, signal=9)


def test_every_kind_of_line_is_a_record_that_reads_back_as_itself():
    assert {type(s).KIND for s in SAMPLES} == set(RECORDS)
    for sample in SAMPLES:
        data = line(sample)
        assert RECORDS[data["kind"]].from_json({k: v for k, v in data.items() if k != "kind"}) == sample


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: type(s).KIND)
def test_a_record_with_a_field_too_many_or_too_few_is_refused(sample):
    data = sample.to_json()
    first = fields(type(sample))[0].name
    for wrong in ({**data, "extra": 1}, {k: v for k, v in data.items() if k != first}, []):
        with pytest.raises((WireError, ValueError)):
            type(sample).from_json(wrong)


def test_a_planned_test_whose_fields_are_not_of_their_types_is_refused():
    for field, value in (("points", "2"), ("points", True), ("core", 1), ("exercise", 1.1), ("nodeid", None)):
        with pytest.raises(WireError):
            PlannedTest.from_json({**PLANNED.to_json(), field: value})


def test_the_report_is_typed_and_says_what_no_honest_judge_writes():
    report = read_report([line(s) for s in SAMPLES], CRASHED)
    assert report.finished and report.plan.tests == (PLANNED,) and report.setup_seconds == 1.5
    assert report.outcomes()[PLANNED.nodeid].summary == "f(1) is wrong" and report.load.of("error")[0].memory
    assert report.tamper.violations == ("calls torch's own",) and not report.malformed and not report.stream_problems
    broken = read_report([{"kind": "test", "nodeid": "x"}, {"kind": "spoof"}, line(SAMPLES[3]), line(SAMPLES[3]),
                          line(SAMPLES[-1]), line(SAMPLES[0])], CRASHED)
    assert [m.split(":")[0] for m in broken.malformed] == ["line 1", "line 2"], broken.malformed
    assert "reported twice" in broken.stream_problems[0] and "after" in broken.stream_problems[1]
    assert broken.exit == CRASHED  # the exit record was not the last line
    assert read_report([line(SAMPLES[0])], CRASHED).exit == CRASHED


# -- no front door reads a report field by string key ---------------------------------------------------
# The modules a JudgeReport (or its plan) reaches: the class run's rows, Gradescope's results,
# nbgrader's points, the scoring they share. (The gradebook reads its own CSV files by their
# header; it never sees a report.)
FRONT_DOORS = ["grading/classroom/grade.py", "grading/classroom/rows.py", "grading/classroom/results.py",
               "grading/gradescope.py", "grading/nbgrader.py", "grading/scoring.py"]
# Every field name of every record a judge writes, and the line's own "kind".
REPORT_KEYS = {"kind"} | {f.name for cls in [*RECORDS.values(), PlannedTest, CellProblem, Found] for f in fields(cls)}


def string_key_reads(source: str) -> list[str]:
    """Where ``source`` reads a report field by string: ``x["nodeid"]``, ``x.get("tests")``,
    or a judge's raw lines by kind (``result.of("plan")``, ``result.lines``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice.value if isinstance(node.slice, ast.Constant) else None
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            arg = node.args[0]
            if node.func.attr == "of" and isinstance(arg, ast.Constant) and arg.value in RECORDS:
                found.append(f"line {node.lineno}: .of({arg.value!r})")
            elif node.func.attr == "get" and isinstance(arg, ast.Constant):
                key = arg.value
        elif isinstance(node, ast.Attribute) and node.attr == "lines" and isinstance(node.ctx, ast.Load):
            found.append(f"line {node.lineno}: .lines")
        if isinstance(key, str) and key in REPORT_KEYS:
            found.append(f"line {node.lineno}: [{key!r}]")
    return sorted(found, key=lambda f: (int(f.split(":")[0].split()[1]), f))


def test_the_check_finds_a_front_door_that_reads_a_report_by_string():
    probe = ('def rows(r):\n    tests = r.of("plan")[0]["tests"]\n    load = r.lines[-1]\n'
             '    return [t["nodeid"] for t in tests], load.get("problems")\n')
    assert [f.split(": ")[1] for f in string_key_reads(probe)] == [
        ".of('plan')", "['tests']", ".lines", "['nodeid']", "['problems']"], string_key_reads(probe)
    assert string_key_reads('def ok(report):\n    return [t.nodeid for t in report.plan.tests]\n') == []


@pytest.mark.parametrize("path", FRONT_DOORS)
def test_no_front_door_reads_a_report_field_by_string_key(path):
    found = string_key_reads((ROOT / path).read_text(encoding="utf-8"))
    assert not found, f"{path} reads the judge's report by string key (use grading.wire.report.JudgeReport):\n" + \
        "\n".join(found)
