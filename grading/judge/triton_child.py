"""Chapter 7's compiles, each in a child process of the judge's: a notebook's kernels (read
from its text by :mod:`grading.judge.triton_compile`) in the contestants' sandbox, and the
references' flash kernel whose ptxas reports Exercises 7.6 and 7.7 are graded on."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grading.compare import GradingFailure
from grading.layout import REFERENCES, ROOT

REFERENCE_KERNELS = REFERENCES / "ref_07_triton_jit.py"  # the references' @triton.jit functions
RESULT_CAP = 64 * 2**20  # bytes of the child's answer read (the compiled kernels' text and cubins)
OUTPUT_TAIL = 3000  # characters of the child's output quoted when it fails


def compile_outside(job: dict, timeout: float) -> str | None:
    """Compile ``job`` in a fresh child in the contestants' sandbox; None when it compiled,
    else the compiler's message. GradingFailure when the child itself failed. What a job
    compiles to is a function of the job alone (its sources, constants, launch and
    target), so a job this judge compiled before is answered as it was then: a catalogue
    bug in one kernel leaves the other exercises' compiles as the solution's."""
    key = json.dumps(job, sort_keys=True)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_in_sandbox(job, timeout)
    return _COMPILED[key]


_COMPILED: dict[str, str | None] = {}  # a job's JSON -> compile_outside's answer (never a failure to run)


def _compile_in_sandbox(job: dict, timeout: float) -> str | None:
    from grading.notebook.untrusted import read_untrusted
    from grading.proc.env import child_env
    from grading.proc.zygote import contain, hand_over

    work = Path(tempfile.mkdtemp(prefix="compile-"))
    try:
        (work / "spec.json").write_text(json.dumps([job]))
        env = {**child_env(work, 1, ""), "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
        argv, env = contain([sys.executable, "-m", "gpucompile", str(work / "spec.json"), str(work / "result.json")],
                            work, env)
        hand_over(work)
        try:
            proc = subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise GradingFailure(f"compiling your kernel took longer than {timeout:g} s and was stopped") from None
        try:
            answers = json.loads(read_untrusted(work / "result.json", cap=RESULT_CAP))
        except (OSError, ValueError):
            tail = (proc.stdout + proc.stderr).decode(errors="replace")[-OUTPUT_TAIL:]
            raise GradingFailure(f"the compiler's process failed (status {proc.returncode}):\n{tail}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not (isinstance(answers, list) and len(answers) == 1 and isinstance(answers[0], dict)):
        raise GradingFailure("grader error: the compiler's process answered in a form the grader does not read")
    error = answers[0].get("error")
    return None if error is None else str(error)


def reference_reports(timeout: float) -> dict:
    """``{arch: [[block_m, block_n, num_warps, num_stages, registers, shared_bytes,
    spill_bytes, ptxas_log], ...]}``: the references' flash_fwd_kernel compiled at
    ``gpucompile.chapter07.REAL_CONFIGS`` (what 7.6 and 7.7 read, each graded alone), by the
    judge, in a child that runs the references' file and no notebook, once per judge: no
    notebook's process can make up the reports its functions are graded on. GradingFailure
    (a grader error) when the child fails."""
    if "reports" not in _REFERENCE_REPORTS:
        from grading.proc.env import child_env

        work = Path(tempfile.mkdtemp(prefix="compile-"))
        try:
            env = {**child_env(work, 1, ""), "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
            proc = subprocess.run([sys.executable, "-m", "gpucompile.chapter07", str(REFERENCE_KERNELS),
                                   str(work / "reports.json")], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=timeout)
            if proc.returncode != 0:
                tail = (proc.stdout + proc.stderr).decode(errors="replace")[-OUTPUT_TAIL:]
                raise GradingFailure(f"grader error: the reference flash kernel did not compile "
                                     f"(status {proc.returncode}):\n{tail}")
            _REFERENCE_REPORTS["reports"] = json.loads((work / "reports.json").read_text())
        except subprocess.TimeoutExpired:
            raise GradingFailure(f"grader error: compiling the reference flash kernel took longer than {timeout:g} s")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return _REFERENCE_REPORTS["reports"]


_REFERENCE_REPORTS: dict = {}
