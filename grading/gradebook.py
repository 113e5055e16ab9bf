"""Gradebook rows: how a child's outcome becomes points, a status and a message.

One row per student, chapter and exercise (hidden tests get their own row, ``1.2
hidden``); rows with an empty exercise are notes about the whole chapter or the
whole submission (0 of 0 points). Rows are appended to ``gradebook.csv`` as soon
as a chapter is graded, then a line in ``.done`` says the chapter is complete, so
``--resume`` knows what to skip and drops the rows of a chapter that was cut short.
Feedback files are made from the rows alone, so they are the same after a resume.
"""

from __future__ import annotations

import csv
import os
import re
import threading
import unicodedata
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from grading.outcome import (FOR_REVIEW, MESSAGE_CHARS, OUT_OF_MEMORY, Status, TestOutcome, clip, describe_signal,
                             earned, exercise_status)

FIELDS = ["student", "chapter", "exercise", "points", "max_points", "status", "message"]
PASSED, FAILED, NOT_ATTEMPTED, ERROR = Status.PASSED, Status.FAILED, Status.NOT_ATTEMPTED, Status.ERROR
TIMED_OUT, MEMORY, CRASHED, TAMPERED = Status.TIMED_OUT, Status.MEMORY, Status.CRASHED, Status.TAMPERED
REVIEW, MISSING, SKIPPED, NOTE = Status.REVIEW, Status.MISSING, Status.SKIPPED, Status.NOTE
OVERRIDDEN = Status.OVERRIDDEN
# The words of a submission-wide row about a notebook no chapter claimed (listed for review).
UNMATCHED = "was not matched to a chapter"
# A process that died of memory leaves only words in its output (no exception to classify).
MEMORY_WORDS = re.compile(r"MemoryError|" + OUT_OF_MEMORY.pattern, re.I)


@dataclass
class Row:
    student: str
    chapter: str
    exercise: str
    points: float
    max_points: float
    status: str
    message: str = ""

    def as_csv(self) -> dict:
        d = asdict(self)
        d["points"], d["max_points"] = _num(self.points), _num(self.max_points)
        return dict(zip(d, csv_row(d.values())))


# A cell a spreadsheet would run as a formula (OWASP's CSV injection): text beginning with
# one of these. A leading quote is escaped too, so that reading a cell back is exact.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")
PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value) -> str:
    """``value`` as one CSV cell that no spreadsheet runs: text beginning with ``=``, ``+``,
    ``-``, ``@``, a tab, a carriage return or ``'`` gets a leading ``'``; a plain number
    (``-2.5``: a late penalty, a negative score) is left a number. :func:`csv_value` undoes it."""
    text = "" if value is None else str(value)
    if text.startswith(FORMULA_START) and not PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def csv_value(cell: str) -> str:
    """The text :func:`csv_cell` was given for ``cell``."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(FORMULA_START) else cell


def csv_row(values) -> list[str]:
    """A row of cells, each through :func:`csv_cell`: what every CSV writer here writes."""
    return [csv_cell(v) for v in values]


def _num(x: float) -> str:
    x = round(float(x), 3)
    return str(int(x)) if x == int(x) else f"{x:g}"


def one_line(message: str, limit: int = MESSAGE_CHARS) -> str:
    """The part of a grader message a student can act on, on one line: the first
    line and any ``expected:`` / ``got:`` lines, without tracebacks."""
    keep = []
    for n, line in enumerate(message.splitlines()):
        s = line.strip()
        if not s:
            continue
        if re.match(r"^(\S+\.py:\d+|E\s|>\s|Traceback|File \")", s) or s.startswith(("def ", "@")):
            break
        if n == 0 or re.match(r"^(expected|got|max|first|at |raised in|  )", s) or line.startswith("  "):
            keep.append(s)
    text = "; ".join(keep) or message.strip().splitlines()[0] if message.strip() else ""
    text = re.sub(r"0x[0-9a-f]{6,}", "0x...", text)
    text = re.sub(r"/\S*/grade-[^/\s]+/work/notebooks/", "", text)  # the child's temporary paths
    return clip(text, limit)


def exercise_order(label: str) -> tuple:
    m = re.match(r"^(\d+)\.(\d+)", label)
    return (0, int(m.group(1)), int(m.group(2)), label) if m else (1 if label else -1, 0, 0, label)


def crash_text(returncode: int | None) -> str:
    """Why a child ended before grading finished, with the likely cause."""
    if returncode is not None and returncode < 0:
        return f"the grading process was killed by {describe_signal(-returncode)}"
    return (f"the grading process exited with code {returncode} before grading finished "
            "(os._exit() or sys.exit() where the grader cannot catch it?)")


# -- from a plan and outcomes to rows -----------------------------------------------
def group_plan(tests: list[dict]) -> dict[str, dict[tuple[str, str], dict]]:
    """exercise label -> (test file, function) -> {"points", "nodeids", "skip"}."""
    groups: dict[str, dict] = defaultdict(dict)
    for t in tests:
        label = (t.get("exercise") or "other") + (" hidden" if t.get("hidden") else "")
        fn = groups[label].setdefault((t["path"], t["function"]),
                                      {"points": t["points"], "core": bool(t.get("core")), "nodeids": [], "skip": []})
        fn["nodeids"].append(t["nodeid"])
        fn["skip"].append(bool(t.get("skip")))
    return dict(sorted(groups.items(), key=lambda kv: exercise_order(kv[0])))


def max_points(functions: dict) -> float:
    return sum(f["points"] for f in functions.values() if not all(f["skip"]))


def core_points(functions: dict) -> float:
    """The part of :func:`max_points` that the exercise's core tests carry, all or nothing."""
    return sum(f["points"] for f in functions.values() if f.get("core") and not all(f["skip"]))


def zero_rows(student: str, chapter: str, tests: list[dict], status: str, message: str) -> list[Row]:
    """Every exercise of a chapter at zero with one status: missing, timed out, crashed..."""
    groups = group_plan(tests)
    if not groups:
        return [Row(student, chapter, "", 0, 0, status, message)]
    return [Row(student, chapter, label, 0, max_points(fns), status, message) for label, fns in groups.items()]


def graded_rows(student: str, chapter: str, tests: list[dict], outcomes: dict[str, TestOutcome],
                review: dict[str, str] | None = None, memory_note: str = "",
                diagnoses: dict[str, str] | None = None) -> list[Row]:
    """Rows from the outcomes of a chapter that ran to the end. A test function is
    worth its points; its parametrized cases share them (partial credit). A failed
    exercise's message starts with its diagnosis, when the catalogue names the mistake."""
    review, diagnoses = review or {}, diagnoses or {}
    rows = []
    for label, functions in group_plan(tests).items():
        points = possible = 0.0
        failures: list[dict] = []
        failed_names: list[str] = []
        passed_any = False
        for (_, function), fn in functions.items():
            graded = passed = 0
            for nodeid in fn["nodeids"]:
                o = outcomes.get(nodeid) or TestOutcome(nodeid, "failed", message="this test did not run")
                if o.outcome == "skipped":
                    continue
                graded += 1
                if o.passed:
                    passed += 1
                else:
                    failures.append(o)
                    if function not in failed_names:
                        failed_names.append(function)
            if graded:
                points += earned(fn["points"], passed, graded, fn.get("core", False))
                possible += fn["points"]
                passed_any = passed_any or passed > 0
        hidden = label.endswith(" hidden")
        exercise = label.split()[0]
        if possible == 0:
            rows.append(Row(student, chapter, label, 0, 0, SKIPPED, "every test was skipped here (needs a GPU?)"))
            continue
        if not failures:
            rows.append(Row(student, chapter, label, points, possible, PASSED, ""))
            continue
        if hidden:
            # Names only: the source and the assertion of a hidden test stay private.
            message = "failed hidden tests: " + ", ".join(failed_names)
        else:
            # The one-line summary the grading process made from the exception (the plugin's,
            # or the child's for a fixture or a hidden test); only a test that never reported
            # (it did not run) has no summary, and then the message is the grader's own words.
            first = failures[0]
            message = first.summary or re.sub(rf"^Exercise {re.escape(exercise)}:? ", "", one_line(first.message))
        # Each failing test's status was decided in the judge from its exception; the
        # exercise's, from theirs, in one place (grading.outcome.exercise_status).
        status = exercise_status(failures, passed_any, memory=bool(memory_note), review=exercise in review)
        if status == MEMORY and memory_note:
            message = f"{memory_note}; {message}"
        elif status == REVIEW:
            message = f"{review[exercise]}; {message}"
        if len(failures) > 1 and not hidden and status != NOT_ATTEMPTED:
            message += f" (and {len(failures) - 1} more failing case{'s' if len(failures) > 2 else ''})"
        if status == FAILED and not hidden and diagnoses.get(exercise):
            message = f"{diagnoses[exercise]} First failure: {message}"
        rows.append(Row(student, chapter, label, points, possible, status, message))
    return rows


# -- the file -------------------------------------------------------------------------
def task_id(student: str, chapter: str) -> str:
    return f"{student}\t{chapter}"


def _read_rows(path: Path) -> list[Row]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = [{k: csv_value(v or "") for k, v in d.items()} for d in csv.DictReader(f)]
    return [Row(d["student"], d["chapter"], d["exercise"], float(d["points"] or 0), float(d["max_points"] or 0),
                d["status"], d["message"]) for d in rows]


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
        # student -> grading.late.Lateness: applied, like the overrides, when rows are read
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
                self.hashes = dict(line.split("\t", 1) for line in self.hashes_path.read_text().splitlines()
                                   if "\t" in line)
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
        tmp.write_text("".join(f"{s}\t{h}\n" for s, h in sorted(self.hashes.items())))
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
        """The graded rows as they count: each student's late penalty (grading.late), then
        the overrides (which set points, so they win); and the overrides not applied."""
        from grading import late

        penalised = []
        for student in dict.fromkeys(r.student for r in rows):
            penalised += late.apply([r for r in rows if r.student == student], self.late.get(student))
        return apply_overrides(penalised, self.overrides)

    def final_rows(self) -> list[Row]:
        """Every row, with the late penalties and the overrides applied."""
        return self._adjusted(self.rows)[0]

    def override_problems(self) -> list[str]:
        return self._adjusted(self.rows)[1]

    def student_rows(self, student: str) -> list[Row]:
        return self._adjusted([r for r in self.rows if r.student == student])[0]


# How a late penalty's note row begins (grading.late writes it; a resumed run drops it and
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
                                f"{o.student!r} is neither a submission's name nor the roster id, email or name "
                                "of one (--roster); not applied")
            else:
                problems.append(f"override on line {o.line} ({o.student}, {o.exercise}) matches no graded exercise")
            continue
        for i in hits:
            r = out[i]
            if o.points > r.max_points:
                problems.append(f"override on line {o.line} gives {_num(o.points)} points to {o.student}, "
                                f"{o.exercise}, which is worth {_num(r.max_points)}; not applied")
                continue
            graded = f"graded {_num(r.points)} / {_num(r.max_points)}, {r.status}"
            graded += f": {r.message}" if r.message and not r.exercise.endswith(" hidden") else ""
            out[i] = Row(r.student, r.chapter, r.exercise, o.points, r.max_points, OVERRIDDEN,
                         one_line(f"{o.reason} (instructor's override; {graded})"))
    return out, problems


def resolve_override_students(overrides: list[Override], submissions: list[str],
                              matched: dict[str, "Student"]) -> list[Override]:
    """Overrides with each student written as the submission's name: an override may name
    the student by the submission's name, or by the roster entry matched to it (any of its
    id columns, :meth:`Student.keys`: Canvas's ``ID``, ``SIS User ID``, ``SIS Login ID``;
    its email, the part of the email before ``@``, or name; case and punctuation ignored).
    One that names neither, or a roster key that fits several submissions, is kept as
    written, and :func:`apply_overrides` says it matches nothing."""
    names = set(submissions)
    by_key: dict[str, set[str]] = {}
    for folder, s in matched.items():
        for k in s.keys():
            if k:
                by_key.setdefault(_key(k), set()).add(folder)
    out = []
    for o in overrides:
        fits = by_key.get(_key(o.student), set())
        if o.student not in names and len(fits) == 1:
            o = Override(next(iter(fits)), o.exercise, o.points, o.reason, o.line)
        out.append(o)
    return out


# -- grades known and not ------------------------------------------------------------------
# A chapter whose every exercise row has one of these statuses has no grade the grader gave:
# nothing was handed in for it, or what was handed in waits for a person (an unplaced or
# ambiguous notebook, an unreadable one, a failure of ours). Its cells in the exports are
# left empty, not 0, and the student's feedback says so; the instructor decides.
NO_GRADE = (MISSING, REVIEW)


def graded_chapters(rows: list[Row]) -> set[tuple[str, str]]:
    """(student, chapter) for every chapter with a grade: one of its exercise rows was
    graded (or overridden), not only missing or waiting for review."""
    return {(r.student, r.chapter) for r in rows if r.exercise and r.status not in NO_GRADE}


def partial_chapters(rows: list[Row]) -> list[str]:
    """needs_review.md's lines for the chapters that some students have a grade for and
    others not: their cells are empty, not 0, for the others."""
    graded = graded_chapters(rows)
    students = sorted({r.student for r in rows})
    lines = []
    for chapter in sorted({r.chapter for r in rows if r.exercise}):
        have = [s for s in students if (s, chapter) in graded]
        others = [s for s in students if (s, chapter) not in graded]
        if have and others:
            shown = ", ".join(others[:20]) + (f" and {len(others) - 20} more" if len(others) > 20 else "")
            lines.append(f"{chapter}: graded for {len(have)} of {len(students)} submissions; no grade for {shown} "
                         "(no notebook of it, or one waiting for review): their cells in gradebook_canvas.csv and "
                         "gradebook_wide.csv are empty, not 0")
    return lines


# -- the wide export and the roster -------------------------------------------------------
@dataclass(frozen=True)
class Student:
    id: str
    name: str = ""
    email: str = ""
    folder: str = ""  # the submission's name, where the roster gives it
    # Canvas's own columns, where the roster is Canvas's gradebook export (gradebook_canvas.csv)
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""
    integration_id: str = ""

    def keys(self) -> list[str]:
        """Every value that names this student: each id column of the roster (Canvas's
        ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Integration ID``; a folder or login),
        the email and its part before ``@``, the name as written."""
        return [k for k in (self.id, self.sis_user_id, self.sis_login_id, self.integration_id, self.folder,
                            self.email, self.email.split("@")[0], self.name) if k]


ROSTER_COLUMNS = {"id": ("id", "student id", "student_id", "studentid", "sis id", "sis_id", "sis user id"),
                  "name": ("name", "student name", "full name", "student"),
                  "email": ("email", "e-mail", "email address", "mail"),
                  "folder": ("folder", "submission", "login", "username", "user", "sis login id"),
                  "sis_user_id": ("sis user id",), "sis_login_id": ("sis login id",), "section": ("section",),
                  "integration_id": ("integration id",)}


def read_roster(path: Path) -> list[Student]:
    """A roster CSV with a header naming at least an id column (``id``, ``student id``...),
    and optionally ``name``, ``email`` and ``folder``. Raises ValueError on a bad file."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        columns = {}
        for key, names in ROSTER_COLUMNS.items():
            found = [h for h in (reader.fieldnames or []) if h and h.strip().lower() in names]
            if found:
                columns[key] = found[0]
        if "id" not in columns:
            raise ValueError(f"roster {path}: no student id column (one of: {', '.join(ROSTER_COLUMNS['id'])}) "
                             f"in the header {reader.fieldnames}")
        out = []
        for n, d in enumerate(reader, start=2):
            values = {k: (d.get(c) or "").strip() for k, c in columns.items()}
            if not any(values.values()) or values.get("name", "").strip().lower() in CANVAS_NOT_STUDENTS:
                continue
            if not values["id"]:
                raise ValueError(f"roster {path}, line {n}: the student id is empty")
            out.append(Student(**values))
    ids = [s.id for s in out]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"roster {path}: student ids appear twice: {', '.join(dupes)}")
    return out


# Rows of a Canvas gradebook export that are not students.
CANVAS_NOT_STUDENTS = ("points possible", "student, test")


def _key(text: str) -> str:
    """``text`` compared without case, punctuation or spaces; letters of any script kept
    ("de León, María" and Canvas's ``deleónmaría`` are one key)."""
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFC", text).casefold())


def _name_orders(name: str) -> list[str]:
    """A name in both orders: "Alice Smith" and "Smith, Alice" are also "smithalice" and
    "alicesmith" (Canvas names its download's files by the sortable name, "smithalice")."""
    if "," in name:
        last, _, first = name.partition(",")
    else:
        first, _, last = name.strip().rpartition(" ")
    return [name, f"{first} {last}", f"{last} {first}"] if first and last else [name]


def match_roster(folders: list[str], roster: list[Student], aliases: dict[str, list[str]] | None = None
                 ) -> tuple[dict[str, Student], list[str]]:
    """Which roster entry each submission is: its name, or one of its ``aliases`` (what
    an LMS's file names said: the student part and the LMS's user id, grading.lms),
    equals (ignoring case and punctuation) the entry's folder, id, email, the part of
    the email before ``@``, or name (in either order). Returns {submission: entry} and
    what could not be matched, for review."""
    found, problems = {}, []
    aliases = aliases or {}
    for folder in folders:
        mine = {_key(x) for x in (folder, *aliases.get(folder, [])) if _key(x)}
        keys = lambda s: {_key(x) for x in (*s.keys(), *(_name_orders(s.name) if s.name else [])) if x}
        hits = [s for s in roster if mine & keys(s)]
        if len(hits) == 1:
            found[folder] = hits[0]
        elif hits:
            problems.append(f"submission {folder} fits several roster entries: {', '.join(s.id for s in hits)}")
        else:
            problems.append(f"submission {folder} is not on the roster")
    taken = {}
    for folder, s in found.items():
        taken.setdefault(s.id, []).append(folder)
    for sid, folders_ in taken.items():
        if len(folders_) > 1:
            problems.append(f"roster entry {sid} fits several submissions: {', '.join(sorted(folders_))}")
    for s in roster:
        if s.id not in taken:
            problems.append(f"roster entry {s.id} ({s.name or s.email or 'no name'}) has no submission")
    return found, problems


def write_wide(out: Path, rows: list[Row], roster: list[Student] = (), matched: dict[str, Student] | None = None
               ) -> Path:
    """``gradebook_wide.csv``: one row per student (``student, id, name, email, total,
    max_total``, then one column per exercise, its points), for a spreadsheet or an
    LMS. A roster entry without a submission gets a row with empty grades; so does a
    chapter without a grade (:data:`NO_GRADE`), and ``total`` counts the chapters graded."""
    matched = matched or {}
    known = graded_chapters(rows)
    graded = [r for r in rows if r.exercise]
    exercises = sorted({r.exercise for r in graded}, key=exercise_order)
    students = sorted({r.student for r in rows})
    path = out / "gradebook_wide.csv"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(csv_row(["student", "id", "name", "email", "total", "max_total", *exercises]))
        for s in students:
            mine = {r.exercise: r for r in graded if r.student == s and (s, r.chapter) in known}
            who = matched.get(s, Student(""))
            total = [_num(sum(r.points for r in mine.values())), _num(sum(r.max_points for r in mine.values()))]
            w.writerow(csv_row([s, who.id, who.name, who.email, *(total if mine else ["", ""]),
                                *[_num(mine[e].points) if e in mine else "" for e in exercises]]))
        submitted = {x.id for x in matched.values()}
        for who in roster:
            if who.id not in submitted:
                w.writerow(csv_row(["", who.id, who.name, who.email, "", "", *["" for _ in exercises]]))
    os.replace(tmp, path)
    return path


CANVAS_FIELDS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"


# -- Canvas's assignments: which column of the course a chapter's grades update ----------------
# Canvas's gradebook import (GradebookImporter in Canvas's lib/gradebook_importer.rb) reads
# a column named "Title (id)" as the assignment with that id, else a column named exactly
# as an assignment's title as that one, and makes a new assignment of any other column.
# Its export names every assignment column "Title (id)".
CANVAS_ASSIGNMENT = re.compile(r"(?P<title>.*)\s\((?P<id>\d+)\)", re.S)
# The export's columns that are no assignment: the student's, and the scores Canvas computes
# (matched anywhere in the name, as the importer does: "Assignments Current Score",
# "Unposted Final Grade").
CANVAS_STUDENT_COLUMNS = ("Student", "LastName", "FirstName", "ID", "SIS User ID", "SIS Login ID", "Section",
                          "Integration ID", "Root Account")
CANVAS_COMPUTED = re.compile("Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade|"
                             "Override Score|Override Grade|Override Status")


@dataclass(frozen=True)
class CanvasAssignment:
    """An assignment column of Canvas's gradebook export."""

    header: str  # "Week 1: KV memory (90001)", as the export names the column
    title: str  # "Week 1: KV memory"
    id: str  # "90001"
    points: str = ""  # its cell in the export's Points Possible row


def read_canvas_assignments(path: Path) -> list[CanvasAssignment]:
    """The assignment columns of ``path`` when it is Canvas's gradebook export (the
    roster): every column named ``Title (id)`` that is neither a student's column nor a
    score Canvas computes, with its Points Possible cell. Empty for any other roster."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        table = list(csv.reader(f))
    if not table:
        return []
    header = [h.strip() for h in table[0]]
    points = next((row for row in table[1:] if row and CANVAS_POINTS_ROW in row[0]), [])
    out = []
    for n, name in enumerate(header):
        m = CANVAS_ASSIGNMENT.fullmatch(name)
        if m and name not in CANVAS_STUDENT_COLUMNS and not CANVAS_COMPUTED.search(name):
            out.append(CanvasAssignment(name, m["title"], m["id"], points[n].strip() if n < len(points) else ""))
    return out


def read_canvas_map(specs: list[str]) -> list[tuple[str, str, str]]:
    """``--canvas-assignments`` as (chapter, assignment, where it was said): each spec is
    ``CHAPTER=ASSIGNMENT`` (``1=90001``) or a CSV file with the header ``chapter,assignment``
    (for titles with commas, or many chapters). Raises ValueError naming a bad one."""
    out = []
    for spec in specs:
        path = Path(spec)
        if path.is_file():
            with open(path, newline="", encoding="utf-8-sig") as f:
                reader = csv.DictReader(f)
                header = {(h or "").strip().lower(): h for h in reader.fieldnames or []}
                if not {"chapter", "assignment"} <= set(header):
                    raise ValueError(f"--canvas-assignments {spec}: the header must be chapter,assignment "
                                     f"(got {reader.fieldnames})")
                for n, row in enumerate(reader, start=2):
                    chapter = (row[header["chapter"]] or "").strip()
                    assignment = (row[header["assignment"]] or "").strip()
                    if not chapter and not assignment:
                        continue
                    if not chapter or not assignment:
                        raise ValueError(f"--canvas-assignments {spec}, line {n}: needs a chapter and an assignment")
                    out.append((chapter, assignment, f"{spec}, line {n}"))
        elif "=" in spec:
            chapter, _, assignment = spec.partition("=")
            if not chapter.strip() or not assignment.strip():
                raise ValueError(f"--canvas-assignments {spec}: write CHAPTER=ASSIGNMENT, e.g. 1=90001")
            out.append((chapter.strip(), assignment.strip(), f"--canvas-assignments {spec}"))
        else:
            raise ValueError(f"--canvas-assignments {spec}: neither CHAPTER=ASSIGNMENT (1=90001) nor a file")
    return out


def _listed(course: list[CanvasAssignment], limit: int = 8) -> str:
    shown = ", ".join(a.header for a in course[:limit])
    return shown + (f" and {len(course) - limit} more" if len(course) > limit else "")


def canvas_columns(mapping: list[tuple[str, str, str]], course: list[CanvasAssignment], stems: list[str],
                   graded: list[str]) -> dict[str, CanvasAssignment]:
    """Which of the course's assignments (``course``: :func:`read_canvas_assignments`)
    each chapter's grades go to: those ``mapping`` names (:func:`read_canvas_map`; an
    assignment given as the export's column name, its id, or its exact title), and a
    graded chapter whose stem is exactly one assignment's title (what an earlier import of
    ``gradebook_canvas.csv`` made: Canvas's own rule, made sure by the id). ``stems``: every
    chapter; ``graded``: this run's. Raises ValueError naming a mapping that names no
    chapter or no assignment, several assignments (ambiguous), a chapter twice or an
    assignment twice, and a graded chapter whose stem several assignments have as title."""
    if mapping and not course:
        raise ValueError("--canvas-assignments needs --roster to be Canvas's gradebook export (Grades > Export), "
                         "whose header names the course's assignments, e.g. 'Week 1: KV memory (90001)'")
    out: dict[str, CanvasAssignment] = {}
    said: dict[str, str] = {}
    for chapter, wanted, where in mapping:
        stem = next((s for s in stems if chapter in (s, s[:2], str(int(s[:2])))), None)
        if stem is None:
            raise ValueError(f"{where}: no chapter {chapter!r} (give its number, 1, or its name, {stems[0]})")
        hits = ([a for a in course if a.header == wanted] or [a for a in course if a.id == wanted]
                or [a for a in course if a.title.strip() == wanted])
        if not hits:
            raise ValueError(f"{where}: no assignment {wanted!r} in the roster's header; Canvas's export names "
                             f"these: {_listed(course)}")
        if len(hits) > 1:
            raise ValueError(f"{where}: {wanted!r} is ambiguous, it names several assignments "
                             f"({', '.join(a.header for a in hits)}); give the id, e.g. {chapter}={hits[0].id}")
        if stem in out and out[stem] != hits[0]:
            raise ValueError(f"{where}: {stem} is mapped twice (also by {said[stem]})")
        other = next((s for s, a in out.items() if a == hits[0] and s != stem), None)
        if other:
            raise ValueError(f"{where}: {hits[0].header} is mapped to two chapters, {other} ({said[other]}) "
                             f"and {stem}; one assignment takes one chapter's points")
        out[stem], said[stem] = hits[0], where
    for stem in graded:
        titled = [a for a in course if a.title.strip() == stem]
        if stem in out or not titled or any(a in out.values() for a in titled):
            continue
        if len(titled) > 1:
            raise ValueError(f"several of the course's assignments are titled {stem} "
                             f"({', '.join(a.header for a in titled)}): Canvas would update one of them; name it "
                             f"with --canvas-assignments {int(stem[:2])}=ID")
        out[stem] = titled[0]
    return out


def unmapped_chapters(graded: list[str], columns: dict[str, CanvasAssignment], course: list[CanvasAssignment]
                      ) -> list[str]:
    """needs_review.md's lines for this run's chapters that go to none of the course's
    assignments although the roster (Canvas's export) lists some: Canvas's import makes
    a new assignment of each."""
    if not course:
        return []
    return [f"gradebook_canvas.csv: {stem} goes to none of the course's assignments, so Canvas's import makes a "
            f"new assignment named {stem}; to update one of them instead, rerun with --resume and "
            f"--canvas-assignments {int(stem[:2])}=ID (the roster names {_listed(course, 4)})"
            for stem in graded if stem not in columns]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def write_canvas(out: Path, rows: list[Row], roster: list[Student] = (), matched: dict[str, Student] | None = None,
                 columns: dict[str, CanvasAssignment] | None = None) -> tuple[Path, list[str]]:
    """``gradebook_canvas.csv`` in the layout of Canvas's gradebook import (the layout
    Canvas's own export has): ``Student, ID, SIS User ID, SIS Login ID, Section``, then
    one column per chapter graded (its points, the sum of its exercises'), and under the
    header a ``Points Possible`` row with each chapter's maximum. Canvas identifies a
    student by ``ID`` (its user id), ``SIS User ID`` or ``SIS Login ID``: those come from
    the roster (``--roster``: Canvas's own export works as it is). A submission that no
    roster entry matched has no id Canvas could use: it is left out and named in the
    returned problems (for needs_review.md). A chapter the student has no grade for
    (nothing handed in, or a notebook waiting for review: :data:`NO_GRADE`) is an empty
    cell, never a 0 the grader did not give. ``columns`` (:func:`canvas_columns`): a
    chapter's column is named as the course's assignment it updates (``Week 1: KV memory
    (90001)``, as Canvas's export names it; its Points Possible cell the export's), else by
    the chapter (``01_kv_memory``: a new assignment). Returns the path and the problems."""
    matched, columns = matched or {}, columns or {}
    known = graded_chapters(rows)
    graded = [r for r in rows if r.exercise]
    chapters = sorted({r.chapter for r in graded})
    possible = {c: max((sum(r.max_points for r in graded if r.chapter == c and r.student == s)
                        for s in {r.student for r in graded}), default=0) for c in chapters}
    path = out / "gradebook_canvas.csv"
    tmp = path.with_name(path.name + ".tmp")
    problems = []
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(csv_row([*CANVAS_FIELDS, *[columns[c].header if c in columns else c for c in chapters]]))
        w.writerow(csv_row([CANVAS_POINTS_ROW, "", "", "", "",
                            *[columns[c].points if columns.get(c) and columns[c].points else _num(possible[c])
                              for c in chapters]]))
        for c in chapters:
            theirs = _number(columns[c].points) if c in columns else None
            if theirs is not None and abs(theirs - possible[c]) > 1e-9:
                problems.append(f"gradebook_canvas.csv: {columns[c].header} is worth {columns[c].points} points in "
                                f"Canvas, {c} {_num(possible[c])} here; the import writes the grader's points, so "
                                f"full marks show as {_num(possible[c])} / {columns[c].points}: set the "
                                f"assignment's points to {_num(possible[c])} in Canvas, or rescale")
        students = sorted({r.student for r in rows})
        claims: dict[str, list[str]] = {}
        for s in students:
            if s in matched:
                claims.setdefault(matched[s].id, []).append(s)
        for s in students:
            who = matched.get(s)
            if who is None:
                problems.append(f"gradebook_canvas.csv: {s} is left out (no roster entry, so no Canvas id)")
                continue
            if len(claims[who.id]) > 1:  # Canvas would keep one of the rows; which is not ours to guess
                if s == claims[who.id][0]:
                    problems.append(f"gradebook_canvas.csv: Canvas id {who.id} is left out: several submissions "
                                    f"({', '.join(claims[who.id])}) are that student; grade it by hand")
                continue
            mine = [r for r in graded if r.student == s]
            w.writerow(csv_row([who.name or s, who.id, who.sis_user_id, who.sis_login_id, who.section,
                                *[_num(sum(r.points for r in mine if r.chapter == c)) if (s, c) in known else ""
                                  for c in chapters]]))
    os.replace(tmp, path)
    return path, problems


# -- feedback ---------------------------------------------------------------------------
STATUS_ADVICE = {
    TIMED_OUT: "Look for an infinite loop, or training at the top level of a cell; move long runs into a "
               "function or a cell tagged `skip-grading`.",
    MEMORY: "Something allocates far more memory than the exercise needs; check sizes (and units) in your cells.",
    CRASHED: "The notebook ended the grading process (a segfault, `sys.exit()`, `os._exit()` or a kill). "
             "Run it top to bottom in a fresh kernel.",
    TAMPERED: "Your notebook interfered with the grader. This chapter scores zero; talk to your instructor.",
    MISSING: "No notebook for this chapter was found in your submission.",
}
# What a chapter without a grade (NO_GRADE) says instead of points.
NO_GRADE_TEXT = {
    MISSING: "No notebook for this chapter was found in your submission; no grade was given for it.",
    REVIEW: "Your instructor will review this chapter by hand; no grade was given for it yet.",
}


# A hidden test's id as the judge reports it (grading.child.Collector.stable): never shown
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
    lines = [f"# Feedback for {student}", "", f"**Total: {_num(total)} / {_num(possible)} points{not_counted}.**", ""]
    for r in rows:
        if r.chapter == "" and r.status in (REVIEW, NOTE):
            lines.append(f"- {student_text(r.message)}")
    for chapter in chapters:
        mine = [r for r in rows if r.chapter == chapter]
        ex = [r for r in mine if r.exercise]
        if chapter in ungraded:
            lines += ["", f"## {chapter}: no grade yet", ""]
            for status in dict.fromkeys(r.status for r in ex):
                lines += [f"> **{status}**: {NO_GRADE_TEXT.get(status, '')}", ""]
            # The reason, once per distinct message; a hidden row's message is the instructor's.
            for text in dict.fromkeys(r.message for r in ex if r.message and r.status != MISSING
                                      and not r.exercise.endswith(" hidden")):
                lines.append(f"- {student_text(text)}")
            notes = [r for r in mine if not r.exercise]
            if notes:
                lines += ["", "Notes:"] + [f"- {student_text(r.message)}" for r in notes]
            continue
        lines += ["", f"## {chapter}: {_num(sum(r.points for r in ex))} / {_num(sum(r.max_points for r in ex))}", ""]
        statuses = {r.status for r in mine}
        for status, advice in STATUS_ADVICE.items():
            if status in statuses:
                lines += [f"> **{status}**: {advice}", ""]
        for r in ex:
            name = f"Exercise {r.exercise}" if r.exercise[0].isdigit() else r.exercise
            if r.exercise.endswith(" hidden"):
                name = f"Exercise {r.exercise.split()[0]}, further tests (not published)"
                text = ("" if r.status == PASSED or r.status in STATUS_ADVICE else
                        r.message if r.status == OVERRIDDEN else "some of these tests did not pass")
            else:
                # Chapter-wide reasons are said once, above and below the list.
                text = "" if r.status in (TIMED_OUT, CRASHED, TAMPERED, MISSING) else r.message
            text = f". {student_text(text)}" if text else ""
            lines.append(f"- **{name}**: {_num(r.points)} / {_num(r.max_points)}, {r.status}{text}")
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
    path.write_text(feedback_markdown(student, rows), encoding="utf-8")
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
        stray = r.status == NOTE and not r.chapter and UNMATCHED in r.message
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
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
