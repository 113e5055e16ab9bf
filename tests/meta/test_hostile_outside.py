"""Hostile submissions against the checks decided outside the notebook's process.

Three classes, each written against what the judge now does itself:

- **Chapter 7, forged.** A notebook that computes its kernels' results in PyTorch (a launch
  in dead code, so the text shows one) and patches, in its own process, the record of what
  its launches wrote and every piece of the compile check the contestant once ran. It must
  earn nothing beyond what the same notebook earns unforged, and nothing on the exercises
  it leaves as stubs: a contestant started to keep the launch record that answers without
  it is stopped as "tampered", and the compile check compiles the kernel's source as the
  judge reads it in the file, in a child that ran no cell.
- **A frame nested 100,000 deep**, written on the contestant's channel: "tampered", never
  a crash of the judge's decoder.
- **A notebook of 500 MB**: refused as too large by the batch before it is read, its
  process's peak memory far under the file's size (measured by ``getrusage`` of the child
  that ran the batch, never by timing).

The judge's side runs in this process (``grading.judge.proxy.open_notebook``), its
contestants in the sandbox, as in a batch; the graders' own case functions are called.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grading.layout import EXERCISES, ROOT
from grading.proc import sandbox

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not sandbox.status().sandboxed,
                       reason=f"needs the grading sandbox here: {sandbox.status().line}"),
]

STEM7 = "07_triton_kernels"
# Exercise 7.1 in PyTorch, beside a launch of a kernel that compiles and computes nothing:
# the text shows `add_kernel[grid](...)` in `vector_add`, and the value is right. 7.2's
# wrapper is PyTorch too, its launch of the stub kernel in code that never runs. 7.3-7.5
# stay stubs.
IN_TORCH = '''
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pass


def vector_add(x, y, block_size=128):
    _check_tensor("x", x, 1)
    _check_tensor("y", y, 1)
    _check_same("y", y, "x", x)
    if y.shape != x.shape:
        raise ValueError(f"y must have the shape of x {tuple(x.shape)}, got {tuple(y.shape)}")
    if block_size <= 0 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two, got {block_size}")
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, x.numel(), BLOCK_SIZE=block_size)
    return (x + y).contiguous()


def softmax(x):
    _check_tensor("x", x, 2)
    if x.numel() < 0:
        softmax_kernel[(1,)](x, x, 0, 0, 0, 0, BLOCK_SIZE=16)
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
'''
# In the notebook's own process: no record of the launches, and every compile service a
# no-op or a launch made up for a kernel that compiles.
FORGE = '''
import importlib as _il
_tb = _il.import_module("grading.contestant.triton_bounds")
_tb._Checker.evidence = lambda self, value: {RECORD}
_g7 = _il.import_module("gpucompile.chapter07")
_g7.stub_message = lambda *a, **k: None
_g7.check_compile = lambda *a, **k: None
_g7.real_reports = lambda *a, **k: {{}}
_g7.launch_request = lambda nb, exercise, cid: {{
    "kernel": "add_kernel", "signature": {{"x_ptr": "*bf16", "y_ptr": "*bf16", "out_ptr": "*bf16",
                                          "n_elements": "i32"}},
    "constexprs": {{"BLOCK_SIZE": 128}}, "attrs": {{}}, "arch": cid.rsplit("-", 1)[1], "num_warps": 4,
    "num_stages": 3}}
'''
FORGERIES = {"suppressed": "None", "malformed": '{"launches": ["add_kernel"], "launch_count": "all"}'}
# (exercise, grader case): a value case and a bad-input case of the PyTorch 7.1, a value case
# of the PyTorch 7.2 and of the stub 7.5, and the compile check of 7.1 (a kernel that
# compiles), 7.2 and 7.4 (stubs).
CASES = [("7.1", "N1000-fp32"), ("7.1", "bad:length-mismatch"), ("7.2", "R3-C37-fp32"),
         ("7.5", "B2-H2-Hkv1-D16-page1-len5,9-fp32"), ("7.1", "compile:sm_80"), ("7.2", "compile:sm_80"),
         ("7.4", "compile:sm_90")]


def _stub_with(stem: str, *cells: str) -> str:
    nb = nbformat.read(EXERCISES / f"{stem}.ipynb", as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    nb.nbformat_minor = max(nb.nbformat_minor, 5)  # new cells carry ids
    return nbformat.writes(nb)


def _outcome(nb, exercise: str, case: str) -> str:
    """"passed", or the status (grading.outcome) of what the grader's case raised."""
    from grading.outcome import classify
    from tests import test_07_triton_kernels as t07

    nb.use(exercise)
    try:
        if case.startswith("compile:"):
            t07._grade_compile(nb, exercise, case.split(":")[1])
        else:
            t07._grade(nb, exercise, case)
    except Exception as exc:  # noqa: BLE001 - every way a case ends is an outcome
        return f"{classify(exc).value}: {str(exc)[:300]}"
    finally:
        nb.close()
    return "passed"


def _grade_chapter7(tmp_path: Path, name: str, text: str) -> dict[tuple[str, str], str]:
    from grading.judge.proxy import open_notebook

    path = tmp_path / name / f"{STEM7}.ipynb"
    path.parent.mkdir()
    path.write_text(text)
    nb = open_notebook(path, STEM7)
    return {case: _outcome(nb, *case) for case in CASES}


@pytest.fixture(scope="module")
def chapter7(tmp_path_factory):
    pytest.importorskip("triton")
    base = tmp_path_factory.mktemp("outside7")
    graded = {"unforged": _grade_chapter7(base, "unforged", _stub_with(STEM7, IN_TORCH))}
    for name, record in FORGERIES.items():
        graded[name] = _grade_chapter7(base, name, _stub_with(STEM7, IN_TORCH, FORGE.format(RECORD=record)))
    return graded


def test_a_forged_chapter_7_earns_nothing_beyond_the_same_notebook_unforged(chapter7):
    unforged = {case for case, outcome in chapter7["unforged"].items() if outcome == "passed"}
    for name in FORGERIES:
        passed = {case for case, outcome in chapter7[name].items() if outcome == "passed"}
        assert passed <= unforged, (name, {c: chapter7[name][c] for c in passed - unforged})
    # PyTorch's values earn nothing, forged or not; a stub's compile check fails on its text.
    for name, outcomes in chapter7.items():
        assert outcomes[("7.1", "N1000-fp32")] != "passed", (name, outcomes)
        assert not [c for c, o in outcomes.items() if c[0] != "7.1" and o == "passed"], (name, outcomes)
        assert outcomes[("7.2", "compile:sm_80")].startswith("not attempted"), (name, outcomes)


def test_a_missing_or_malformed_launch_record_is_tampered(chapter7):
    for name in FORGERIES:
        outcome = chapter7[name][("7.1", "N1000-fp32")]
        assert outcome.startswith("tampered") and "record of its Triton launches" in outcome, (name, outcome)
    assert chapter7["unforged"][("7.1", "N1000-fp32")].startswith("failed: "), chapter7["unforged"]


# -- a frame nested 100,000 deep ---------------------------------------------------------------
NESTED = '''
import os as _os, struct as _struct
_deep = b"[" * 100_000 + b"]" * 100_000
_frame = b'{"value": ' + _deep + b', "mutated": []}'


def _nested(*a, **k):
    for _fd in range(3, 64):
        try:
            _os.write(_fd, _struct.pack(">IQ", len(_frame), 0) + _frame)
        except OSError:
            pass
    return 0


kv_bytes_per_token = _nested
'''


def test_a_frame_nested_100000_deep_is_tampered(tmp_path):
    from grading.judge.proxy import open_notebook
    from grading.judge.session import ContestantBroken
    from grading.outcome import Status, classify

    path = tmp_path / "01_kv_memory.ipynb"
    path.write_text(_stub_with("01_kv_memory", NESTED))
    nb = open_notebook(path, "01_kv_memory")
    try:
        with pytest.raises(ContestantBroken) as raised:
            nb.kv_bytes_per_token(32, 8, 128, "fp16")
    finally:
        nb.close()
    assert classify(raised.value) is Status("tampered"), raised.value
    assert "nested" in str(raised.value), raised.value


# -- a notebook of 500 MB ----------------------------------------------------------------------
BATCH_PEAK = """
import resource, subprocess, sys
proc = subprocess.run([sys.executable, "-m", "grading.batch", sys.argv[1], "--out", sys.argv[2], "--chapters", "1",
                       "--workers", "1", "--quiet"], capture_output=True, text=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, proc.returncode)
"""


def _batch_peak_kib(subs: Path, out: Path) -> int:
    """The peak resident memory (KiB) of the batch grading ``subs`` (its largest process),
    read by ``getrusage`` in a parent that runs nothing else."""
    run = subprocess.run([sys.executable, "-c", BATCH_PEAK, str(subs), str(out)], cwd=ROOT, capture_output=True,
                         text=True, timeout=500, env={**os.environ, "PYTHONPATH": str(ROOT)})
    peak, code = run.stdout.split()
    assert code == "0", run.stderr[-2000:]
    return int(peak)


def test_a_500_mb_notebook_is_refused_before_it_is_read(tmp_path):
    size = 500 * 2**20
    notebook = tmp_path / "subs" / "student" / "01_kv_memory.ipynb"
    notebook.parent.mkdir(parents=True)
    with open(notebook, "wb") as f:  # a sparse file: 500 MB to a reader, no disk written
        f.write(b'{"cells": [')
        f.truncate(size)
    peak = _batch_peak_kib(tmp_path / "subs", tmp_path / "out")
    review = (tmp_path / "out" / "needs_review.md").read_text()
    assert "too large" in review, review
    # Any process that held the file whole would peak above its 500 MB (the batch once
    # reached 917 MiB hashing it); the batch's largest process is its judge's (~250 MB).
    assert peak < 400 * 1024, f"peak resident memory {peak // 1024} MiB"
