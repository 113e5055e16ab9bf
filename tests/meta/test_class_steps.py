"""The class run's steps, one at a time (:mod:`grading.classroom.run`).

``python -m grading.batch`` is argv -> :class:`grading.classroom.ClassConfig` -> one call of
:func:`grading.classroom.grade_class` -> exit code, and the run is the declared list
``STEPS`` over one state. Each step is tested here alone, on a state the steps before it
filled in, without a judge: the grading step is given a grader that answers at once. The
whole run, judges included, is tested through the command (``test_batch_grading.py``,
``test_class_policy.py``, ``test_lms.py``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from grading import batch
from grading.classroom import ClassConfig, ClassResult, grade_class, pool, steps
from grading.classroom.grade import Task
from grading.classroom.rows import FAILED, NOTE, PASSED, Row
from grading.classroom.run import STEPS
from grading.classroom.state import BAD_INPUT, GRADER_CHANGED, INTERRUPTED, ClassRun, Stop
from grading.classroom.write import write
from grading.layout import EXERCISES, discover_chapters

STEM = "01_kv_memory"
ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section
"Smith, Alice",12345,S001,asmith,Section A
"""
BEFORE_GRADING = (steps.check_inputs, steps.read_policy, steps.find_chapters, steps.read_class_roster,
                  steps.gather, steps.match, steps.choose_chapters, steps.map_canvas, steps.resolve_overrides,
                  steps.late_work)


def _class(tmp_path: Path) -> Path:
    """alice hands in Chapter 1's notebook, bob a notebook no chapter claims; a stray file."""
    subs = tmp_path / "subs"
    if subs.exists():  # made by an earlier run of this test
        return subs
    (subs / "alice").mkdir(parents=True)
    shutil.copyfile(EXERCISES / f"{STEM}.ipynb", subs / "alice" / f"{STEM}.ipynb")
    (subs / "bob").mkdir()
    shutil.copyfile(EXERCISES / f"{STEM}.ipynb", subs / "bob" / "my_homework.ipynb")
    (subs / "notes.txt").write_text("not a submission")
    return subs


def _run(tmp_path: Path, **flags) -> ClassRun:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    return ClassRun(ClassConfig(_class(tmp_path), out=tmp_path / "out", **flags), scratch)


def _through(run: ClassRun, *done) -> ClassRun:
    for step in done:
        step(run)
    return run


def _stops(step, run: ClassRun, said: str) -> None:
    with pytest.raises(Stop) as stop:
        step(run)
    assert stop.value.code == BAD_INPUT and said in stop.value.message, stop.value.message


# -- argv -> config -------------------------------------------------------------------------------
def test_argv_becomes_one_frozen_config(tmp_path):
    config = batch.parse_args([str(tmp_path), "--out", "grades", "--workers", "3", "--chapters", "1",
                               "--canvas-assignments", "1=90001", "--resume"])
    assert config == dataclasses.replace(ClassConfig(tmp_path), out=Path("grades").resolve(), workers=3, chapters="1",
                                         canvas_assignments=("1=90001",), resume=True)
    assert config.out.is_absolute()
    assert config.due is None and config.late_penalty is None  # left out, not empty: --resume keeps the record
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.workers = 1


@pytest.mark.parametrize("field, value, said", [("workers", "2", "workers: expected int, got str"),
                                                ("resume", 1, "resume: expected bool, got int"),
                                                ("memory_mb", True, "memory_mb: expected int, got bool"),
                                                ("roster", "roster.csv", "roster: expected Path, got str")])
def test_a_config_field_of_another_kind_is_refused(tmp_path, field, value, said):
    with pytest.raises(TypeError, match=said):
        ClassConfig(tmp_path, **{field: value})


# -- the steps before grading ---------------------------------------------------------------------
def test_check_inputs_refuses_what_is_not_a_folder(tmp_path):
    _stops(steps.check_inputs, ClassRun(ClassConfig(tmp_path / "none"), tmp_path), "none is not a folder")
    run = ClassRun(ClassConfig(tmp_path, extra_tests=tmp_path / "hidden"), tmp_path)
    _stops(steps.check_inputs, run, "--extra-tests")
    steps.check_inputs(ClassRun(ClassConfig(tmp_path), tmp_path))


def test_read_policy_needs_due_and_penalty_together_and_resume_keeps_the_record(tmp_path):
    _stops(steps.read_policy, _run(tmp_path, due="2026-12-01T23:59+00:00"), "go together")
    first = _through(_run(tmp_path, due="2026-12-01T23:59+00:00", late_penalty="0.1"), steps.read_policy)
    assert first.policy.policy.late_penalty == "0.1:1"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "policy.json").write_text(json.dumps(first.policy.policy.to_json()))
    resumed = _through(_run(tmp_path, resume=True), steps.read_policy)
    assert resumed.policy.policy == first.policy.policy and resumed.policy.kept and not resumed.policy.changes


def test_find_chapters_takes_the_policy_s_chapters(tmp_path):
    run = _through(_run(tmp_path, chapters="1"), steps.read_policy, steps.find_chapters)
    assert run.stems == [STEM]
    _stops(steps.find_chapters, _through(_run(tmp_path, chapters="99"), steps.read_policy), "no chapters to grade")


def test_read_class_roster_reads_it_and_refuses_one_without_ids(tmp_path):
    (tmp_path / "roster.csv").write_text(ROSTER)
    run = _through(_run(tmp_path, roster=tmp_path / "roster.csv"), steps.read_policy, steps.read_class_roster)
    assert [s.id for s in run.roster] == ["12345"]
    (tmp_path / "bad.csv").write_text("name,email\nAlice,a@x\n")
    _stops(steps.read_class_roster, _through(_run(tmp_path, roster=tmp_path / "bad.csv"), steps.read_policy),
           "bad.csv")


def test_gather_lists_each_student_and_says_what_it_ignores(tmp_path, capsys):
    run = _through(_run(tmp_path), steps.gather)
    assert run.names == ["alice", "bob"] and not run.lms
    assert run.ignored == [line for line in capsys.readouterr().err.splitlines() if line.startswith("ignored")]
    assert "notes.txt" in run.ignored[0]


def test_gather_takes_an_lms_download_as_one_student(tmp_path):
    run = _run(tmp_path)
    shutil.copyfile(EXERCISES / f"{STEM}.ipynb", run.config.submissions / f"smithalice_12345_678901_{STEM}.ipynb")
    _through(run, steps.gather)
    assert "smithalice" in run.names and run.lms["smithalice"].keys == ["smithalice", "12345"]
    assert run.aliases == {"smithalice": ["smithalice", "12345"]}


def test_match_finds_each_chapter_s_notebook_and_the_roster_entry(tmp_path):
    (tmp_path / "roster.csv").write_text(ROSTER.replace("Smith, Alice", "alice"))
    run = _through(_run(tmp_path, roster=tmp_path / "roster.csv"), steps.read_policy, steps.read_class_roster,
                   steps.gather, steps.match)
    assert list(run.subs["alice"].notebooks) == [STEM] and run.subs["bob"].unmatched
    assert run.matched["alice"].id == "12345" and "submission bob is not on the roster" in run.roster_problems


def test_choose_chapters_keeps_those_handed_in_unless_chosen(tmp_path):
    run = _through(_run(tmp_path), steps.read_policy, steps.find_chapters, steps.gather, steps.match,
                   steps.choose_chapters)
    assert run.stems == [STEM] and "the chapters the submissions hold notebooks of" in run.chapters_line
    chosen = _through(_run(tmp_path, chapters="1,3"), steps.read_policy, steps.find_chapters, steps.gather,
                      steps.match, steps.choose_chapters)
    assert len(chosen.stems) == 2 and "chosen with --chapters" in chosen.chapters_line
    shutil.rmtree(tmp_path / "subs" / "alice")
    shutil.rmtree(tmp_path / "subs" / "bob")
    empty = _through(_run(tmp_path), steps.read_policy, steps.find_chapters, steps.gather, steps.match,
                     steps.choose_chapters)
    assert len(empty.stems) == len(discover_chapters()) and "every chapter" in empty.chapters_line


def test_map_canvas_refuses_assignments_without_a_canvas_roster(tmp_path):
    run = _through(_run(tmp_path, canvas_assignments=("1=90001",)), steps.read_policy, steps.find_chapters,
                   steps.gather, steps.match, steps.choose_chapters)
    _stops(steps.map_canvas, run, "--canvas-assignments needs --roster")
    plain = _through(_run(tmp_path), *BEFORE_GRADING[:-2], steps.map_canvas)
    assert plain.columns == {} and plain.unmapped == []


def test_resolve_overrides_names_each_submission_or_stops(tmp_path):
    sheet = tmp_path / "overrides.csv"
    sheet.write_text("student,exercise,points,reason\nALICE,1.1,1,regraded by hand\n")
    run = _through(_run(tmp_path, overrides=sheet), *BEFORE_GRADING[:-2], steps.resolve_overrides)
    assert [(o.student, o.exercise) for o in run.overrides] == [("alice", "1.1")]
    sheet.write_text("student,exercise,points,reason\ncarol,1.1,1,regraded by hand\n")
    _stops(steps.resolve_overrides, _through(_run(tmp_path, overrides=sheet), *BEFORE_GRADING[:-2]),
           "'carol' names no student")


def test_late_work_gives_each_student_their_lateness(tmp_path):
    sheet = tmp_path / "submitted.csv"
    sheet.write_text("student,submitted\nalice,2026-12-03T10:00:00+00:00\nbob,2026-11-30T10:00:00+00:00\n")
    run = _through(_run(tmp_path, due="2026-12-01T23:59:00+00:00", late_penalty="0.1:0.5", submitted=sheet),
                   *BEFORE_GRADING)
    assert run.lateness["alice"].days == 2 and run.lateness["bob"].days == 0
    sheet.write_text("student,submitted\ncarol,2026-12-03T10:00:00+00:00\n")
    _stops(steps.late_work, _through(_run(tmp_path, due="2026-12-01T23:59:00+00:00", late_penalty="0.1",
                                          submitted=sheet), *BEFORE_GRADING[:-1]), "submitted.csv, line 2")


def test_record_policy_saves_it_or_stops_on_a_change(tmp_path, capsys):
    _through(_run(tmp_path, due="2026-12-01T23:59:00+00:00", late_penalty="0.1"), *BEFORE_GRADING,
             steps.record_policy)
    record = tmp_path / "out" / "policy.json"
    saved = record.read_text()
    changed = _through(_run(tmp_path, resume=True, due="2026-12-05T23:59:00+00:00"), *BEFORE_GRADING)
    _stops(steps.record_policy, changed, "STOPPED before grading")
    assert record.read_text() == saved and "policy change: --due" in capsys.readouterr().err
    applied = _through(_run(tmp_path, resume=True, due="2026-12-05T23:59:00+00:00", policy_change=True),
                       *BEFORE_GRADING, steps.record_policy)
    assert "2026-12-05" in record.read_text() and applied.policy_lines[0].startswith("policy change: --due")


# -- the steps that grade and write ---------------------------------------------------------------
class AnsweringGrader:
    """A grader that answers each task at once: alice's chapter passes, everyone else's fails."""

    def __init__(self, interrupt: bool = False):
        self.compromised, self.interrupt, self.planned = "", interrupt, False

    def collect_plan(self):
        self.planned = True

    def grade_safely(self, task: Task) -> list[Row]:
        if self.interrupt:
            raise KeyboardInterrupt
        status = PASSED if task.student == "alice" else FAILED
        return [Row(task.student, task.chapter.stem, "1.1", float(status == PASSED), 1.0, status, "")]


def _ready(tmp_path: Path, **flags) -> ClassRun:
    return _through(_run(tmp_path, quiet=True, **flags), *BEFORE_GRADING, steps.record_policy, pool.open_gradebook)


def test_open_gradebook_makes_the_grader_and_the_book_and_says_the_chapters(tmp_path, capsys):
    run = _ready(tmp_path)
    assert run.grader.chapters == run.chapters and run.grader.baseline
    assert run.book.path == tmp_path / "out" / "gradebook.csv"
    assert run.chapters_line in capsys.readouterr().err  # said in every run, quiet too


def test_list_tasks_lists_each_chapter_not_done_and_the_submission_s_own_rows(tmp_path):
    run = _through(_ready(tmp_path), pool.list_tasks)
    assert sorted((t.student, t.chapter.stem) for t in run.tasks) == [("alice", STEM), ("bob", STEM)]
    assert any("my_homework.ipynb" in r.message for r in run.book.student_rows("bob"))


def test_grade_adds_each_chapter_s_rows_and_writes_feedback(tmp_path):
    run = _through(_ready(tmp_path), pool.list_tasks)
    run.grader = AnsweringGrader()
    pool.grade(run)
    assert run.grader.planned and (tmp_path / "out" / "feedback" / "alice.md").exists()
    assert [r.status for r in run.book.student_rows("alice") if r.exercise] == [PASSED]


def test_grade_stops_with_130_when_interrupted(tmp_path):
    run = _through(_ready(tmp_path), pool.list_tasks)
    run.grader = AnsweringGrader(interrupt=True)
    with pytest.raises(Stop) as stop:
        pool.grade(run)
    assert stop.value.code == INTERRUPTED and "--resume" in stop.value.message


def test_write_writes_every_file_and_3_when_the_grader_changed(tmp_path):
    run = _through(_ready(tmp_path), pool.list_tasks)
    run.grader = AnsweringGrader()
    _through(run, pool.grade, write)
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} >= {"gradebook.csv", "gradebook_wide.csv", "needs_review.md",
                                               "policy.json", "feedback"}
    assert run.code == 0 and "notes.txt" in (out / "needs_review.md").read_text()
    assert any(r.status == NOTE or r.exercise for r in run.final)
    run.grader.compromised = "tests/test_01_kv_memory.py"
    write(run)
    assert run.code == GRADER_CHANGED


# -- the run ------------------------------------------------------------------------------------------
def test_the_declared_steps_run_in_order_until_one_stops(tmp_path, capsys):
    seen = []

    def step(name, stop=False):
        def run_step(run):
            seen.append(name)
            assert run.scratch.is_dir()
            if stop:
                raise Stop(BAD_INPUT, f"{name} said no")
        return run_step

    result = grade_class(ClassConfig(tmp_path, out=tmp_path / "out"), (step("a"), step("b", True), step("c")))
    assert result == ClassResult(BAD_INPUT, tmp_path / "out") and seen == ["a", "b"]
    assert "b said no" in capsys.readouterr().err
    assert steps.check_inputs is STEPS[0] and write is STEPS[-1] and steps.record_policy in STEPS
    assert STEPS.index(steps.record_policy) < STEPS.index(pool.open_gradebook)  # nothing written before it


def test_a_refused_run_writes_nothing(tmp_path):
    config = ClassConfig(_class(tmp_path), out=tmp_path / "out", due="2026-12-01T23:59:00+00:00")
    assert grade_class(config).code == BAD_INPUT and not (tmp_path / "out").exists()
    assert batch.main([str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--chapters", "99"]) == BAD_INPUT
