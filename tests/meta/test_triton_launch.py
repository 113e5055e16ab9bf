"""grading.judge.triton_launch: Chapter 7's answers must come from their kernels.

The judge's reading of the notebook's text (which kernel a wrapper launches) runs on the
solution and on catalogue bugs, without running any cell; the contestant's evidence (what
a launch's stores wrote) on a hand-written kernel under TRITON_INTERPRET=1 in this process."""

from __future__ import annotations

import json

import nbformat
import pytest
import torch

from grading.notebook.catalogue import load_catalogue
from grading.layout import SOLUTIONS
from grading.judge.triton_launch import (Launches, dynamic_launch_problem, jit_problem, launched_kernels,
                                   static_launch_problem)

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
