"""Grade a folder of submissions: ``python -m grading.batch SUBMISSIONS --out DIR``.

Each entry of SUBMISSIONS is one student: a folder of notebooks, or a ``.zip`` of
one. Notebooks are matched to chapters by name (renamed copies are fine; what
cannot be matched is reported). Every student and chapter is graded in a child
process of its own (:mod:`grading.runner`), several at a time, under a wall-clock
timeout and a memory limit. The results:

  DIR/gradebook.csv      student, chapter, exercise, points, max_points, status, message
                         (appended as each chapter finishes; sorted at the end)
  DIR/gradebook_wide.csv one row per student: id, name, email (--roster), total, one column per exercise
  DIR/gradebook_canvas.csv  the same points in Canvas's gradebook import layout (ids from --roster;
                         a chapter's column names the course's assignment it updates, --canvas-assignments)
  DIR/feedback/<student>.md   what each student reads
  DIR/needs_review.md    timeouts, crashes, memory limits, tampering, unreadable notebooks,
                         notebooks no chapter claimed, roster and overrides problems

``--overrides FILE`` (student, exercise, points, reason) corrects grades on every run;
``--resume`` regrades a student whose files changed (content hashes); ``--due`` and
``--late-penalty`` take points from late work (:mod:`grading.late`). SUBMISSIONS may be
an LMS's bulk download as it comes (:mod:`grading.lms`). Without ``--chapters``, the
chapters graded are those the submissions hold notebooks of.

Statuses: passed, failed, not attempted, error, timed out, memory limit, crashed,
tampered, needs review, missing, skipped (a GPU test without a GPU), note.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from grading import gradebook as gb
from grading import sandbox
from grading.layout import EXERCISE_LINE, EXERCISES, GRADES, ROOT, SOLUTIONS, cell_source, discover_chapters
from grading.matching import (Chapter, Submission, entry_kind, list_students, match_folder,
                              submission_digest, unpack_zip)
from grading.loader import MAX_CAPTURED_CHARS
from grading.outcome import TestOutcome
from grading.runner import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, OUTPUT_CAP, ChildResult, kill_all, run_child

MAX_NOTEBOOK_BYTES = 50 * 2**20
# The packages of this repository the judge imports: every file in them is fingerprinted,
# so a list kept by hand cannot drift (grading.diagnosis and grading.triton_bounds once
# fell out of one).
GRADER_PACKAGES = ("grading", "gpucompile", "distlab", "modellab")
WATCHED_PACKAGES = ("torch", "numpy", "pytest", "_pytest", "pluggy", "nbformat")


@dataclass
class Task:
    student: str
    chapter: Chapter
    notebook: Path | None  # None: missing
    note: str = ""  # why it is missing / ambiguous


# -- what must not change while we grade ------------------------------------------------
def fingerprint(chapters: list[Chapter], hidden: list[Path]) -> dict[str, str]:
    """Hashes of the graders in use (grading/, the chapters' tests and references, the
    hidden tests) and the size and mtime of the top-level files of the packages the
    graders trust. A child that changes them (through a subprocess, which the audit
    hook cannot see) is caught afterwards."""
    files = [p for package in GRADER_PACKAGES for p in sorted((ROOT / package).glob("*.py"))]
    files += [ROOT / "tests" / "__init__.py", ROOT / "tests" / "conftest.py", *hidden]
    files.append(ROOT / "tests" / "references" / "__init__.py")
    for c in chapters:
        # ref_NN_topic.py and the modules beside it (ref_07_triton_jit.py)
        files += [c.test_file, *sorted((ROOT / "tests" / "references").glob(f"ref_{c.stem[:2]}_*.py"))]
    out = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.exists()}
    import importlib.util

    for name in WATCHED_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        for folder in spec.submodule_search_locations:
            for path in sorted(Path(folder).glob("*.py")):
                st = path.stat()
                out[str(path)] = f"{st.st_size}:{st.st_mtime_ns}"
    return out


# -- a notebook's shape -------------------------------------------------------------------
def exercise_cells(path: Path) -> list[str] | str:
    """The exercise ids of the notebook's code cells, in order; or why it is unreadable."""
    import nbformat

    try:
        size = path.stat().st_size
        if size == 0:
            return "the notebook file is empty"
        if size > MAX_NOTEBOOK_BYTES:
            return f"the notebook is {size // 2**20} MB, too large to grade (outputs saved in it?)"
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:
        return f"the notebook is not valid notebook JSON ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    code = [c for c in nb.cells if c.get("cell_type") == "code"]
    if not code:
        return "the notebook has no code cells"
    ids = []
    for c in code:
        ids += [m.group(1) for line in cell_source(c).splitlines() if (m := EXERCISE_LINE.match(line))]
    return ids


def structure_review(student_ids: list[str], solution_ids: list[str]) -> tuple[dict[str, str], list[str]]:
    """Exercises whose cells were deleted, duplicated or moved (compared with the
    solution): {exercise: reason} for exercises that need a look if they fail, and notes."""
    review, notes = {}, []
    for ex in dict.fromkeys(solution_ids):
        n = student_ids.count(ex)
        if n == 0:
            review[ex] = f"the cell of Exercise {ex} is missing from the notebook (deleted?)"
        elif n > 1:
            review[ex] = f"the cell of Exercise {ex} appears {n} times (the last one counts)"
            notes.append(review[ex])
    present = [ex for ex in dict.fromkeys(student_ids) if ex in solution_ids]
    expected = [ex for ex in dict.fromkeys(solution_ids) if ex in present]
    if present != expected:
        moved = [a for a, b in zip(present, expected) if a != b]
        notes.append("exercise cells are in a different order than in the exercise notebook: " + ", ".join(present))
        for ex in moved:
            review.setdefault(ex, f"the cell of Exercise {ex} was moved")
    return review, notes


def stream_problems(r: ChildResult, planned: set[str]) -> list[str]:
    """What in a child's outcome lines could not come from one honest grading process:
    a test reported twice (the process was forked, or lines were forged), a test that
    was never planned, or lines after the end. Any of these voids the chapter."""
    problems, seen, done = [], set(), False
    for line in r.lines:
        if done:
            problems.append("outcome lines arrived after the grading process said it was done")
            break
        if line.get("kind") == "done":
            done = True
        elif line.get("kind") == "test":
            nodeid = line.get("nodeid")
            if nodeid in seen:
                problems.append(f"a test was reported twice ({nodeid}): the grading process was forked "
                                "or its results were written by the notebook")
                break
            if nodeid not in planned:
                problems.append(f"an unknown test was reported ({str(nodeid)[:80]})")
                break
            seen.add(nodeid)
    return problems


# -- one task -------------------------------------------------------------------------------
@dataclass
class GradeConfig:
    """What grading one student's chapter takes: every front door (this command, the
    Gradescope autograder, nbgrader's autograder cells) builds one and hands it to :class:`Grader`."""

    out: Path
    submissions: Path
    timeout: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    threads: int = 1
    cuda_devices: str = ""
    extra_tests: Path | None = None

    @classmethod
    def from_args(cls, args) -> "GradeConfig":
        return cls(out=args.out, submissions=args.submissions, timeout=args.timeout, memory_mb=args.memory_mb,
                   threads=args.threads, cuda_devices=args.cuda_devices, extra_tests=args.extra_tests)


class Grader:
    """Grades tasks (one student's chapter each) with one configuration: ``prepare()`` once,
    then ``grade_safely(task)`` per task, from any thread."""

    def __init__(self, args: GradeConfig, chapters: list[Chapter], hidden: dict[str, list[Path]]):
        self.args = args
        self.chapters = chapters
        self.hidden = hidden
        self.plan: dict[str, list[dict]] = {}
        self.solution_ids: dict[str, list[str]] = {}
        self.baseline: dict[str, str] = {}
        self.compromised = ""
        self.peak_rss: dict[tuple[str, str], float] = {}  # (student, chapter) -> MiB, as the child reported
        self.devices = itertools.cycle([d for d in args.cuda_devices.split(",") if d.strip()] or [""])
        self.device_lock = threading.Lock()

    def prepare(self):
        """Fingerprint the graders (a change while grading stops the run) and collect the plan."""
        self.baseline = fingerprint(self.chapters, [p for ps in self.hidden.values() for p in ps])
        self.collect_plan()

    def grade_safely(self, task: "Task") -> list[gb.Row] | None:
        """The task's rows; a failure of ours costs this chapter (needs review), not the run;
        None once the graders were found changed."""
        if self.compromised:
            return None
        try:
            return self.grade(task)
        except Exception as exc:  # a bug of ours must cost one chapter, not the run
            return gb.zero_rows(task.student, task.chapter.stem, self.plan[task.chapter.stem], gb.REVIEW,
                                f"the grader failed on this chapter: {type(exc).__name__}: {exc}")

    def collect_plan(self):
        """Which tests each chapter has, their exercises and points (one collect-only child)."""
        files = [str(c.test_file) for c in self.chapters]
        hidden = [str(p) for ps in self.hidden.values() for p in ps]
        result = run_child({"test_files": files, "hidden_files": hidden, "collect_only": True},
                           timeout=max(self.args.timeout, 300), memory_mb=0, threads=1, hide=self.hide)
        plans = result.of("plan")
        if not plans or not plans[0]["tests"]:
            raise SystemExit("could not collect the graders:\n" + result.output[-3000:])
        errors = result.of("collect_error")
        if errors:
            raise SystemExit("the graders do not import:\n" + errors[0]["message"])
        for c in self.chapters:
            mine = {str(c.test_file.resolve())} | {f"hidden/{p.name}" for p in self.hidden.get(c.stem, [])}
            self.plan[c.stem] = [t for t in plans[0]["tests"] if t["path"] in mine]
            # The exercise cells' order; a tree without solutions (the autograder) has the stubs'.
            source = SOLUTIONS / f"{c.stem}.ipynb"
            ids = exercise_cells(source if source.exists() else EXERCISES / f"{c.stem}.ipynb")
            self.solution_ids[c.stem] = ids if isinstance(ids, list) else []

    def grade(self, task: Task) -> list[gb.Row]:
        s, stem = task.student, task.chapter.stem
        tests = self.plan[stem]
        if task.notebook is None:
            status = gb.REVIEW if task.note else gb.MISSING
            return gb.zero_rows(s, stem, tests, status, task.note or f"no notebook for {stem} in the submission")
        ids = exercise_cells(task.notebook)
        if isinstance(ids, str):
            return gb.zero_rows(s, stem, tests, gb.REVIEW, ids)
        review, notes = structure_review(ids, self.solution_ids.get(stem, []))
        files = {f"{stem}.ipynb": str(task.notebook)}
        for h in self.hidden.get(stem, []):
            hidden_stem = h.stem[len("test_"):]
            files.setdefault(f"{hidden_stem}.ipynb", str(task.notebook))
        with self.device_lock:
            device = next(self.devices)
        spec = {"chapter": stem, "test_files": [str(task.chapter.test_file)],
                "hidden_files": [str(h) for h in self.hidden.get(stem, [])], "notebook_files": files}
        result = run_child(spec, timeout=self.args.timeout, memory_mb=self.args.memory_mb,
                           threads=self.args.threads, cuda_devices=device, hide=self.hide)
        if result.peak_rss_mb is not None:
            self.peak_rss[(s, stem)] = result.peak_rss_mb
        rows = self.rows_from(s, stem, tests, result, review, notes)
        now = fingerprint(self.chapters, [p for ps in self.hidden.values() for p in ps])
        # Files that appeared since are ignored: nothing imports them.
        changed = sorted(k for k in self.baseline if now.get(k) != self.baseline[k])
        if changed:
            self.compromised = f"{s} / {stem} changed {', '.join(changed[:5])}"
            rows = gb.zero_rows(s, stem, tests, gb.TAMPERED, "files of the grader or of installed packages changed "
                                f"while this chapter was graded: {', '.join(Path(c).name for c in changed[:5])}")
        return rows

    @property
    def hide(self) -> list[Path]:
        """What a sandboxed child must not see: the gradebook, the class's submissions
        (another student's notebook), the hidden tests' folder."""
        return [p for p in (self.args.out, self.args.submissions.resolve(), self.args.extra_tests) if p]

    def rows_from(self, s: str, stem: str, tests: list[dict], r: ChildResult, review: dict,
                  notes: list[str]) -> list[gb.Row]:
        limit = f"{self.args.memory_mb} MB"
        if r.timed_out:
            return gb.zero_rows(s, stem, tests, gb.TIMED_OUT,
                                f"grading this chapter took longer than {self.args.timeout:g} s and was stopped")
        tamper = [v for line in r.of("tamper") for v in line["violations"]]
        tamper += stream_problems(r, {t["nodeid"] for t in tests})
        if tamper:
            return gb.zero_rows(s, stem, tests, gb.TAMPERED, "; ".join(tamper)[:gb.MESSAGE_CHARS])
        if not r.finished:
            if gb.MEMORY_WORDS.search(r.output):
                return gb.zero_rows(s, stem, tests, gb.MEMORY, f"the notebook ran out of memory (limit {limit})")
            return gb.zero_rows(s, stem, tests, gb.CRASHED, gb.crash_text(r.returncode))
        errors = r.of("collect_error")
        if errors:
            why = "the graders could not run: " + (errors[0].get("summary") or gb.one_line(errors[0]["message"]))
            return gb.zero_rows(s, stem, tests, gb.REVIEW, why)
        try:
            outcomes = {o.nodeid: o for o in map(TestOutcome.from_json, r.of("test"))}
        except ValueError as exc:  # only our own judge writes these lines: a bug, for review
            return gb.zero_rows(s, stem, tests, gb.REVIEW, f"the judge's outcome lines could not be read: {exc}")
        load = (r.of("load") or [{"problems": []}])[0]
        unreadable = [p for p in load["problems"] if p["kind"] == "unreadable"]
        if unreadable:
            return gb.zero_rows(s, stem, tests, gb.REVIEW, gb.one_line(unreadable[0]["message"]))
        memory_note = ""
        for p in load["problems"]:
            if p["kind"] == "error" and p.get("memory"):
                memory_note = f"cell {p['cell']} ran out of memory (limit {limit})"
                break
        # Advice only (no points depend on it), kept to exercises that failed and cut to size.
        diagnoses = {str(d.get("exercise")): gb.one_line(str(d.get("message", "")), 400)
                     for line in r.of("diagnosis")[:1] for d in line.get("diagnoses", [])[:50]}
        rows = gb.graded_rows(s, stem, tests, outcomes, review, memory_note, diagnoses)
        if memory_note:
            rows.append(gb.Row(s, stem, "", 0, 0, gb.MEMORY, memory_note))
        for p in load["problems"]:
            if p["kind"] == "error" and memory_note and p.get("memory"):
                continue
            if p["kind"] == "skipped":
                text = f"cell {p['cell']}: {p['message']} (not run by the grader)"
                rows.append(gb.Row(s, stem, "", 0, 0, gb.NOTE, text))
            elif p["kind"] == "error":
                text = f"cell {p['cell']} raised {gb.one_line(p['message'], 300)}"
                rows.append(gb.Row(s, stem, "", 0, 0, gb.NOTE, text))
        rows += [gb.Row(s, stem, "", 0, 0, gb.NOTE, n) for n in notes]
        if load.get("output_chars", 0) >= MAX_CAPTURED_CHARS:
            rows.append(gb.Row(s, stem, "", 0, 0, gb.NOTE, f"the notebook printed more than {MAX_CAPTURED_CHARS} "
                                                           "characters; the rest of its output was discarded"))
        elif r.output_bytes > OUTPUT_CAP:
            rows.append(gb.Row(s, stem, "", 0, 0, gb.NOTE, f"the notebook printed more than {OUTPUT_CAP // 1024} KB; "
                                                           "the rest of its output was discarded"))
        return rows


# -- one submission ---------------------------------------------------------------------------
def submission_rows(student: str, sub: Submission, chapters: list[Chapter]) -> list[gb.Row]:
    """Rows about the whole submission: a zip that could not be read, notebooks no
    chapter claimed (needs review when a chapter is missing, a note otherwise; both
    are listed in needs_review.md)."""
    rows = []
    if sub.problem:
        rows.append(gb.Row(student, "", "", 0, 0, gb.REVIEW, sub.problem))
    missing_any = any(c.stem not in sub.notebooks for c in chapters)
    for name, reason in sub.unmatched:
        rows.append(gb.Row(student, "", "", 0, 0, gb.REVIEW if missing_any else gb.NOTE,
                           f"{name} {gb.UNMATCHED}: {reason}"))
    return rows


def submission_tasks(student: str, sub: Submission, chapters: list[Chapter]) -> list[Task]:
    """One task per chapter, with why a chapter's notebook is missing or ambiguous. A
    chapter without a notebook beside notebooks no chapter claimed is not missing: one of
    those may be it, and a person decides (needs review, no grade until then)."""
    tasks = []
    unplaced = [name for name, _ in sub.unmatched]
    for c in chapters:
        note = ""
        if c.stem in sub.ambiguous:
            note = f"several different notebooks could be {c.stem}: {', '.join(sub.ambiguous[c.stem])}; keep one"
        elif sub.problem:
            note = sub.problem
        elif c.stem not in sub.notebooks and unplaced:
            note = (f"no notebook is named as {c.stem}, and {', '.join(unplaced)} "
                    f"{'was' if len(unplaced) == 1 else 'were'} not matched to a chapter: "
                    "waiting for the instructor's review")
        tasks.append(Task(student, c, sub.notebooks.get(c.stem), note))
    return tasks


def open_submission(student: str, entry: Path, chapters: list[Chapter], scratch: Path, n: int = 0) -> Submission:
    """A student's entry (a folder, or a zip unpacked into ``scratch``), matched to chapters.
    An entry that is a link, a FIFO or a device, or whose files cannot be read, is a
    problem of this student's (for review), never the class's."""
    kind = entry_kind(entry)
    if kind:
        return Submission(student, problem=f"{entry.name} {kind}; it is not graded")
    folder, problem = entry, ""
    try:
        if entry.suffix.lower() == ".zip" and entry.is_file():
            folder = scratch / f"{n:05d}-{re.sub(r'[^A-Za-z0-9]+', '_', student)}"
            problem = unpack_zip(entry, folder)
        # A zip unpacked or an LMS's files gathered (grading.lms) are our copies, under scratch:
        # what the student reads names their files, never our folders.
        copied = folder.resolve().is_relative_to(scratch.resolve())
        return Submission(student, problem=problem) if problem else match_folder(student, folder, chapters, copied)
    except OSError as exc:
        return Submission(student, problem=f"the submission's files could not be read ({os_error_text(exc)}); "
                                           "it is not graded")


def os_error_text(exc: OSError) -> str:
    """An OSError as a student may read it: what went wrong and the file's name, without
    the folder (a scratch folder of ours, or the instructor's)."""
    name = Path(exc.filename).name if getattr(exc, "filename", None) else ""
    return f"{exc.strerror or type(exc).__name__}" + (f": {name}" if name else "")


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


def hidden_tests(folder: Path | None, chapters: list[Chapter]) -> dict[str, list[Path]]:
    """Hidden test files, by chapter: ``test_NN_anything.py`` belongs to chapter NN."""
    out: dict[str, list[Path]] = {}
    if folder is None:
        return out
    for path in sorted(folder.glob("test_*.py")):
        m = re.match(r"^test_(\d\d)_", path.name)
        chapter = next((c for c in chapters if m and c.number == int(m.group(1))), None)
        if chapter is None:
            print(f"warning: hidden test {path.name} names no chapter being graded (test_NN_....py); ignored",
                  file=sys.stderr)
            continue
        out.setdefault(chapter.stem, []).append(path.resolve())
    return out


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
                        "student whose files changed since (content hashes)")
    p.add_argument("--roster", type=Path, default=None,
                   help="CSV with a header naming a student id column and optionally name, email, folder: "
                        "maps submission names to ids in gradebook_wide.csv (Canvas's gradebook export works "
                        "as it is)")
    p.add_argument("--canvas-assignments", action="append", default=[], metavar="CHAPTER=ASSIGNMENT|FILE",
                   help="the course's assignment a chapter's grades update in gradebook_canvas.csv, named as in "
                        "--roster (Canvas's export) by id, column name or exact title, e.g. 1=90001; or a CSV "
                        "file with the header chapter,assignment; may be given several times")
    p.add_argument("--overrides", type=Path, default=None,
                   help="CSV with the header student,exercise,points,reason: an instructor's corrections, "
                        "applied on every run and recorded in the gradebook and the feedback")
    p.add_argument("--extra-tests", type=Path, default=None,
                   help="folder of hidden test files test_NN_*.py: graded and in the gradebook, "
                        "never shown in feedback")
    p.add_argument("--chapters", default="",
                   help="grade only these chapters, e.g. '01_kv_memory' or '1,3' (default: every chapter "
                        "that at least one submission holds a notebook of)")
    p.add_argument("--due", default="", help="the due date, an ISO time (2026-12-01T23:59, or with an offset: "
                                             "...+01:00); work handed in later loses --late-penalty")
    p.add_argument("--late-penalty", default="",
                   help="FRACTION[:CAP]: the fraction of the points taken per started day after --due, at most "
                        "CAP (default 1), e.g. 0.1:0.5 (needs --due)")
    p.add_argument("--submitted", type=Path, default=None,
                   help="CSV with the header student,submitted (ISO times): when each submission was handed in, "
                        "for --due (an LMS download's names give Blackboard's attempt time and Canvas's late mark)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def lateness_of(args, students: list[str], lms_info: dict, submitted: dict, matched: dict) -> dict:
    """{student: grading.late.Lateness} for the run's --due and --late-penalty: the time from
    --submitted (by the submission's name or its roster id), else from the LMS's file names."""
    from grading import late

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
    if bool(args.due) != bool(args.late_penalty):
        print("error: --due and --late-penalty go together (give both, or neither)", file=sys.stderr)
        return 2
    if args.extra_tests is not None:
        args.extra_tests = args.extra_tests.resolve()
        if not args.extra_tests.is_dir():
            print(f"--extra-tests {args.extra_tests} is not a folder", file=sys.stderr)
            return 2
    args.out = args.out.resolve()
    chapters = discover_chapters(only=args.chapters.split(",") if args.chapters else None)
    if not chapters:
        print("no chapters to grade (tests/test_NN_*.py with solutions/NN_*.ipynb)", file=sys.stderr)
        return 2
    try:
        overrides = gb.read_overrides(args.overrides) if args.overrides else []
        roster = gb.read_roster(args.roster) if args.roster else []
        args.course = gb.read_canvas_assignments(args.roster) if args.roster else []
        args.canvas_map = gb.read_canvas_map(args.canvas_assignments)
        gb.canvas_columns(args.canvas_map, args.course, [c.stem for c in discover_chapters()], [])
        from grading import late

        submitted = late.read_submitted(args.submitted) if args.submitted else {}
        if args.due:
            late.parse_time(args.due, "--due"), late.LatePolicy.parse(args.late_penalty)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="grade-unzip-"))
    try:
        return _grade_class(args, chapters, overrides, roster, submitted, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _grade_class(args, chapters, overrides, roster, submitted, scratch: Path) -> int:
    """The run of :func:`main` once its inputs are read: match, choose the chapters, grade, write."""
    from grading import lms

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
    subs = {student: open_submission(student, entry, chapters, scratch, n)
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
        columns = gb.canvas_columns(args.canvas_map, args.course,
                                    [c.stem for c in discover_chapters()], [c.stem for c in chapters])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    unmapped = gb.unmapped_chapters([c.stem for c in chapters], columns, args.course)
    for line in unmapped:
        print(f"canvas: {line}", file=sys.stderr)
    matched, roster_problems = gb.match_roster([s for s, _ in students], roster,
                                               {x.name: x.keys for x in lms_students}) if roster else ({}, [])
    overrides = gb.resolve_override_students(overrides, [s for s, _ in students], matched)
    lateness = lateness_of(args, [s for s, _ in students], lms_info, submitted, matched)
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
                rows.append(gb.Row(student, "", "", 0, 0, gb.REVIEW, unreadable))
            if student in lms_info:  # names read two ways, links left out of a Moodle folder
                rows += [gb.Row(student, "", "", 0, 0, gb.REVIEW, p) for p in lms_info[student].problems]
            if regraded:
                rows.append(gb.Row(student, "", "", 0, 0, gb.NOTE, f"regraded: {regraded.split(';')[0]}"))
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
    wide = gb.write_wide(args.out, final, roster, matched)
    _, canvas_problems = gb.write_canvas(args.out, final, roster, matched, columns)
    canvas_problems = unmapped + canvas_problems
    extra = ignored_lines + [f"partly handed in: {p}" for p in gb.partial_chapters(final)]
    extra += [f"overrides: {p}" for p in book.override_problems()]
    extra += [f"roster: {p}" for p in roster_problems]
    extra += [f"canvas: {p}" for p in canvas_problems] if roster else []
    for line in extra[len(ignored_lines):]:
        if line.removeprefix("canvas: ") not in unmapped:  # said before grading
            print(line, file=sys.stderr)
    review = gb.write_review_list(args.out, final, sandbox.status().line, extra, chapters_line)
    flagged = sum(r.status in gb.FOR_REVIEW for r in final)
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
