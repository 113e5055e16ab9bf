"""The steps of a class run that grade: open the gradebook, list the tasks, grade them.

A task is one student's chapter (:class:`grading.classroom.grade.Task`), graded by a judge
of its own (:class:`grading.classroom.grade.Grader`); ``workers`` judges run at a time,
and the threads here only wait on them. ``gradebook.csv`` gains each chapter's rows as it
finishes, and a student's feedback is written as soon as all their chapters are in, so an
interrupted run loses nothing that finished (``--resume`` grades the rest).
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from grading.classroom import gradebook as gb
from grading.classroom.grade import (
    Grader,
    Task,
    fingerprint,
    hidden_tests,
    os_error_text,
    submission_rows,
    submission_tasks,
)
from grading.classroom.matching import name_problem, submission_digest
from grading.classroom.rows import NOTE, REVIEW, Row
from grading.classroom.state import INTERRUPTED, ClassRun, Stop, say
from grading.proc import sandbox
from grading.proc.judges import kill_all


def open_gradebook(run: ClassRun) -> None:
    """``run.grader`` (with the hidden tests of the graded chapters, and the graders'
    fingerprint: a change while grading stops the run) and ``run.book`` (a resumed run's
    finished tasks kept); says where the judges run and what is graded."""
    c = run.config
    hidden = hidden_tests(c.extra_tests, run.chapters)
    run.grader = Grader(c.grade_config(), run.chapters, hidden)
    run.book = gb.Gradebook(c.out, c.resume, run.overrides, run.lateness, run.stems)
    box = sandbox.status()
    if not box.sandboxed or not c.quiet:
        say(box.line if box.sandboxed else f"WARNING: {box.line}")
    say(run.chapters_line)  # in every run, quiet too: it decides max_total
    if not c.quiet:
        say(f"grading {', '.join(run.stems)} for the entries of {c.submissions} "
             f"({c.workers} workers, {c.timeout:g} s and {c.memory_mb} MB per chapter)")
    run.grader.baseline = fingerprint(run.chapters, [p for ps in hidden.values() for p in ps])
    if any("modellab" in ch.test_file.read_text() for ch in run.chapters):  # only when Chapter 8 is graded
        from modellab.load import prepare_cache

        # Converted here, once, where writing to the repository's _build/ is allowed; a cache
        # converted before the sandbox existed is made readable by the sandbox's user.
        prepare_cache()


def list_tasks(run: ClassRun) -> None:
    """``run.tasks``: every chapter of every student that the gradebook has not finished.
    A student not yet done gets their submission's own rows first (what cannot be read,
    what no chapter claimed, an LMS's problems, why they are graded again)."""
    for student, entry in run.students:
        try:
            digest, unreadable = submission_digest(entry), ""
        except OSError as exc:  # one student's unreadable file: a note for them, not the end of the run
            digest = f"unreadable {time.time_ns()}"
            unreadable = f"a file of the submission could not be read: {os_error_text(exc)}"
        regraded = run.book.changed(student, digest)
        if regraded:
            say(f"{student}: {regraded}")
        sub = run.subs[student]
        if gb.task_id(student, "") not in run.book.done:
            rows = submission_rows(student, sub, run.chapters)
            rows += [Row(student, "", "", 0, 0, REVIEW, p) for p in _entry_problems(run, student, entry, unreadable)]
            if regraded:
                rows.append(Row(student, "", "", 0, 0, NOTE, f"regraded: {regraded.split(';')[0]}"))
            run.book.add(student, "", rows)
        run.tasks += [t for t in submission_tasks(student, sub, run.chapters)
                      if gb.task_id(student, t.chapter.stem) not in run.book.done]


def _entry_problems(run: ClassRun, student: str, entry, unreadable: str) -> list[str]:
    """What needs a look in the entry itself: an unreadable file, a name that is no
    student's (an LMS's entries have their own: names read two ways, links left out)."""
    problems = [unreadable] if unreadable else []
    if student in run.lms:
        return problems + run.lms[student].problems
    return problems + ([name_problem(entry.name)] if name_problem(entry.name) else [])


def grade(run: ClassRun) -> None:
    """Grade ``run.tasks``, ``workers`` judges at a time. Raises :class:`Stop` (exit 130) on
    Ctrl-C, every judge killed and what finished kept."""
    if not run.tasks:
        return
    run.grader.collect_plan()
    try:
        c = run.config
        run_tasks(run.grader, run.book, run.tasks, c.workers, c.quiet)
    except KeyboardInterrupt:
        kill_all()  # any child started while the queue was being stopped
        raise Stop(INTERRUPTED, f"\ninterrupted: what finished is in {run.book.path}; rerun with --resume to "
                                "grade the rest") from None


def run_tasks(grader: Grader, book: gb.Gradebook, tasks: list[Task], workers: int, quiet: bool) -> None:
    """Grade ``tasks``, ``workers`` judges at a time (threads here only wait on them), each
    chapter's rows added to ``book`` as it finishes. A student's feedback is written as soon
    as all their chapters are in; once the grader's files are found changed, the tasks not
    started are cancelled. Ctrl-C kills every judge and raises KeyboardInterrupt again."""
    progress = Progress(len(tasks), quiet)
    left = {t.student: sum(u.student == t.student for u in tasks) for t in tasks}
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
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
                gb.write_feedback(book.out, task.student, book.student_rows(task.student))
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


class Progress:
    """One line on stderr: a bar, the count and the time left (from the mean so far)."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.done, self.quiet = total, 0, quiet
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
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
