"""Grade a folder of submissions: ``python -m grading.batch SUBMISSIONS --out DIR``.

Each entry of SUBMISSIONS is one student: a folder of notebooks, or a ``.zip`` of
one. Notebooks are matched to chapters by name (renamed copies are fine; what
cannot be matched is reported). Every student and chapter is graded in a child
process of its own (:mod:`grading.proc.judges`), several at a time, under a wall-clock
timeout and a memory limit. The results:

  DIR/gradebook.csv      student, chapter, exercise, points, max_points, status, message
                         (appended as each chapter finishes; sorted at the end)
  DIR/gradebook_wide.csv one row per student: id, name, email (--roster), total, one column per exercise
  DIR/gradebook_canvas.csv  the same points in Canvas's gradebook import layout (ids from --roster;
                         a chapter's column names the course's assignment it updates, --canvas-assignments),
                         rows only for students with a grade: one file per chapter (gradebook_canvas_NN_topic.csv)
                         where the students graded differ between chapters
  DIR/policy.json        the policy the grades were given by, for --resume
  DIR/feedback/<student>.md   what each student reads
  DIR/needs_review.md    timeouts, crashes, memory limits, tampering, unreadable notebooks,
                         notebooks no chapter claimed, roster and overrides problems

``--overrides FILE`` (student, exercise, points, reason) corrects grades on every run;
``--resume`` regrades a student whose files changed (content hashes); ``--due`` and
``--late-penalty`` take points from late work (:mod:`grading.classroom.late`). SUBMISSIONS may be
an LMS's bulk download as it comes (:mod:`grading.classroom.lms`). Without ``--chapters``, the
chapters graded are those the submissions hold notebooks of.

The run's policy (due date, penalty, overrides, submission times, Canvas assignments,
chapters) is recorded in ``DIR/policy.json`` (:mod:`grading.classroom.policy`): ``--resume``
takes every such flag it is not given from there, and stops before grading (exit 2), saying
what would change and for whom, when one is given with another value, unless
``--policy-change`` confirms it.

Statuses: passed, failed, not attempted, error, timed out, memory limit, crashed,
tampered, needs review, missing, skipped (a GPU test without a GPU), note.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from grading.classroom import gradebook as gb
from grading.classroom import policy
from grading.classroom.exports import (canvas_columns, match_roster, read_canvas_assignments, read_canvas_map,
    read_roster, unmapped_chapters, write_canvas, write_wide)
from grading.classroom.rows import NOTE, REVIEW, Row, partial_chapters
from grading.proc import sandbox
from grading.layout import GRADES, discover_chapters
from grading.classroom.matching import (list_students, name_problem, submission_digest)
from grading.classroom.sheets import StudentKeys
from grading.classroom.grade import (GradeConfig, Grader, Task, fingerprint, hidden_tests, open_submission,
                                     os_error_text,
                                     submission_rows, submission_tasks)
from grading.proc.judges import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, kill_all
from grading.outcome import FOR_REVIEW



# -- the whole run --------------------------------------------------------------------------
class Progress:
    """One line on stderr: a bar, the count and the time left (from the mean so far)."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.done, self.quiet = total, 0, quiet
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()

    def step(self, label: str):
        self.done += 1
        if self.quiet:
            return
        elapsed = time.monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done)
        eta = f"{int(left // 60)} min {int(left % 60):02d} s left"
        if self.done == self.total:
            eta = f"done in {elapsed:.0f} s"
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}  {eta}  ({label})"
        if self.tty:
            sys.stderr.write("\r\033[K" + line + ("\n" if self.done == self.total else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m grading.batch",
        description="Grade a folder of student submissions (each a folder of notebooks or a .zip of one): "
                    "writes gradebook.csv, one Markdown feedback file per student and needs_review.md.")
    p.add_argument("submissions", type=Path, help="folder with one entry per student (a folder or a .zip)")
    p.add_argument("--out", type=Path, default=GRADES,
                   help="output folder (default: _build/grades)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="chapters graded at the same time, each in its own process (default: all cores)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"wall-clock seconds per student and chapter (default {DEFAULT_TIMEOUT_S})")
    p.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB,
                   help="memory limit per student and chapter in MB (RLIMIT_DATA per process; 0: none; "
                        f"default {DEFAULT_MEMORY_MB})")
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP/BLAS threads per child (default 1)")
    p.add_argument("--cuda-devices", default="",
                   help="GPUs the children may see, shared round-robin, e.g. '0,1' (default: none, CPU only)")
    p.add_argument("--resume", action="store_true",
                   help="keep what an earlier run in --out finished; grade the rest, and grade again every "
                        "student whose files changed since (content hashes). The policy flags left out (--due, "
                        "--late-penalty, --overrides, --submitted, --canvas-assignments, --chapters) keep the "
                        "values recorded in --out/policy.json; one given with another value stops the run, "
                        "saying what it changes for whom, unless --policy-change")
    p.add_argument("--policy-change", action="store_true",
                   help="with --resume: apply the policy flags given although they differ from the recorded "
                        "ones (the run says what changes and for whom)")
    p.add_argument("--roster", type=Path, default=None,
                   help="CSV with a header naming a student id column and optionally name, email, folder: "
                        "maps submission names to ids in gradebook_wide.csv (Canvas's gradebook export works "
                        "as it is)")
    p.add_argument("--canvas-assignments", action="append", default=None, metavar="CHAPTER=ASSIGNMENT|FILE",
                   help="the course's assignment a chapter's grades update in gradebook_canvas.csv, named as in "
                        "--roster (Canvas's export) by id, column name or exact title, e.g. 1=90001; or a CSV "
                        "file with the header chapter,assignment; may be given several times")
    p.add_argument("--overrides", type=Path, default=None,
                   help="CSV with the header student,exercise,points,reason: an instructor's corrections, "
                        "applied on every run and recorded in the gradebook and the feedback")
    p.add_argument("--extra-tests", type=Path, default=None,
                   help="folder of hidden test files test_NN_*.py: graded and in the gradebook, "
                        "never shown in feedback")
    p.add_argument("--chapters", default=None,
                   help="grade only these chapters, e.g. '01_kv_memory' or '1,3' (default: every chapter "
                        "that at least one submission holds a notebook of)")
    p.add_argument("--due", default=None, help="the due date, an ISO time (2026-12-01T23:59, or with an offset: "
                                             "...+01:00); work handed in later loses --late-penalty")
    p.add_argument("--late-penalty", default=None,
                   help="FRACTION[:CAP]: the fraction of the points taken per started day after --due, at most "
                        "CAP (default 1), e.g. 0.1:0.5 (needs --due; '' with --due '': no penalty)")
    p.add_argument("--submitted", type=Path, default=None,
                   help="CSV with the header student,submitted (ISO times): when each submission was handed in, "
                        "for --due (an LMS download's names give Blackboard's attempt time and Canvas's late mark)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def lateness_of(args, students: list[str], lms_info: dict, submitted: dict, matched: dict) -> dict:
    """{student: grading.classroom.late.Lateness} for the run's --due and --late-penalty: the time from
    --submitted (by the submission's name or its roster id), else from the LMS's file names."""
    from grading.classroom import late

    if not args.due:
        return {}
    due = late.parse_time(args.due, "--due")
    policy = late.LatePolicy.parse(args.late_penalty)
    out = {}
    for s in students:
        who = matched.get(s)
        when = submitted.get(s) or (submitted.get(who.id) if who else None)
        info = lms_info.get(s)
        if when is None and info is not None and info.attempt is not None:
            when = info.attempt.astimezone()  # Blackboard's attempt time, in this machine's zone
        out[s] = late.lateness(when, due, policy, marked_late=bool(info and info.late))
    return out


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.submissions.is_dir():
        print(f"{args.submissions} is not a folder", file=sys.stderr)
        return 2
    if args.extra_tests is not None:
        args.extra_tests = args.extra_tests.resolve()
        if not args.extra_tests.is_dir():
            print(f"--extra-tests {args.extra_tests} is not a folder", file=sys.stderr)
            return 2
    args.out = args.out.resolve()
    try:
        resolved = _read_policy(args)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run = resolved.policy
    if bool(run.due) != bool(run.late_penalty):
        print("error: --due and --late-penalty go together (give both, or neither)", file=sys.stderr)
        return 2
    args.due, args.late_penalty, args.chapters = run.due, run.late_penalty, run.chapters
    chapters = discover_chapters(only=args.chapters.split(",") if args.chapters else None)
    if not chapters:
        print("no chapters to grade (tests/test_NN_*.py with solutions/NN_*.ipynb)", file=sys.stderr)
        return 2
    overrides, submitted = list(run.override_entries), run.submitted_times()
    try:
        roster = read_roster(args.roster) if args.roster else []
        args.course = read_canvas_assignments(args.roster) if args.roster else []
        args.canvas_map = run.canvas_map()
        canvas_columns(args.canvas_map, args.course, [c.stem for c in discover_chapters()], [])
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.policy = resolved
    scratch = Path(tempfile.mkdtemp(prefix="grade-unzip-"))
    try:
        return _grade_class(args, chapters, overrides, roster, submitted, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _read_policy(args) -> policy.Resolved:
    """The policy this run grades by: the flags given, and with --resume the recorded values of
    those left out. Raises ValueError or OSError on a sheet, a flag or a record it cannot read."""
    from grading.classroom import late

    overrides = (args.overrides, gb.read_overrides(args.overrides)) if args.overrides else None
    submitted = (args.submitted, late.read_submitted(args.submitted)) if args.submitted else None
    canvas = read_canvas_map(args.canvas_assignments) if args.canvas_assignments is not None else None
    flags = policy.given(args.due, args.late_penalty, overrides, submitted, canvas, args.chapters)
    return policy.resolve(flags, policy.load(args.out) if args.resume else None)


def _policy_gate(args, effects, graded: list[str], columns: dict) -> list[str] | None:
    """Before anything is graded or written: say what the resumed run kept from the recorded
    policy, and what a changed one changes for whom (:func:`grading.classroom.policy.report`).
    Returns those lines for needs_review.md, or None when a change needs --policy-change (the
    run then stops, having written nothing). Records the policy when the run goes on.
    ``effects``: what a policy does to each student of the run (:class:`policy.Effects`);
    ``graded``: the chapters graded; ``columns``: their Canvas assignments."""
    resolved: policy.Resolved = args.policy
    if resolved.kept:
        print(f"resume: kept from {policy.FILE}: {'; '.join(resolved.kept)}", file=sys.stderr)
    if args.resume and resolved.recorded is None and (args.out / "gradebook.csv").exists():
        print(f"resume: {args.out.name} has no {policy.FILE} (an older grader's run): the flags given now are "
              "the policy, and are recorded", file=sys.stderr)
    lines = []
    if resolved.changes:
        old = resolved.recorded
        lines = policy.report(resolved.changes, effects(old), effects(resolved.policy),
                              gb.graded_rows(args.out), _moved_columns(args, old, graded, columns))
        for line in lines:
            print(line, file=sys.stderr)
    if resolved.blocking() and not args.policy_change:
        print(f"STOPPED before grading: --resume was given a policy that differs from the one {policy.FILE} "
              "records (above). Rerun with --policy-change to apply it, or leave those flags out to keep the "
              "recorded policy. Nothing was graded or written.", file=sys.stderr)
        return None
    policy.save(args.out, resolved.policy)
    return lines


def _moved_columns(args, old: policy.Policy, graded: list[str], columns: dict) -> dict[str, tuple[str, str]]:
    """{chapter: (Canvas column before, after)} for the graded chapters whose assignment changes."""
    try:
        before = canvas_columns(old.canvas_map(), args.course, [c.stem for c in discover_chapters()], graded)
    except ValueError:  # the recorded map no longer fits the roster: every column is said as it is now
        before = {}
    return {s: (before[s].header if s in before else s, columns[s].header if s in columns else s)
            for s in graded if before.get(s) != columns.get(s)}


def _grade_class(args, chapters, overrides, roster, submitted, scratch: Path) -> int:
    """The run of :func:`main` once its inputs are read: match, choose the chapters, grade, write."""
    from grading.classroom import late, lms

    lms_students, taken = lms.gather(args.submissions, scratch)
    students, ignored = list_students(args.submissions, skip=taken)
    students = sorted(students + [(x.name, x.folder) for x in lms_students])
    lms_info = {x.name: x for x in lms_students}
    # Listed in needs_review.md too: a download's file the parser did not read is a student
    # who would otherwise seem not to have handed in.
    ignored_lines = [f"ignored {name}: neither a folder, a .zip, nor a file named as an LMS's download names it "
                     "(Canvas, Moodle, Blackboard); it is not graded" for name in ignored]
    for line in ignored_lines:
        print(line, file=sys.stderr)
    # Matched against every chapter: a notebook of one that --chapters skips is that chapter's,
    # never "not matched" in the feedback. An LMS's names order a student's attempts.
    subs = {student: open_submission(student, entry, discover_chapters(), scratch, n,
                                     lms_info[student].attempts if student in lms_info else None)
            for n, (student, entry) in enumerate(students)}
    if args.chapters:
        why = "chosen with --chapters"
    else:
        # A week-1 class must not be graded (and imported) out of every chapter of the book.
        handed_in = {stem for sub in subs.values() for stem in [*sub.notebooks, *sub.ambiguous]}
        chosen = [c for c in chapters if c.stem in handed_in]
        why = "the chapters the submissions hold notebooks of; choose others with --chapters"
        if chosen:
            chapters = chosen
        else:
            why = "every chapter: no submission holds a notebook of any"
    chapters_line = f"chapters graded: {', '.join(c.stem for c in chapters)} ({why})"
    try:  # before any grading: a mistake here would otherwise surface after the whole class
        columns = canvas_columns(args.canvas_map, args.course,
                                 [c.stem for c in discover_chapters()], [c.stem for c in chapters])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    unmapped = unmapped_chapters([c.stem for c in chapters], columns, args.course)
    for line in unmapped:
        print(f"canvas: {line}", file=sys.stderr)
    matched, roster_problems = match_roster([s for s, _ in students], roster,
                                            {x.name: x.keys for x in lms_students}) if roster else ({}, [])
    try:  # a sheet's line that names no student, or two, stops the run before grading
        aliases = {x.name: x.keys for x in lms_students}
        overrides = gb.resolve_override_students(overrides, [s for s, _ in students], matched, aliases, roster)
        submitted = late.resolve_submitted(submitted, StudentKeys([s for s, _ in students], matched, aliases, roster),
                                           late.submitted_where(args.submitted))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lateness = lateness_of(args, [s for s, _ in students], lms_info, submitted, matched)
    names = [s for s, _ in students]

    def effects(p: policy.Policy) -> policy.Effects:  # what a policy does to this run's students
        try:
            keys = StudentKeys(names, matched, aliases, roster)
            over = gb.resolve_override_students(list(p.override_entries), names, matched, aliases, roster)
            times = late.resolve_submitted(p.submitted_times(), keys)
        except ValueError:  # a recorded line that names no one now: compared as written
            over, times = list(p.override_entries), p.submitted_times()
        rule = argparse.Namespace(due=p.due, late_penalty=p.late_penalty)
        return policy.Effects(lateness_of(rule, names, lms_info, times, matched), over)

    policy_lines = _policy_gate(args, effects, [c.stem for c in chapters], columns)
    if policy_lines is None:
        return 2
    hidden = hidden_tests(args.extra_tests, chapters)
    grader = Grader(GradeConfig.from_args(args), chapters, hidden)
    book = gb.Gradebook(args.out, args.resume, overrides, lateness, [c.stem for c in chapters])
    box = sandbox.status()
    if not box.sandboxed or not args.quiet:
        print(box.line if box.sandboxed else f"WARNING: {box.line}", file=sys.stderr)
    print(chapters_line, file=sys.stderr)  # in every run, quiet too: it decides max_total
    if not args.quiet:
        print(f"grading {', '.join(c.stem for c in chapters)} for the entries of {args.submissions} "
              f"({args.workers} workers, {args.timeout:g} s and {args.memory_mb} MB per chapter)", file=sys.stderr)
    grader.baseline = fingerprint(chapters, [p for ps in hidden.values() for p in ps])
    if any("modellab" in c.test_file.read_text() for c in chapters):  # only when Chapter 8 is graded
        from modellab.load import prepare_cache

        # Converted here, once, where writing to the repository's _build/ is allowed; a cache
        # converted before the sandbox existed is made readable by the sandbox's user.
        prepare_cache()

    tasks: list[Task] = []
    for n, (student, entry) in enumerate(students):
        try:
            digest, unreadable = submission_digest(entry), ""
        except OSError as exc:  # one student's unreadable file: a note for them, not the end of the run
            digest = f"unreadable {time.time_ns()}"
            unreadable = f"a file of the submission could not be read: {os_error_text(exc)}"
        regraded = book.changed(student, digest)
        if regraded:
            print(f"{student}: {regraded}", file=sys.stderr)
        sub = subs[student]
        if gb.task_id(student, "") not in book.done:
            rows = submission_rows(student, sub, chapters)
            if unreadable:
                rows.append(Row(student, "", "", 0, 0, REVIEW, unreadable))
            if student not in lms_info and name_problem(entry.name):  # an LMS's entries: its problems
                rows.append(Row(student, "", "", 0, 0, REVIEW, name_problem(entry.name)))
            if student in lms_info:  # names read two ways, links left out of a Moodle folder
                rows += [Row(student, "", "", 0, 0, REVIEW, p) for p in lms_info[student].problems]
            if regraded:
                rows.append(Row(student, "", "", 0, 0, NOTE, f"regraded: {regraded.split(';')[0]}"))
            book.add(student, "", rows)
        tasks += [t for t in submission_tasks(student, sub, chapters)
                  if gb.task_id(student, t.chapter.stem) not in book.done]
    if tasks:
        grader.collect_plan()
        try:
            run_tasks(grader, book, tasks, args, {s for s, _ in students})
        except KeyboardInterrupt:
            kill_all()  # any child started while the queue was being stopped
            print(f"\ninterrupted: what finished is in {book.path}; rerun with --resume to grade the rest",
                  file=sys.stderr)
            return 130
    book.finish()
    for student, _ in students:
        gb.write_feedback(args.out, student, book.student_rows(student))
    final = book.final_rows()
    wide = write_wide(args.out, final, roster, matched)
    _, canvas_problems = write_canvas(args.out, final, roster, matched, columns)
    canvas_problems = unmapped + canvas_problems
    extra = ignored_lines + [f"partly handed in: {p}" for p in partial_chapters(final)]
    extra += [f"overrides: {p}" for p in book.override_problems()]
    extra += [f"roster: {p}" for p in roster_problems]
    extra += [f"canvas: {p}" for p in canvas_problems] if roster else []
    for line in extra[len(ignored_lines):]:
        if line.removeprefix("canvas: ") not in unmapped:  # said before grading
            print(line, file=sys.stderr)
    extra += policy_lines  # said before grading
    review = gb.write_review_list(args.out, final, sandbox.status().line, extra, chapters_line)
    flagged = sum(r.status in FOR_REVIEW for r in final)
    if not args.quiet:
        print(f"wrote {book.path}, {wide.name}, {len(students)} feedback files in {args.out / 'feedback'} and {review} "
              f"({flagged} rows need a look)", file=sys.stderr)
    if grader.compromised:
        print(f"\nSTOPPED: the grader's files or installed packages changed during grading ({grader.compromised}). "
              "Restore them (git checkout / reinstall the venv), then rerun with --resume.", file=sys.stderr)
        return 3
    return 0


def run_tasks(grader: Grader, book: gb.Gradebook, tasks: list[Task], args, students: set[str]):
    """Grade the tasks, ``args.workers`` child processes at a time (threads here only
    wait on children). A student's feedback is written as soon as all their chapters are in."""
    progress = Progress(len(tasks), args.quiet)
    left = {s: sum(t.student == s for t in tasks) for s in students}
    pool = ThreadPoolExecutor(max_workers=max(1, args.workers))
    futures = {pool.submit(grader.grade_safely, t): t for t in tasks}
    try:
        for future in as_completed(futures):
            task = futures[future]
            rows = None if future.cancelled() else future.result()
            if rows is None:
                continue  # not graded (the run stopped): --resume grades it
            book.add(task.student, task.chapter.stem, rows)
            left[task.student] -= 1
            if left[task.student] == 0:
                gb.write_feedback(args.out, task.student, book.student_rows(task.student))
            progress.step(f"{task.student} {task.chapter.stem}")
            if grader.compromised:
                for f in futures:
                    f.cancel()
    except KeyboardInterrupt:
        # Nothing more is recorded: stop the queue, kill the children, let the threads return.
        grader.compromised = grader.compromised or "interrupted"
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


if __name__ == "__main__":
    sys.exit(main())
