"""One student's chapter graded: from a submission to gradebook rows.

Every front door (``python -m grading.batch`` for a class, Gradescope's ``run_autograder``
for one submission, nbgrader's ``autograde``) grades through :class:`Grader`: it starts a
judge (:mod:`grading.proc.judges`) for each chapter a submission holds, reads the judge's
typed report (:class:`grading.wire.report.JudgeReport`) and turns it into rows
(:mod:`grading.classroom.rows`). :func:`grade_submission` is the whole of it for one
submission.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from grading import texts
from grading.classroom.matching import Chapter, Submission, entry_kind, match_folder, readable, unpack_zip
from grading.classroom.rows import (
    CRASHED,
    MEMORY,
    MISSING,
    NOTE,
    REVIEW,
    TAMPERED,
    TIMED_OUT,
    Row,
    crash_text,
    graded_rows,
    one_line,
    zero_rows,
)
from grading.layout import EXERCISE_LINE, EXERCISES, ROOT, SOLUTIONS, cell_source
from grading.notebook.loader import MAX_CAPTURED_CHARS
from grading.notebook.untrusted import NOTEBOOK_CAP
from grading.outcome import MESSAGE_CHARS
from grading.proc.judges import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, OUTPUT_CAP, run_child
from grading.wire import ExitRecord
from grading.wire.records import PlannedTest
from grading.wire.report import JudgeReport

MAX_NOTEBOOK_BYTES = NOTEBOOK_CAP  # the size untrusted.read_submission reads at most
# The packages of this repository the judge imports: every file in them is fingerprinted,
# so a list kept by hand cannot drift (grading.diagnosis and grading.contestant.triton_bounds once
# fell out of one).
GRADER_PACKAGES = ("grading", "gpucompile", "distlab", "modellab")
WATCHED_PACKAGES = ("torch", "numpy", "pytest", "_pytest", "pluggy", "nbformat")


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


@dataclass
class Task:
    student: str
    chapter: Chapter
    notebook: Path | None  # None: missing
    note: str = ""  # why it is missing / ambiguous


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


def stream_problems(report: JudgeReport, planned: set[str]) -> list[str]:
    """What in a judge's report could not come from one honest judge: a test reported
    twice (the process was forked, or lines were forged), lines after the end
    (:attr:`JudgeReport.stream_problems`), or a test that was never planned. Any of these
    voids the chapter."""
    unknown = report.unplanned(planned)
    return report.stream_problems[:1] + ([f"an unknown test was reported ({unknown[0][:80]})"] if unknown else [])


def chapter_verdict(report: JudgeReport, planned: set[str], timeout: float, limit: str) -> tuple[str, str] | None:
    """The one status a whole chapter gets, with its message, when its judge's report does
    not grade it test by test; None when it does. Decided from typed records only, never
    from what the processes printed, in this order: the time limit, a stream of records
    no honest judge writes, how the judge ended, graders that could not run, and records
    that could not be read."""
    if report.timed_out:
        return TIMED_OUT, texts.TOOK_TOO_LONG.format(timeout=timeout)
    tamper = list(report.tamper.violations) + stream_problems(report, planned)
    if tamper:
        return TAMPERED, "; ".join(tamper)[:MESSAGE_CHARS]
    ended = report.exit
    if ended.status == "memory":
        return MEMORY, texts.OUT_OF_MEMORY.format(limit=limit)
    if ended.status == "crashed":
        return CRASHED, crash_text(ended.returncode, ended.signal)
    if report.collect_errors:
        first = report.collect_errors[0]
        return REVIEW, texts.GRADERS_DID_NOT_RUN.format(why=first.summary or one_line(first.message))
    if report.malformed:  # only our own judge writes these lines: a bug, for review
        return REVIEW, f"the judge's outcome lines could not be read: {report.malformed[0]}"
    unreadable = report.load.of("unreadable")
    if unreadable:
        return REVIEW, one_line(unreadable[0].message)
    return None


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


class Grader:
    """Grades tasks (one student's chapter each) with one configuration: ``prepare()`` once,
    then ``grade_safely(task)`` per task, from any thread."""

    def __init__(self, args: GradeConfig, chapters: list[Chapter], hidden: dict[str, list[Path]]):
        self.args = args
        self.chapters = chapters
        self.hidden = hidden
        self.plan: dict[str, list[PlannedTest]] = {}
        self.solution_ids: dict[str, list[str]] = {}
        self.baseline: dict[str, str] = {}
        self.compromised = ""
        self.peak_rss: dict[tuple[str, str], float] = {}  # (student, chapter) -> MiB, as the child reported
        # (student, chapter) -> how its judge ended, and whether its time limit ended it: the
        # Gradescope front door tells a memory kill, the container's fault, from the student's.
        self.endings: dict[tuple[str, str], tuple[ExitRecord, bool]] = {}
        self.devices = itertools.cycle([d for d in args.cuda_devices.split(",") if d.strip()] or [""])
        self.device_lock = threading.Lock()

    def prepare(self):
        """Fingerprint the graders (a change while grading stops the run) and collect the plan."""
        self.baseline = fingerprint(self.chapters, [p for ps in self.hidden.values() for p in ps])
        self.collect_plan()

    def grade_safely(self, task: "Task") -> list[Row] | None:
        """The task's rows; a failure of ours costs this chapter (needs review), not the run;
        None once the graders were found changed."""
        if self.compromised:
            return None
        try:
            return self.grade(task)
        except Exception as exc:  # a bug of ours must cost one chapter, not the run
            return zero_rows(task.student, task.chapter.stem, self.plan[task.chapter.stem], REVIEW,
                             f"the grader failed on this chapter: {type(exc).__name__}: {exc}")

    def collect_plan(self):
        """Which tests each chapter has, their exercises and points (one collect-only child)."""
        files = [str(c.test_file) for c in self.chapters]
        hidden = [str(p) for ps in self.hidden.values() for p in ps]
        report = run_child({"test_files": files, "hidden_files": hidden, "collect_only": True},
                           timeout=max(self.args.timeout, 300), memory_mb=0, threads=1, hide=self.hide).report
        if report.plan is None or not report.plan.tests:
            raise SystemExit("could not collect the graders:\n" + "\n".join(report.malformed) + report.output[-3000:])
        if report.collect_errors:
            raise SystemExit("the graders do not import:\n" + report.collect_errors[0].message)
        for c in self.chapters:
            mine = {str(c.test_file.resolve())} | {f"hidden/{p.name}" for p in self.hidden.get(c.stem, [])}
            self.plan[c.stem] = [t for t in report.plan.tests if t.path in mine]
            # The exercise cells' order; a tree without solutions (the autograder) has the stubs'.
            source = SOLUTIONS / f"{c.stem}.ipynb"
            ids = exercise_cells(source if source.exists() else EXERCISES / f"{c.stem}.ipynb")
            self.solution_ids[c.stem] = ids if isinstance(ids, list) else []

    def grade(self, task: Task) -> list[Row]:
        s, stem = task.student, task.chapter.stem
        tests = self.plan[stem]
        if task.notebook is None:
            status = REVIEW if task.note else MISSING
            return zero_rows(s, stem, tests, status, task.note or f"no notebook for {stem} in the submission")
        ids = exercise_cells(task.notebook)
        if isinstance(ids, str):
            return zero_rows(s, stem, tests, REVIEW, ids)
        review, notes = structure_review(ids, self.solution_ids.get(stem, []))
        files = {f"{stem}.ipynb": str(task.notebook)}
        for h in self.hidden.get(stem, []):
            hidden_stem = h.stem[len("test_"):]
            files.setdefault(f"{hidden_stem}.ipynb", str(task.notebook))
        with self.device_lock:
            device = next(self.devices)
        spec = {"chapter": stem, "test_files": [str(task.chapter.test_file)],
                "hidden_files": [str(h) for h in self.hidden.get(stem, [])], "notebook_files": files}
        report = run_child(spec, timeout=self.args.timeout, memory_mb=self.args.memory_mb,
                           threads=self.args.threads, cuda_devices=device, hide=self.hide).report
        if report.exit.max_rss_kb is not None:
            self.peak_rss[(s, stem)] = report.exit.max_rss_kb / 1024
        self.endings[(s, stem)] = (report.exit, report.timed_out)
        rows = self.rows_from(s, stem, tests, report, review, notes)
        now = fingerprint(self.chapters, [p for ps in self.hidden.values() for p in ps])
        # Files that appeared since are ignored: nothing imports them.
        changed = sorted(k for k in self.baseline if now.get(k) != self.baseline[k])
        if changed:
            self.compromised = f"{s} / {stem} changed {', '.join(changed[:5])}"
            rows = zero_rows(s, stem, tests, TAMPERED, "files of the grader or of installed packages changed "
                             f"while this chapter was graded: {', '.join(Path(c).name for c in changed[:5])}")
        return rows

    @property
    def hide(self) -> list[Path]:
        """What a sandboxed child must not see: the gradebook, the class's submissions
        (another student's notebook), the hidden tests' folder."""
        return [p for p in (self.args.out, self.args.submissions.resolve(), self.args.extra_tests) if p]

    def rows_from(self, s: str, stem: str, tests: list[PlannedTest], report: JudgeReport, review: dict,
                  notes: list[str]) -> list[Row]:
        """The chapter's rows from its judge's report: one status for the whole chapter
        (:func:`chapter_verdict`), or each exercise scored, then the notes."""
        limit = f"{self.args.memory_mb} MB"
        verdict = chapter_verdict(report, {t.nodeid for t in tests}, self.args.timeout, limit)
        if verdict is not None:
            return zero_rows(s, stem, tests, *verdict)
        memory = [p for p in report.load.of("error") if p.memory]
        memory_note = texts.CELL_OUT_OF_MEMORY.format(cell=memory[0].cell, limit=limit) if memory else ""
        # Advice only (no points depend on it), kept to exercises that failed and cut to size.
        diagnoses = {d.exercise: one_line(d.message, 400) for d in report.diagnoses.diagnoses[:50]}
        rows = graded_rows(s, stem, tests, report.outcomes(), review, memory_note, diagnoses)
        if memory_note:
            rows.append(Row(s, stem, "", 0, 0, MEMORY, memory_note))
        chapter_notes = cell_notes(report, bool(memory_note)) + notes + output_notes(report)
        return rows + [Row(s, stem, "", 0, 0, NOTE, text) for text in chapter_notes]


def cell_notes(report: JudgeReport, memory_said: bool) -> list[str]:
    """The notes a chapter's load leaves: cells skipped or raising (a cell out of memory
    is said once, by the memory note)."""
    out = []
    for p in report.load.problems:
        if p.kind == "skipped":
            out.append(f"cell {p.cell}: {p.message} (not run by the grader)")
        elif p.kind == "error" and not (memory_said and p.memory):
            out.append(f"cell {p.cell} raised {one_line(p.message, 300)}")
    return out


def output_notes(report: JudgeReport) -> list[str]:
    """A note when what the notebook printed was cut at its cap."""
    out = []
    if report.load.output_chars >= MAX_CAPTURED_CHARS:
        out.append(f"the notebook printed more than {MAX_CAPTURED_CHARS} characters; the rest of its output was "
                   "discarded")
    elif report.output_bytes > OUTPUT_CAP:
        out.append(f"the notebook printed more than {OUTPUT_CAP // 1024} KB; the rest of its output was discarded")
    return out


# -- one submission ---------------------------------------------------------------------------
def submission_rows(student: str, sub: Submission, chapters: list[Chapter]) -> list[Row]:
    """Rows about the whole submission: a zip that could not be read, notebooks no
    chapter claimed (needs review when a chapter is missing, a note otherwise; both
    are listed in needs_review.md)."""
    rows = []
    if sub.problem:
        rows.append(Row(student, "", "", 0, 0, REVIEW, sub.problem))
    stems = {c.stem for c in chapters}  # a chapter not graded here is never spoken of
    rows += [Row(student, "", "", 0, 0, REVIEW, n.text()) for n in sub.not_graded if n.chapter in stems]
    missing_any = any(c.stem not in sub.notebooks for c in chapters)
    for name, reason in sub.unmatched:
        rows.append(Row(student, "", "", 0, 0, REVIEW if missing_any else NOTE,
                        f"{name} {texts.UNMATCHED}: {reason}"))
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


def open_submission(student: str, entry: Path, chapters: list[Chapter], scratch: Path, n: int = 0,
                    attempts: dict | None = None) -> Submission:
    """A student's entry (a folder, or a zip unpacked into ``scratch``), matched to chapters
    (``attempts``: an LMS's order of its files, :func:`grading.classroom.matching.match_folder`).
    An entry that is a link, a FIFO or a device, or whose files cannot be read, is a
    problem of this student's (for review), never the class's."""
    kind = entry_kind(entry)
    if kind:
        return Submission(student, problem=f"{readable(entry.name)} {kind}; it is not graded")
    folder, problem = entry, ""
    try:
        if entry.suffix.lower() == ".zip" and entry.is_file():
            folder = scratch / f"{n:05d}-{re.sub(r'[^A-Za-z0-9]+', '_', student)}"
            problem = unpack_zip(entry, folder)
        # A zip unpacked or an LMS's files gathered (grading.classroom.lms) are our copies, under scratch:
        # what the student reads names their files, never our folders.
        copied = folder.resolve().is_relative_to(scratch.resolve())
        if problem:
            return Submission(student, problem=problem)
        return match_folder(student, folder, chapters, copied, attempts)
    except OSError as exc:
        return Submission(student, problem=f"the submission's files could not be read ({os_error_text(exc)}); "
                                           "it is not graded")


def os_error_text(exc: OSError) -> str:
    """An OSError as a student may read it: what went wrong and the file's name, without
    the folder (a scratch folder of ours, or the instructor's)."""
    name = readable(Path(exc.filename).name) if getattr(exc, "filename", None) else ""
    return f"{exc.strerror or type(exc).__name__}" + (f": {name}" if name else "")


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


# -- the front doors' one call ---------------------------------------------------------------
class GraderChanged(RuntimeError):
    """The grader's own files changed while grading: every grade of the run is in doubt."""


def _finished(grader: Grader) -> None:
    if grader.compromised:
        raise GraderChanged(f"the grader's files changed while grading ({grader.compromised})")


def grade_submission(config: GradeConfig, student: str, entry: Path, chapters: list[Chapter],
                     hidden: dict | None = None, on_chapter=None) -> tuple[list[Row], Grader]:
    """Every row of one student's submission ``entry`` (a folder, a zip or one notebook):
    the rows about the submission itself, then each chapter's, graded by its own judge.
    ``on_chapter(stem)`` is told before each chapter. Returns the rows and the grader (its
    peak memory per chapter); :class:`GraderChanged` if the grader's files changed."""
    grader = Grader(config, chapters, hidden or {})
    grader.prepare()
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        sub = open_submission(student, entry, chapters, Path(scratch))
        rows = submission_rows(student, sub, chapters)
        for task in submission_tasks(student, sub, chapters):
            if on_chapter is not None:
                on_chapter(task.chapter.stem)
            rows += grader.grade_safely(task) or []
    _finished(grader)
    return rows, grader


def grade_chapter(config: GradeConfig, student: str, chapter: Chapter, notebook: Path) -> list[Row]:
    """The rows of one chapter's ``notebook``, found by the caller (nbgrader's folders name
    it), graded by its own judge. :class:`GraderChanged` if the grader's files changed."""
    grader = Grader(config, [chapter], {})
    grader.prepare()
    rows = grader.grade_safely(Task(student, chapter, notebook)) or []
    _finished(grader)
    return rows
