"""grading.judge.triton_launch: Chapter 7's answers must come from their kernels.

The judge's reading of the notebook's text (which kernel a wrapper launches) runs on the
solution and on catalogue bugs, without running any cell; the contestant's evidence (what
a launch's stores wrote) on a hand-written kernel under TRITON_INTERPRET=1 in this process."""

from __future__ import annotations

import json

import nbformat
import pytest
import torch

from grading.judge.triton_launch import (
    Launches,
    dynamic_launch_problem,
    jit_problem,
    launched_kernels,
    static_launch_problem,
)
from grading.layout import SOLUTIONS
from grading.notebook.catalogue import load_catalogue

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

WRAPPERS = {"vector_add": "add_kernel", "softmax": "softmax_kernel", "flash_attention": "flash_fwd_kernel",
            "paged_decode_attention": "paged_decode_kernel"}


def _solution() -> nbformat.NotebookNode:
    return nbformat.read(SOLUTIONS / "07_triton_kernels.ipynb", as_version=4)


def _with_bug(name: str) -> str:
    bug = next(b for b in load_catalogue("07_triton_kernels") if b.name == name)
    return nbformat.writes(bug.apply(_solution()))


def _notebook(*cells: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


KERNEL = "import triton\n@triton.jit\ndef add_kernel(x, y, out, n, BLOCK: tl.constexpr):\n    pass\n"


def test_the_solution_launches_every_graded_kernel():
    text = nbformat.writes(_solution())
    for wrapper, kernel in WRAPPERS.items():
        assert launched_kernels(text, wrapper) == {kernel}
        assert static_launch_problem(text, wrapper, kernel) is None
    assert jit_problem(text, ("causal_loop_end", "causal_mask")) is None


def test_a_wrapper_without_a_launch_is_read_as_such():
    assert "never launches `add_kernel`" in static_launch_problem(_with_bug("vector_add_in_torch"), "vector_add",
                                                                  "add_kernel")
    assert "never launches `softmax_kernel`" in static_launch_problem(_with_bug("softmax_in_torch"), "softmax",
                                                                      "softmax_kernel")
    # Launched and thrown away: the text shows the launch; only the stores tell (below).
    assert static_launch_problem(_with_bug("vector_add_result_not_the_kernels"), "vector_add", "add_kernel") is None


def test_the_reading_follows_helpers_and_later_cells():
    wrapper = "def vector_add(x, y):\n    return _run(x, y)\n"
    helper = ("def _run(x, y):\n    out = x.new_empty(x.shape)\n"
              "    add_kernel[(1,)](x, y, out, 1, BLOCK=4)\n    return out\n")
    assert static_launch_problem(_notebook(KERNEL, wrapper, helper), "vector_add", "add_kernel") is None
    # A later cell that rebinds the name leaves no wrapper to read.
    text = _notebook(KERNEL, wrapper, helper, "vector_add = lambda x, y: x + y\n")
    assert "no top-level `def vector_add(...)`" in static_launch_problem(text, "vector_add", "add_kernel")
    # A plain function named like the kernel is not a kernel.
    plain = "def add_kernel(x, y, out, n, BLOCK):\n    out.copy_(x + y)\n"
    assert "is not a `@triton.jit` function" in static_launch_problem(_notebook(plain, wrapper, helper),
                                                                     "vector_add", "add_kernel")
    assert "`causal_mask`" in jit_problem(_notebook(KERNEL, "def causal_mask(s, m, n):\n    return s\n"),
                                          ("causal_mask",))


def _add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def test_the_stores_say_which_tensor_the_kernel_wrote(monkeypatch):
    from grading.contestant.triton_bounds import bounds_checked

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # triton.jit reads it when it wraps a function
    add = triton.jit(_add)
    x, y = torch.randn(100), torch.randn(100)

    def wrapper(change):
        out = torch.empty(100)
        add[(2,)](x, y, out, 100, BLOCK=64)
        return change(out)

    cases = {"the kernel's": (lambda out: out, 100), "x + y in PyTorch": (lambda out: x + y, 0),
             "one element changed": (lambda out: out.index_fill_(0, torch.tensor([7]), 3.0), 99),
             "a view of it": (lambda out: out[10:20], 10)}
    for name, (change, written) in cases.items():
        with bounds_checked() as checker:
            value = wrapper(change)
        evidence = Launches.from_json(checker.evidence(value))
        assert evidence.launches == ["_add"], name
        assert evidence.outputs == [{"elements": value.numel(), "written": written,
                                     "kernels": ["_add"] if written else []}], name
        problem = dynamic_launch_problem(evidence, "vector_add", "_add", ("the result",))
        assert (problem is None) == (written == value.numel()), name

    with bounds_checked() as checker:
        value = x + y
    problem = dynamic_launch_problem(Launches.from_json(checker.evidence(value)), "vector_add", "_add",
                                     ("the result",))
    assert "launched no Triton kernel at all" in problem


def test_evidence_of_another_shape_is_ignored():
    assert Launches.from_json({"launches": "add_kernel"}) is None
    assert Launches.from_json({"launches": [], "launch_count": 1, "complete": True,
                               "outputs": [{"elements": 1.5, "written": 1, "kernels": []}]}) is None
    assert dynamic_launch_problem(None, "vector_add", "add_kernel", ("the result",)) is None


def test_a_record_that_names_fewer_tensors_than_were_returned_fails():
    record = Launches(["flash_fwd_kernel"], 1, True, [{"elements": 4, "written": 4, "kernels": ["flash_fwd_kernel"]}])
    problem = dynamic_launch_problem(record, "flash_attention", "flash_fwd_kernel", ("out", "lse"))
    assert "names 1 tensor(s)" in problem


# -- the compile check reads the kernels' source in the file (grading.judge.triton_compile) ----------
def test_the_compile_check_reads_every_kernel_of_the_solution_from_its_text():
    from grading.judge.triton_compile import notebook_kernels, runs_code_when_defined, stub_or_missing

    kernels = notebook_kernels(nbformat.writes(_solution()), "07_triton_kernels.ipynb")
    names = {"add_kernel", "softmax_kernel", "flash_fwd_kernel", "paged_decode_kernel", "causal_loop_end",
             "causal_mask"}
    assert names <= set(kernels.functions), sorted(kernels.functions)
    assert kernels.modules["tl"] == "triton.language" and kernels.values["LN_2"] == {"constexpr": 0.6931471805599453}
    assert all(runs_code_when_defined(kernels.functions[n].node) is None for n in names)
    assert kernels.functions["add_kernel"].file.startswith("07_triton_kernels.ipynb#cell-")
    stub_or_missing(kernels, tuple(names))  # solved: no stub among them
    stubs = notebook_kernels(nbformat.writes(nbformat.read(SOLUTIONS.parent / "exercises" / "07_triton_kernels.ipynb",
                                                           as_version=4)), "stub.ipynb")
    with pytest.raises(NotImplementedError, match="Exercise 7.1"):
        stub_or_missing(stubs, ("add_kernel",))


def test_a_kernel_that_runs_code_when_defined_or_is_rebound_is_not_compiled():
    from grading.judge.triton_compile import notebook_kernels, runs_code_when_defined

    text = _notebook(KERNEL, "@triton.jit(do_not_specialize=__import__('os').getpid())\ndef k1(x):\n    pass\n",
                     "@triton.jit\ndef k2(x=open('/etc/passwd')):\n    pass\n",
                     "@triton.jit\ndef k3(x: print('hi')):\n    pass\n",
                     "def wrapper():\n    add_kernel = None\n    return add_kernel\n",
                     "@triton.jit\ndef k4(x):\n    pass\n", "k4 = 3\n")
    kernels = notebook_kernels(text, "nb.ipynb")
    assert set(kernels.functions) == {"add_kernel", "k1", "k2", "k3"}  # a local is not a rebinding; k4 is rebound
    assert "decorator" in runs_code_when_defined(kernels.functions["k1"].node)
    assert "default" in runs_code_when_defined(kernels.functions["k2"].node)
    assert "annotation" in runs_code_when_defined(kernels.functions["k3"].node)
    assert kernels.values["k4"] == {"plain": 3}
    constants = notebook_kernels(_notebook("import math\nBLOCK = 64\nBLOCK = BLOCK * 2\nHALF = BLOCK // 2\n"
                                           "SCALE = tl.constexpr(1 / math.sqrt(2))\nBIG = 2**70\nF = open('x')\n"
                                           "NAMES = {'a'}\n"), "nb.ipynb").values
    assert constants == {"BLOCK": {"plain": 128}, "HALF": {"plain": 64},
                         "SCALE": {"constexpr": 0.7071067811865475}}, constants


def test_a_launch_off_its_schema_or_unlike_the_kernel_is_refused():
    from grading.compare import GradingFailure
    from grading.judge.triton_compile import LaunchRequest

    good = {"kernel": "add_kernel", "signature": {"x": "*bf16", "y": "*bf16", "out": "*bf16", "n": "i32"},
            "constexprs": {"BLOCK": 128}, "attrs": {"x": [["tt.divisibility", 16]]}, "arch": "sm_90",
            "num_warps": 4, "num_stages": 3}
    request = LaunchRequest.from_json(good)
    assert request.problem_with(["x", "y", "out", "n", "BLOCK"]) is None
    assert "takes" in request.problem_with(["x", "y", "out", "n"])
    for bad in ({**good, "num_warps": 3}, {**good, "arch": "sm_75"}, {**good, "constexprs": {"BLOCK": [1]}},
                {**good, "extra": 1}, {**good, "signature": {"x": 1}}, "add_kernel"):
        with pytest.raises(GradingFailure):
            LaunchRequest.from_json(bad)


def test_the_judge_compiles_a_kernel_read_from_the_text_in_a_child_of_its_own():
    from pathlib import Path

    from grading.judge.triton_child import compile_outside
    from grading.judge.triton_compile import LaunchRequest, compile_job, notebook_kernels

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton wheel ships no ptxas to compile with")
    cast = ("@triton.jit\ndef cast_kernel(x, out, n, OUT: tl.constexpr, BLOCK: tl.constexpr):\n"
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
            "    tl.store(out + offs, tl.load(x + offs, mask=offs < n).to(OUT), mask=offs < n)\n")
    kernels = notebook_kernels(_notebook("import triton\nimport triton.language as tl\n", cast), "nb.ipynb")
    request = LaunchRequest.from_json({"kernel": "cast_kernel", "signature": {"x": "*fp32", "out": "*fp16", "n": "i32"},
                                       "constexprs": {"OUT": {"tl_dtype": "fp16"}, "BLOCK": 128}, "attrs": {},
                                       "arch": "sm_80", "num_warps": 4, "num_stages": 2})
    assert compile_outside(compile_job(kernels, request), timeout=120) is None
    broken = notebook_kernels(_notebook("import triton\nimport triton.language as tl\n",
                                        cast.replace("tl.arange(0, BLOCK)", "tl.arange(0, 100)")), "nb.ipynb")
    error = compile_outside(compile_job(broken, request), timeout=120)
    assert "cast_kernel does not compile for sm_80 (nb.ipynb cell 1, line 3" in error and "power of 2" in error, error
