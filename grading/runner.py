"""Start one grading child (:mod:`grading.child`) and survive whatever it does.

Each child gets a fresh temporary directory (its working directory, ``HOME`` and
``TMPDIR``), a memory limit, a file-size limit and no core dumps (set by the child
itself before any student code runs, see :func:`grading.child.apply_limits`), its
own process group (so a timeout kills whatever it started too),
``CUDA_VISIBLE_DEVICES`` and one thread per math library unless told otherwise.
Its stdout and stderr are read as they come and kept up to a cap; the rest is
counted and thrown away, so a flood of prints costs neither memory nor disk.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path


_live: set[int] = set()  # process groups of the children running now (killed on Ctrl-C)
_live_lock = threading.Lock()
OUTPUT_CAP = 64 * 1024  # bytes of a child's stdout+stderr that are kept
FILE_SIZE_CAP = 512 * 2**20  # no single file written by a child may exceed this


@dataclass
class ChildResult:
    lines: list[dict] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    output: str = ""
    output_bytes: int = 0

    def of(self, kind: str) -> list[dict]:
        return [line for line in self.lines if line.get("kind") == kind]

    @property
    def finished(self) -> bool:
        return bool(self.of("done"))


def child_env(work: Path, threads: int, cuda_devices: str) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    t = str(threads)
    env.update({
        "HOME": str(work), "TMPDIR": str(work), "MPLCONFIGDIR": str(work / ".matplotlib"),
        "TRITON_CACHE_DIR": str(work / ".triton"), "TORCHINDUCTOR_CACHE_DIR": str(work / ".inductor"),
        "XDG_CACHE_HOME": str(work / ".cache"), "MPLBACKEND": "Agg",
        "CUDA_VISIBLE_DEVICES": cuda_devices, "OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t,
        "OPENBLAS_NUM_THREADS": t, "NUMEXPR_NUM_THREADS": t, "VECLIB_MAXIMUM_THREADS": t,
        "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1", "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    })
    return env


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


def _kill_group(pid: int):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all():
    """Kill every running child and what it started (the grader is being interrupted)."""
    with _live_lock:
        for pid in list(_live):
            _kill_group(pid)


def run_child(spec: dict, *, timeout: float, memory_mb: int, threads: int = 1, cuda_devices: str = "") -> ChildResult:
    """Run ``python -m grading.child`` on ``spec`` (``test_files``, ``notebooks`` files to
    copy in, ``hidden_dirs``, ``collect_only``) in a fresh temporary directory."""
    result = ChildResult()
    base = Path(tempfile.mkdtemp(prefix="grade-"))
    work = base / "work"
    notebooks = work / "notebooks"
    notebooks.mkdir(parents=True)
    try:
        for name, source in spec.get("notebook_files", {}).items():
            shutil.copyfile(source, notebooks / name)
        full = {**{k: v for k, v in spec.items() if k != "notebook_files"},
                "test_files": [str(Path(f).resolve()) for f in spec["test_files"]],
                "hidden_dirs": [str(Path(d).resolve()) for d in spec.get("hidden_dirs", [])],
                "notebooks": str(notebooks), "work_dir": str(work), "results": str(base / "results.jsonl"),
                "threads": threads, "memory_mb": memory_mb, "gpu_visible": bool(cuda_devices),
                "file_size_cap": FILE_SIZE_CAP}
        spec_path = base / "spec.json"
        spec_path.write_text(json.dumps(full))
        proc = subprocess.Popen(
            [sys.executable, "-m", "grading.child", str(spec_path)],
            cwd=work, env=child_env(work, threads, cuda_devices), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout kills all it started
        )
        with _live_lock:
            _live.add(proc.pid)
        chunks: list[bytes] = []
        reader = threading.Thread(target=_drain, args=(proc.stdout, result, chunks), daemon=True)
        reader.start()
        try:
            result.returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            result.timed_out = True
            _kill_group(proc.pid)
            result.returncode = proc.wait()
        _kill_group(proc.pid)  # whatever it left running in the background
        with _live_lock:
            _live.discard(proc.pid)
        reader.join(timeout=5)
        result.output = b"".join(chunks).decode("utf-8", "replace")
        results = base / "results.jsonl"
        if results.exists():
            for line in results.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    result.lines.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line cut short by a crash: what came before stands
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return result
