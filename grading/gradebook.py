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
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from grading.outcome import FOR_REVIEW, Status, describe_signal, earned

FIELDS = ["student", "chapter", "exercise", "points", "max_points", "status", "message"]
PASSED, FAILED, NOT_ATTEMPTED, ERROR = Status.PASSED, Status.FAILED, Status.NOT_ATTEMPTED, Status.ERROR
TIMED_OUT, MEMORY, CRASHED, TAMPERED = Status.TIMED_OUT, Status.MEMORY, Status.CRASHED, Status.TAMPERED
REVIEW, MISSING, SKIPPED, NOTE = Status.REVIEW, Status.MISSING, Status.SKIPPED, Status.NOTE
# A process that died of memory leaves only words in its output (no exception to classify).
MEMORY_WORDS = re.compile(r"MemoryError|can't allocate memory|DefaultCPUAllocator|std::bad_alloc|"
                          r"Cannot allocate memory|out of memory", re.I)
MESSAGE_CHARS = 400


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
        return d


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
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
        fn = groups[label].setdefault((t["path"], t["function"]), {"points": t["points"], "nodeids": [], "skip": []})
        fn["nodeids"].append(t["nodeid"])
        fn["skip"].append(bool(t.get("skip")))
    return dict(sorted(groups.items(), key=lambda kv: exercise_order(kv[0])))


def max_points(functions: dict) -> float:
    return sum(f["points"] for f in functions.values() if not all(f["skip"]))


def zero_rows(student: str, chapter: str, tests: list[dict], status: str, message: str) -> list[Row]:
    """Every exercise of a chapter at zero with one status: missing, timed out, crashed..."""
    groups = group_plan(tests)
    if not groups:
        return [Row(student, chapter, "", 0, 0, status, message)]
    return [Row(student, chapter, label, 0, max_points(fns), status, message) for label, fns in groups.items()]


def graded_rows(student: str, chapter: str, tests: list[dict], outcomes: dict[str, dict],
                review: dict[str, str] | None = None, memory_note: str = "") -> list[Row]:
    """Rows from the outcomes of a chapter that ran to the end. A test function is
    worth its points; its parametrized cases share them (partial credit)."""
    review = review or {}
    rows = []
    for label, functions in group_plan(tests).items():
        points = possible = 0.0
        failures: list[dict] = []
        failed_names: list[str] = []
        passed_any = False
        for (_, function), fn in functions.items():
            graded = passed = 0
            for nodeid in fn["nodeids"]:
                o = outcomes.get(nodeid)
                if o is None:
                    o = {"outcome": "failed", "message": "this test did not run", "exc_type": ""}
                if o["outcome"] == "skipped":
                    continue
                graded += 1
                if o["outcome"] == "passed":
                    passed += 1
                else:
                    failures.append(o)
                    if function not in failed_names:
                        failed_names.append(function)
            if graded:
                points += earned(fn["points"], passed, graded)
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
            # The plugin's one-line summary; a failure outside a test body (a fixture, setup)
            # has only pytest's text, cut to its first lines.
            first = failures[0]
            message = first.get("summary") or re.sub(rf"^Exercise {re.escape(exercise)}:? ", "",
                                                      one_line(first["message"]))
        # Each failing test's status was decided in the grading process from its exception.
        not_impl = all(f.get("status") == NOT_ATTEMPTED for f in failures)
        memory = any(f.get("status") == MEMORY for f in failures)
        if memory or memory_note:
            status = MEMORY
            message = f"{memory_note}; {message}" if memory_note else message
        elif not_impl and not passed_any:
            status = NOT_ATTEMPTED
        elif exercise in review:
            status = REVIEW
            message = f"{review[exercise]}; {message}"
        elif passed_any or any(f.get("status") == FAILED for f in failures):
            status = FAILED
        else:
            status = ERROR
        if len(failures) > 1 and not hidden and status != NOT_ATTEMPTED:
            message += f" (and {len(failures) - 1} more failing case{'s' if len(failures) > 2 else ''})"
        rows.append(Row(student, chapter, label, points, possible, status, message))
    return rows


# -- the file -------------------------------------------------------------------------
def task_id(student: str, chapter: str) -> str:
    return f"{student}\t{chapter}"


class Gradebook:
    """``gradebook.csv`` appended row by row, with ``.done`` recording finished tasks."""

    def __init__(self, out: Path, resume: bool):
        self.out = out
        self.path = out / "gradebook.csv"
        self.done_path = out / ".done"
        self.lock = threading.Lock()
        self.rows: list[Row] = []
        self.done: set[str] = set()
        out.mkdir(parents=True, exist_ok=True)
        if resume and self.path.exists() and self.done_path.exists():
            self.done = {line for line in self.done_path.read_text().splitlines() if line}
            with open(self.path, newline="", encoding="utf-8") as f:
                for d in csv.DictReader(f):
                    if task_id(d["student"], d["chapter"]) in self.done:
                        self.rows.append(Row(d["student"], d["chapter"], d["exercise"], float(d["points"] or 0),
                                             float(d["max_points"] or 0), d["status"], d["message"]))
        self._rewrite(self.rows)
        self.done_path.write_text("".join(f"{t}\n" for t in sorted(self.done)))

    def _rewrite(self, rows: list[Row]):
        tmp = self.path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            for r in rows:
                w.writerow(r.as_csv())
        os.replace(tmp, self.path)

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
        """Sort the file so that a regrade gives the same file, not just the same rows."""
        with self.lock:
            self.rows.sort(key=lambda r: (r.student, r.chapter == "", r.chapter, exercise_order(r.exercise)))
            self._rewrite(self.rows)

    def student_rows(self, student: str) -> list[Row]:
        return [r for r in self.rows if r.student == student]


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


def feedback_markdown(student: str, rows: list[Row]) -> str:
    """What one student reads: per exercise, points and a message they can act on.
    Hidden tests appear as points only."""
    graded = [r for r in rows if r.exercise]
    total, possible = sum(r.points for r in graded), sum(r.max_points for r in graded)
    lines = [f"# Feedback for {student}", "", f"**Total: {_num(total)} / {_num(possible)} points.**", ""]
    for r in rows:
        if r.chapter == "" and r.status in (REVIEW, NOTE):
            lines.append(f"- {r.message}")
    chapters = sorted({r.chapter for r in rows if r.chapter})
    for chapter in chapters:
        mine = [r for r in rows if r.chapter == chapter]
        ex = [r for r in mine if r.exercise]
        lines += ["", f"## {chapter}: {_num(sum(r.points for r in ex))} / {_num(sum(r.max_points for r in ex))}", ""]
        statuses = {r.status for r in mine}
        for status, advice in STATUS_ADVICE.items():
            if status in statuses:
                lines += [f"> **{status}**: {advice}", ""]
        for r in ex:
            name = f"Exercise {r.exercise}" if r.exercise[0].isdigit() else r.exercise
            if r.exercise.endswith(" hidden"):
                name = f"Exercise {r.exercise.split()[0]}, further tests (not published)"
                text = "" if r.status == PASSED or r.status in STATUS_ADVICE else "some of these tests did not pass"
            else:
                # Chapter-wide reasons are said once, above and below the list.
                text = "" if r.status in (TIMED_OUT, CRASHED, TAMPERED, MISSING) else r.message
            text = f". {text}" if text else ""
            lines.append(f"- **{name}**: {_num(r.points)} / {_num(r.max_points)}, {r.status}{text}")
        chapter_notes = [r for r in mine if not r.exercise]
        if chapter_notes:
            lines += ["", "Notes:"]
            lines += [f"- {r.message}" for r in chapter_notes]
        for r in ex:
            if r.status in (TIMED_OUT, CRASHED, TAMPERED) and r.message:
                lines += ["", f"What happened: {r.message}"]
                break
    return "\n".join(lines).rstrip() + "\n"


def write_feedback(out: Path, student: str, rows: list[Row]) -> Path:
    folder = out / "feedback"
    folder.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^\w.@+-]+", "_", student) or "student"
    path = folder / f"{safe}.md"
    path.write_text(feedback_markdown(student, rows), encoding="utf-8")
    return path


def write_review_list(out: Path, rows: list[Row], sandbox_line: str = "") -> Path:
    """``needs_review.md``: every row that wants a human look, and how the children were
    isolated (a run without the sandbox says so at the top, where it cannot be missed)."""
    path = out / "needs_review.md"
    flagged: dict[tuple, list[str]] = {}
    for r in rows:
        if r.status in FOR_REVIEW:  # one line for a chapter whose exercises share one reason
            flagged.setdefault((r.student, r.chapter, r.status, r.message), []).append(r.exercise)
    lines = ["# Needs a human look", ""]
    if sandbox_line:
        lines += [f"**{sandbox_line}**" if sandbox_line.startswith("sandbox: none") else sandbox_line, ""]
    if not flagged:
        lines.append("Nothing: every chapter was graded normally.")
    for (student, chapter, status, message), exercises in flagged.items():
        what = [e for e in exercises if e]
        where = (chapter or "submission") + (f" ({', '.join(what)})" if what else "")
        lines.append(f"- **{student}**, {where}: {status}. {message}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
