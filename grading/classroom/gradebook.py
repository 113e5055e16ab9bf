"""The gradebook: ``gradebook.csv`` kept as grading goes, overrides, and what students read.

Rows (:mod:`grading.classroom.rows`) are appended to ``gradebook.csv`` as soon as a
chapter is graded, then a line in ``.done`` says the chapter is complete, so ``--resume``
knows what to skip and drops the rows of a chapter that was cut short. Feedback files are
made from the rows alone, so they are the same after a resume. The wide and Canvas
exports are :mod:`grading.classroom.exports`.
"""

from __future__ import annotations

import csv
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from grading import scoring, texts
from grading.classroom.matching import readable
from grading.classroom.rows import (
    CRASHED,
    FIELDS,
    MISSING,
    NOTE,
    OVERRIDDEN,
    PASSED,
    REVIEW,
    TAMPERED,
    TIMED_OUT,
    Row,
    csv_value,
    exercise_order,
    graded_chapters,
    num,
    one_line,
)
from grading.classroom.sheets import StudentKeys
from grading.outcome import FOR_REVIEW


# -- the file -------------------------------------------------------------------------
def task_id(student: str, chapter: str) -> str:
    return f"{student}\t{chapter}"


def _read_rows(path: Path) -> list[Row]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = [{k: csv_value(v or "") for k, v in d.items()} for d in csv.DictReader(f)]
    return [Row(d["student"], d["chapter"], d["exercise"], float(d["points"] or 0), float(d["max_points"] or 0),
                d["status"], d["message"]) for d in rows]


def graded_rows(out: Path) -> list[Row]:
    """The grader's rows of the last finished run in ``out`` (``.graded.csv``: before late
    penalties and overrides), read and left as they are; empty when there is none."""
    path = out / ".graded.csv"
    return _read_rows(path) if path.exists() else []


def _write_rows(path: Path, rows: list[Row]):
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(r.as_csv())
    os.replace(tmp, path)


class Gradebook:
    """``gradebook.csv`` appended row by row, with ``.done`` recording finished tasks.

    ``rows`` are what the grader gave; overrides are applied when rows are read
    (:meth:`final_rows`, :meth:`student_rows`) and written by :meth:`finish`, which
    keeps the graded rows beside them in ``.graded.csv`` so that a later run can
    apply a changed overrides file to the grades, not to earlier overrides.
    ``.hashes`` holds each student's content hash, so ``--resume`` regrades a
    student whose files changed (:meth:`changed`). ``chapters``: the chapters of this run;
    a resumed run keeps only theirs (the files are written for the chapters now chosen),
    and when they differ from the last run's (``.chapters``), the submission-wide rows
    (which say what is missing) are made again."""

    def __init__(self, out: Path, resume: bool, overrides: list["Override"] = (), late: dict | None = None,
                 chapters: list[str] | None = None):
        self.out = out
        # student -> grading.classroom.late.Lateness: applied, like the overrides, when rows are read
        self.late = dict(late or {})
        self.path = out / "gradebook.csv"
        self.done_path = out / ".done"
        self.graded_path = out / ".graded.csv"
        self.hashes_path = out / ".hashes"
        self.chapters_path = out / ".chapters"
        self.overrides = list(overrides)
        self.lock = threading.Lock()
        self.rows: list[Row] = []
        self.done: set[str] = set()
        self.hashes: dict[str, str] = {}
        out.mkdir(parents=True, exist_ok=True)
        if resume and self.path.exists() and self.done_path.exists():
            self.done = {line for line in self.done_path.read_text().splitlines() if line}
            graded = _read_rows(self.graded_path) if self.graded_path.exists() else []
            covered = {task_id(r.student, r.chapter) for r in graded}
            self.rows = [r for r in graded if task_id(r.student, r.chapter) in self.done]
            # Rows appended after the last finish; an overridden row was written by a finish,
            # and the grade it replaced is in .graded.csv.
            self.rows += [r for r in _read_rows(self.path) if task_id(r.student, r.chapter) in self.done
                          and task_id(r.student, r.chapter) not in covered and r.status != OVERRIDDEN
                          and not (r.status == NOTE and r.message.startswith(LATE_NOTE))]
            if self.hashes_path.exists():
                self.hashes = dict(line.split("\t", 1) for line in
                                   self.hashes_path.read_text(encoding="utf-8").splitlines() if "\t" in line)
            if chapters is not None:
                before = self.chapters_path.read_text().split() if self.chapters_path.exists() else None
                keep = set(chapters) | ({""} if before is not None and sorted(before) == sorted(chapters) else set())
                self.done = {d for d in self.done if d.split("\t", 1)[1] in keep}
                self.rows = [r for r in self.rows if r.chapter in keep]
                if self.graded_path.exists():
                    _write_rows(self.graded_path, [r for r in _read_rows(self.graded_path) if r.chapter in keep])
        else:
            self.graded_path.unlink(missing_ok=True)
        if chapters is not None:
            self.chapters_path.write_text("".join(f"{c}\n" for c in sorted(chapters)))
        self._rewrite(self.rows)
        self.done_path.write_text("".join(f"{t}\n" for t in sorted(self.done)))
        self._write_hashes()

    def _rewrite(self, rows: list[Row]):
        _write_rows(self.path, rows)

    def _write_hashes(self):
        tmp = self.hashes_path.with_name(".hashes.tmp")
        # Students are named by matching.readable names, so UTF-8 holds every one, whatever the locale.
        tmp.write_text("".join(f"{s}\t{h}\n" for s, h in sorted(self.hashes.items())), encoding="utf-8")
        os.replace(tmp, self.hashes_path)

    def changed(self, student: str, digest: str) -> str:
        """Record a student's content hash. If an earlier run graded this student from
        other files, forget those grades (they are stale) and say why; else ""."""
        with self.lock:
            before = self.hashes.get(student)
            mine = any(d.split("\t", 1)[0] == student for d in self.done)
            self.hashes[student] = digest
            self._write_hashes()
            if not mine or before == digest:
                return ""
            self.rows = [r for r in self.rows if r.student != student]
            self.done = {d for d in self.done if d.split("\t", 1)[0] != student}
            self._rewrite(self.rows)
            self.done_path.write_text("".join(f"{t}\n" for t in sorted(self.done)))
            if self.graded_path.exists():
                _write_rows(self.graded_path, [r for r in _read_rows(self.graded_path) if r.student != student])
            return ("its files changed since the last run" if before else
                    "the last run kept no record of its files") + "; graded again"

    def add(self, student: str, chapter: str, rows: list[Row]):
        """Append one task's rows, then mark the task done (both flushed to disk)."""
        rows = sorted(rows, key=lambda r: exercise_order(r.exercise))
        with self.lock:
            with open(self.path, "a", newline="", encoding="utf-8") as f:
                w = csv.DictWriter(f, FIELDS)
                for r in rows:
                    w.writerow(r.as_csv())
                f.flush()
                os.fsync(f.fileno())
            with open(self.done_path, "a") as f:
                f.write(task_id(student, chapter) + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.rows += rows
            self.done.add(task_id(student, chapter))

    def finish(self):
        """Sort the file so that a regrade gives the same file, not just the same rows;
        write the graded rows to ``.graded.csv`` and the overridden ones to gradebook.csv."""
        with self.lock:
            self.rows.sort(key=lambda r: (r.student, r.chapter == "", r.chapter, exercise_order(r.exercise)))
            _write_rows(self.graded_path, self.rows)
            self._rewrite(self._adjusted(self.rows)[0])

    def _adjusted(self, rows: list[Row]) -> tuple[list[Row], list[str]]:
        """The graded rows as they count: each student's late penalty (grading.classroom.late), then
        the overrides (which set points, so they win); and the overrides not applied."""
        return counted(rows, self.late, self.overrides)

    def final_rows(self) -> list[Row]:
        """Every row, with the late penalties and the overrides applied."""
        return self._adjusted(self.rows)[0]

    def override_problems(self) -> list[str]:
        return self._adjusted(self.rows)[1]

    def student_rows(self, student: str) -> list[Row]:
        return self._adjusted([r for r in self.rows if r.student == student])[0]


# How a late penalty's note row begins (grading.classroom.late writes it; a resumed run drops it and
# applies the penalty afresh).
LATE_NOTE = "late: "


# -- overrides: an instructor's corrections --------------------------------------------
OVERRIDE_FIELDS = ("student", "exercise", "points", "reason")


@dataclass(frozen=True)
class Override:
    student: str
    exercise: str  # "1.2", or "1.2 hidden" for the hidden tests of Exercise 1.2
    points: float
    reason: str
    line: int  # in the overrides file, for messages


def read_overrides(path: Path) -> list[Override]:
    """The overrides file: a CSV with the header ``student,exercise,points,reason``, one
    correction per line. Raises ValueError naming the file and line of a bad entry."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        header = [h.strip().lower() for h in (reader.fieldnames or [])]
        missing = [c for c in OVERRIDE_FIELDS if c not in header]
        if missing:
            raise ValueError(f"overrides file {path}: the header must name {', '.join(OVERRIDE_FIELDS)} "
                             f"(missing: {', '.join(missing)})")
        out = []
        for n, raw in enumerate(reader, start=2):
            extra = raw.pop(None, None)  # fields past the header's: a reason with an unquoted comma
            if extra and header[-1] != "reason":
                raise ValueError(f"overrides file {path}, line {n}: {len(extra)} more field(s) than the header "
                                 "names; quote a field that holds a comma")
            d = {(k or "").strip().lower(): (v or "").strip() for k, v in raw.items()}
            if extra:  # the reason is the last column: everything after the third comma is the reason
                d["reason"] = ", ".join([d["reason"], *(e.strip() for e in extra)])
            if not any(d.values()):
                continue
            if not d["student"] or not re.match(r"^\d+\.\d+( hidden)?$", d["exercise"]):
                raise ValueError(f"overrides file {path}, line {n}: needs a student and an exercise like "
                                 f"'1.2' or '1.2 hidden' (got {d['student']!r}, {d['exercise']!r})")
            try:
                points = float(d["points"])
            except ValueError:
                raise ValueError(f"overrides file {path}, line {n}: points must be a number "
                                 f"(got {d['points']!r})") from None
            if not points >= 0:
                raise ValueError(f"overrides file {path}, line {n}: points must be >= 0 (got {d['points']})")
            if not d["reason"]:
                raise ValueError(f"overrides file {path}, line {n}: give a reason (the student reads it)")
            out.append(Override(d["student"], d["exercise"], points, d["reason"], n))
    return out


def counted(rows: list[Row], lateness: dict, overrides: list[Override]) -> tuple[list[Row], list[str]]:
    """The rows as they count, in the one order the class run uses everywhere: each student's
    late penalty (``lateness``: student -> grading.classroom.late.Lateness), then the overrides,
    which set points and so win; and the overrides not applied."""
    from grading.classroom import late

    penalised = []
    for student in dict.fromkeys(r.student for r in rows):
        penalised += late.apply([r for r in rows if r.student == student], lateness.get(student))
    return apply_overrides(penalised, overrides)


def apply_overrides(rows: list[Row], overrides: list[Override]) -> tuple[list[Row], list[str]]:
    """The rows with each override applied (points set, status ``overridden``, the
    reason and the grader's own result in the message), and the overrides that could
    not be applied (no such row, or more points than the exercise is worth)."""
    out = list(rows)
    problems = []
    for o in overrides:
        hits = [i for i, r in enumerate(out) if r.student == o.student and r.exercise == o.exercise]
        if not hits:
            if not any(r.student == o.student for r in out):
                problems.append(f"override on line {o.line} ({o.student}, {o.exercise}) matches no submission: "
                                f"{o.student!r} names a roster entry that handed in nothing; not applied")
            else:
                problems.append(f"override on line {o.line} ({o.student}, {o.exercise}) matches no graded exercise")
            continue
        for i in hits:
            r = out[i]
            if not scoring.override_fits(o.points, r.max_points):
                problems.append(f"override on line {o.line} gives {num(o.points)} points to {o.student}, "
                                f"{o.exercise}, which is worth {num(r.max_points)}; not applied")
                continue
            graded = f"graded {num(r.points)} / {num(r.max_points)}, {r.status}"
            graded += f": {r.message}" if r.message and not r.exercise.endswith(" hidden") else ""
            out[i] = Row(r.student, r.chapter, r.exercise, o.points, r.max_points, OVERRIDDEN,
                         one_line(f"{o.reason} (instructor's override; {graded})"))
    return out, problems


def resolve_override_students(overrides: list[Override], submissions: list[str], matched: dict | None = None,
                              aliases: dict[str, list[str]] | None = None, roster: list = ()) -> list[Override]:
    """Overrides with each student written as the submission's name: an override may name
    the student by any key :class:`grading.classroom.sheets.StudentKeys` reads of the
    ``submissions`` (their names, ``aliases`` from an LMS's names, and the ids of the
    ``roster`` entry ``matched`` to each: Canvas's ``ID``, ``SIS User ID``, ``SIS Login ID``...).
    One naming a roster entry with no submission is kept as written, and
    :func:`apply_overrides` says it matches nothing. Raises ValueError naming the line of
    a key that names no student, or several."""
    keys = StudentKeys(submissions, matched, aliases, roster)
    out = []
    for o in overrides:
        student = keys.resolve(o.student, f"--overrides, line {o.line}")
        out.append(Override(student, o.exercise, o.points, o.reason, o.line) if student else o)
    return out


# -- feedback ---------------------------------------------------------------------------
# A hidden test's id as the judge reports it (grading.judge.main.Collector.stable): never shown
# to a student, whatever message it ends up in (a chapter-wide reason names a test).
HIDDEN_NODEID = re.compile(r"hidden/[^\s/:()]+\.py(?:::[^\s()]*)?")


def student_text(message: str) -> str:
    """``message`` as a student may read it: any hidden test's id replaced by words."""
    return HIDDEN_NODEID.sub("a hidden test", message)


def feedback_markdown(student: str, rows: list[Row]) -> str:
    """What one student reads: per exercise, points and a message they can act on.
    Hidden tests appear as points only: never their names, messages or how many there are
    or failed (their row's message is the instructor's, gradebook.csv)."""
    known = graded_chapters(rows)
    graded = [r for r in rows if r.exercise and (r.student, r.chapter) in known]
    total, possible = sum(r.points for r in graded), sum(r.max_points for r in graded)
    chapters = sorted({r.chapter for r in rows if r.chapter})
    ungraded = [c for c in chapters if any(r.chapter == c and r.exercise for r in rows)
                and not any(r.chapter == c and (r.student, c) in known for r in rows)]
    not_counted = f" (not counting {', '.join(ungraded)}: no grade yet)" if ungraded else ""
    lines = [f"# Feedback for {student}", "", f"**Total: {num(total)} / {num(possible)} points{not_counted}.**", ""]
    for r in rows:
        if r.chapter == "" and r.status in (REVIEW, NOTE):
            lines.append(f"- {student_text(r.message)}")
    for chapter in chapters:
        mine = [r for r in rows if r.chapter == chapter]
        ex = [r for r in mine if r.exercise]
        if chapter in ungraded:
            lines += ["", f"## {chapter}: no grade yet", ""]
            for status in dict.fromkeys(r.status for r in ex):
                lines += [f"> **{status}**: {texts.no_grade(status)}", ""]
            # The reason, once per distinct message; a hidden row's message is the instructor's.
            for text in dict.fromkeys(r.message for r in ex if r.message and r.status != MISSING
                                      and not r.exercise.endswith(" hidden")):
                lines.append(f"- {student_text(text)}")
            notes = [r for r in mine if not r.exercise]
            if notes:
                lines += ["", "Notes:"] + [f"- {student_text(r.message)}" for r in notes]
            continue
        lines += ["", f"## {chapter}: {num(sum(r.points for r in ex))} / {num(sum(r.max_points for r in ex))}", ""]
        statuses = {r.status for r in mine}
        for status in texts.STATUS:
            if status in statuses and texts.advice(status):
                lines += [f"> **{status}**: {texts.advice(status)}", ""]
        for r in ex:
            name = f"Exercise {r.exercise}" if r.exercise[0].isdigit() else r.exercise
            if r.exercise.endswith(" hidden"):
                name = texts.HIDDEN_NAME.format(exercise=r.exercise.split()[0])
                text = ("" if r.status == PASSED or texts.advice(r.status) else
                        r.message if r.status == OVERRIDDEN else texts.HIDDEN_FAILED.message)
            else:
                # Chapter-wide reasons are said once, above and below the list.
                text = "" if r.status in (TIMED_OUT, CRASHED, TAMPERED, MISSING) else r.message
            text = f". {student_text(text)}" if text else ""
            lines.append(f"- **{name}**: {num(r.points)} / {num(r.max_points)}, {r.status}{text}")
        chapter_notes = [r for r in mine if not r.exercise]
        if chapter_notes:
            lines += ["", "Notes:"]
            lines += [f"- {student_text(r.message)}" for r in chapter_notes]
        for r in ex:
            # A hidden row's message names its tests: what happened there stays the instructor's.
            if r.status in (TIMED_OUT, CRASHED, TAMPERED) and r.message and not r.exercise.endswith(" hidden"):
                lines += ["", f"What happened: {student_text(r.message)}"]
                break
    return "\n".join(lines).rstrip() + "\n"


def write_feedback(out: Path, student: str, rows: list[Row]) -> Path:
    folder = out / "feedback"
    folder.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^\w.@+-]+", "_", student) or "student"
    path = folder / f"{safe}.md"
    path.write_text(readable(feedback_markdown(student, rows)), encoding="utf-8")  # no name stops the class
    return path


def write_review_list(out: Path, rows: list[Row], sandbox_line: str = "", extra: list[str] = (),
                      chapters_line: str = "") -> Path:
    """``needs_review.md``: every row that wants a human look, every notebook no chapter
    claimed (even beside a complete submission: a stray ``Untitled.ipynb`` may be the
    real work), ``extra`` lines (the roster, the overrides), how the children were
    isolated (a run without the sandbox says so at the top, where it cannot be missed),
    and ``chapters_line``: which chapters were graded, and why those."""
    path = out / "needs_review.md"
    flagged: dict[tuple, list[str]] = {}
    for r in rows:
        stray = r.status == NOTE and not r.chapter and texts.UNMATCHED in r.message
        if r.status in FOR_REVIEW or stray:  # one line for a chapter whose exercises share one reason
            flagged.setdefault((r.student, r.chapter, r.status, r.message), []).append(r.exercise)
    lines = ["# Needs a human look", ""]
    if sandbox_line:
        lines += [f"**{sandbox_line}**" if sandbox_line.startswith("sandbox: none") else sandbox_line, ""]
    if chapters_line:
        lines += [chapters_line, ""]
    for line in extra:
        lines.append(f"- {line}")
    if not flagged and not extra:
        lines.append("Nothing: every chapter was graded normally.")
    for (student, chapter, status, message), exercises in flagged.items():
        what = [e for e in exercises if e]
        where = (chapter or "submission") + (f" ({', '.join(what)})" if what else "")
        lines.append(f"- **{student}**, {where}: {status}. {message}")
    path.write_text(readable("\n".join(lines) + "\n"), encoding="utf-8")  # no name stops the class
    return path
