"""Start one judge (:mod:`grading.judge.main`) per student and chapter, and survive whatever happens.

The judge runs no submission code (its contestants do, in the sandbox, grading.judge),
so it is a plain child process: a fresh temporary directory (its working directory,
``HOME`` and ``TMPDIR``), its own session and process group (so a timeout kills it and
the zygote of its contestants with it), one thread per math library unless told
otherwise, and the limits and the sandbox uid its contestants get, in its spec.

What crosses the boundary is structured, never text to parse: the spec goes in as one
JSON object on the child's stdin, and the outcomes come back as JSON lines on a pipe
of their own (an inherited file descriptor, so the notebook has no path to open).
The child's stdout and stderr are read as they come and kept up to a cap; the rest is
counted and thrown away, so a flood of prints costs neither memory nor disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from grading.proc import sandbox
from grading.proc.env import child_env
from grading.wire import ExitRecord, SetupRecord, WireError
from grading.wire.report import JudgeReport, read_report

_live: set[int] = set()  # process groups of the children running now (killed on Ctrl-C)
_live_lock = threading.Lock()
OUTPUT_CAP = 64 * 1024  # bytes of a child's stdout+stderr that are kept
RESULTS_CAP = 16 * 2**20  # bytes of outcome lines read from a child (a flood is cut, not stored)
FILE_SIZE_CAP = 512 * 2**20  # no single file written by a child may exceed this
# What one student's chapter may take by default, for every front door (grading.batch's
# --timeout and --memory-mb, the Gradescope autograder, nbgrader's autograder cells).
DEFAULT_TIMEOUT_S = 300  # wall-clock seconds
DEFAULT_MEMORY_MB = 4096  # RLIMIT_DATA per process that runs the notebook (a contestant)
# The judge (grading.judge.main) gets a limit of its own (RLIMIT_DATA, soft): --memory-mb for
# the answers it must hold (a contestant hands back at most what it may hold, and
# grading.wire never decodes a message into more than its own size) plus what the judge
# needs itself with pytest, torch and the graders imported and a chapter's references
# computed. Measured on the solutions (2-core x86-64, CPU torch 2.13, one thread), the
# judge's peak RSS / peak VmData: Chapter 1 396 / 290 MiB, Chapter 5 436 / 314 MiB,
# Chapter 8 (a model's weights in the references) 1242 / 1032 MiB. 1536 MiB covers the
# largest with half a GiB to spare.
JUDGE_OWN_MB = 1536
SIGNAL_EXIT_BASE = 128
# The most a judge's setup (loading the model its tests run, grading.judge.preload) may add
# to its time limit: a conversion from the GGUF on a slow CPU, with room to spare.
SETUP_ALLOWANCE_S = 300.0


@dataclass
class ChildResult:
    """A judge's process as its parent saw it: the JSON lines it wrote (read as they come,
    so that its setup records move its time limit), how it ended, what it printed. Front
    doors read :attr:`report`, the lines typed, and never a line itself."""

    lines: list[dict] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    output: str = ""
    output_bytes: int = 0
    sandboxed: bool = False

    def of(self, kind: str) -> list[dict]:
        return [line for line in self.lines if line.get("kind") == kind]

    @property
    def report(self) -> JudgeReport:
        """Every line, read strictly into one typed report (grading.wire.report), with what
        only this parent knows: how the process ended, its time limit, its output."""
        report = read_report(self.lines, self.crashed())
        report.timed_out, report.output, report.output_bytes = self.timed_out, self.output, self.output_bytes
        return report

    @property
    def exit(self) -> ExitRecord:
        """How the judge ended: the exit record it wrote last, read strictly; or, when it
        wrote none (a crash, a kill, a forged or broken record), ``crashed`` with how the
        process ended, which only this parent can say."""
        records = self.of("exit")
        if len(records) == 1 and self.lines[-1] is records[0]:
            try:
                return ExitRecord.from_json({k: v for k, v in records[0].items() if k != "kind"})
            except WireError:
                pass
        return self.crashed()

    def crashed(self) -> ExitRecord:
        """The exit record of a judge that wrote none: ``crashed``, with how its process ended."""
        code = self.returncode
        signal_number = -code if code is not None and code < 0 else (
            code - SIGNAL_EXIT_BASE if code is not None and code > SIGNAL_EXIT_BASE and self.sandboxed else None)
        return ExitRecord("crashed", returncode=code, signal=signal_number)

    @property
    def setup_seconds(self) -> float:
        """The seconds the judge said it spent before its first test loading a model (its
        setup records, read strictly; a malformed one counts nothing), which its time limit
        does not count; at most :data:`SETUP_ALLOWANCE_S`."""
        total = 0.0
        for line in self.of("setup"):
            try:
                total += SetupRecord.from_json({k: v for k, v in line.items() if k != "kind"}).seconds
            except WireError:
                pass
        return min(total, SETUP_ALLOWANCE_S)

    @property
    def finished(self) -> bool:
        return self.exit.status == "finished"

    @property
    def peak_rss_mb(self) -> float | None:
        """The grading process's peak resident memory in MiB, as it reported at the end;
        None if it never finished. (Its subprocesses' peaks are reported apart, as
        ``children_max_rss_kb``: a fork's peak counts pages it shares with its parent.)"""
        kb = self.exit.max_rss_kb
        return kb / 1024 if kb is not None else None


def judge_memory_mb(memory_mb: int) -> int:
    """The judge's own RLIMIT_DATA for ``--memory-mb`` (0: no limit, as for the plan's
    collection), applied by :func:`grading.judge.main.limit_memory` before it imports torch."""
    return memory_mb + JUDGE_OWN_MB if memory_mb > 0 else 0


def _drain(stream, result: ChildResult, chunks: list[bytes]):
    kept = 0
    while True:
        data = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not data:
            break
        result.output_bytes += len(data)
        if kept < OUTPUT_CAP:
            chunks.append(data[: OUTPUT_CAP - kept])
            kept += len(chunks[-1])


def kill_group(pid: int):
    """SIGKILL a process group (a child started with its own session) and all it holds."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all():
    """Kill every running child and what it started (the grader is being interrupted)."""
    with _live_lock:
        for pid in list(_live):
            kill_group(pid)


def _read_results(fd: int, result: ChildResult):
    """Read the child's outcome lines until the pipe closes; a line cut short by a crash,
    or anything past RESULTS_CAP, is dropped: what came before it stands."""
    buffer, total = b"", 0
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while True:
            data = pipe.read(65536)
            if not data:
                break
            total += len(data)
            if total > RESULTS_CAP:
                continue
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                try:
                    value = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue
                if isinstance(value, dict):
                    result.lines.append(value)


def run_child(spec: dict, *, timeout: float, memory_mb: int, threads: int = 1, cuda_devices: str = "",
              hide: list[Path] = ()) -> ChildResult:
    """Run ``python -m grading.judge.main`` on ``spec`` (``test_files``, ``notebook_files`` to
    copy in, ``hidden_files`` to copy in and delete after collection, ``collect_only``) in
    a fresh temporary directory, sandboxed where possible. ``hide`` names folders the child
    must not see (the grader's output, the submissions, the hidden tests' home)."""
    result = ChildResult()
    base = Path(tempfile.mkdtemp(prefix="grade-"))
    work = base / "work"
    notebooks, hidden = work / "notebooks", work / "hidden"
    notebooks.mkdir(parents=True)
    try:
        from grading.notebook.loader import NotebookLoadError
        from grading.notebook.untrusted import read_submission

        for name, source in spec.get("notebook_files", {}).items():
            try:  # a regular file only: a link is never followed to what it names
                (notebooks / name).write_text(read_submission(Path(source)))
            except NotebookLoadError:
                pass  # the judge finds no notebook; matching has listed the link for review
        hidden_copies = []
        for source in spec.get("hidden_files", []):
            hidden.mkdir(exist_ok=True)
            hidden_copies.append(str(hidden / Path(source).name))
            shutil.copyfile(source, hidden_copies[-1])
        full = {**{k: v for k, v in spec.items() if k not in ("notebook_files", "hidden_files")},
                "test_files": [str(Path(f).resolve()) for f in spec["test_files"]] + hidden_copies,
                "hidden_dir": str(hidden), "notebooks": str(notebooks), "work_dir": str(work),
                "threads": threads, "memory_mb": memory_mb, "judge_memory_mb": judge_memory_mb(memory_mb),
                "gpu_visible": bool(cuda_devices),
                "file_size_cap": FILE_SIZE_CAP, "cpu_seconds": int(timeout) + 5}
        read_fd, write_fd = os.pipe()
        # The judge (grading.judge.main) runs the graders and the hidden tests, never the
        # notebook: it is not sandboxed itself. Its contestants are (grading.judge), each as
        # the unprivileged uid reserved here for this student and chapter.
        argv = [sys.executable, "-m", "grading.judge.main", "--results-fd", str(write_fd)]
        box = sandbox.status()
        result.sandboxed = box.sandboxed
        uid_slot = sandbox.child_uid() if box.sandboxed else contextlib.nullcontext()
        with uid_slot as uid:
            full.update({"sandbox_uid": uid, "hide": [str(Path(h).resolve()) for h in hide],
                         "cuda_devices": cuda_devices})
            _run(result, argv, work, full, read_fd, write_fd, timeout, env=child_env(work, threads, cuda_devices))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return result


def wait_within(proc: subprocess.Popen, result: ChildResult, timeout: float) -> int:
    """Wait for the judge for ``timeout`` seconds, plus those it reports spending on setup
    (a model's load is not the notebook's time: :attr:`ChildResult.setup_seconds`), then
    kill it and all it started; its exit status."""
    start = time.monotonic()
    while True:
        left = start + timeout + result.setup_seconds - time.monotonic()
        try:
            return proc.wait(timeout=max(left, 0.01))
        except subprocess.TimeoutExpired:
            if start + timeout + result.setup_seconds > time.monotonic():
                continue  # a setup record arrived meanwhile: the limit moved
            result.timed_out = True
            kill_group(proc.pid)
            return proc.wait()


def _run(result: ChildResult, argv: list[str], work: Path, spec: dict, read_fd: int, write_fd: int,
         timeout: float, env: dict) -> None:
    # (result.sandboxed is set by the caller before this runs.)
    """Start the child, hand it its spec, read both of its streams, wait or kill."""
    try:
        proc = subprocess.Popen(
            argv, cwd=work, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=(write_fd,), start_new_session=True)  # own session and group: a timeout kills all it started
    finally:
        os.close(write_fd)  # the child holds the only writing end: EOF when it (and all it started) ends
    with _live_lock:
        _live.add(proc.pid)
    results_reader = threading.Thread(target=_read_results, args=(read_fd, result), daemon=True)
    results_reader.start()
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(proc.stdout, result, chunks), daemon=True)
    reader.start()
    try:
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()
    except OSError:
        pass  # it died before reading its spec: the exit status says how
    result.returncode = wait_within(proc, result, timeout)
    kill_group(proc.pid)  # whatever it left running in the background
    with _live_lock:
        _live.discard(proc.pid)
    reader.join(timeout=5)
    results_reader.join(timeout=5)  # a daemon it left behind (outside a sandbox) may hold the pipe
    result.output = b"".join(chunks).decode("utf-8", "replace")
