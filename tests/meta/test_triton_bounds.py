"""grading.contestant.triton_bounds: every interpreted load and store stays inside its tensor.

Hand-written kernels run under TRITON_INTERPRET=1 in this process. The out-of-bounds ones
are safe to run: the checker raises before the interpreter touches the memory. The last
test grades a catalogue bug through Chapter 7's grader, in its child process, to see the
message the student gets."""

from __future__ import annotations

import nbformat
import pytest
import torch

from grading.compare import GradingFailure
from grading.contestant.triton_bounds import OutOfBoundsAccess, bounds_checked
from grading.layout import SOLUTIONS
from grading.notebook.catalogue import load_catalogue

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

BLOCK = 64


def _copy(src, dst, n, shift, BLOCK: tl.constexpr, MASK_LOAD: tl.constexpr, MASK_STORE: tl.constexpr):
    """dst[i] = src[i + shift] for i < n, with or without the masks."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if MASK_LOAD:
        x = tl.load(src + offs + shift, mask=mask, other=0.0)
    else:
        x = tl.load(src + offs + shift)
    if MASK_STORE:
        tl.store(dst + offs, x, mask=mask)
    else:
        tl.store(dst + offs, x)


def _rows(x, out, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    """out[r, j] = 2 x[r, j] for a strided x, through tl.where on pointers and a 2-D mask."""
    rows = tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    mask = (rows < n_rows) & (cols < n_cols)
    ptrs = tl.where(mask, x + rows * stride + cols, x)  # masked lanes point at x[0, 0]
    tl.store(out + rows * n_cols + cols, 2 * tl.load(ptrs, mask=mask), mask=mask)


def _read_k(K, V, Out, start, BLOCK: tl.constexpr):
    """Out = K[start:start + BLOCK] + V[:BLOCK], unmasked."""
    offs = start + tl.arange(0, BLOCK)
    tl.store(Out + tl.arange(0, BLOCK), tl.load(K + offs) + tl.load(V + offs - start))


@pytest.fixture
def kernels(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # triton.jit reads it when it wraps a function
    return triton.jit(_copy), triton.jit(_rows)


def _launch(copy, src, dst, n, shift=0, mask_load=True, mask_store=True):
    copy[(triton.cdiv(n, BLOCK),)](src, dst, n, shift, BLOCK=BLOCK, MASK_LOAD=mask_load, MASK_STORE=mask_store)


def test_in_bounds_kernels_are_not_flagged_and_compute_the_same(kernels):
    copy, rows = kernels
    x, y = torch.randn(100), torch.empty(100)
    buf = torch.randn(6, 50)
    strided, out = buf[1:5, 3:40], torch.empty(4, 37)  # (4, 37) view: row stride 50, starts mid-buffer
    with bounds_checked():
        _launch(copy, x, y, 100)
        rows[(1,)](strided, out, 4, 37, strided.stride(0), BLOCK=BLOCK)
    assert torch.equal(y, x)
    assert torch.equal(out, 2 * strided)


def test_a_load_past_the_end_names_the_argument_and_the_element(kernels):
    copy, _ = kernels
    with pytest.raises(OutOfBoundsAccess) as info, bounds_checked():
        _launch(copy, torch.randn(100), torch.empty(100), 100, mask_load=False)
    assert str(info.value) == ("load from `src` at element 100, past its end (100), "
                               "in program (1, 0, 0) of _copy (28 of 64 lanes out of bounds)")
    assert isinstance(info.value, GradingFailure)  # the student sees the message as it is


def test_a_read_that_lands_in_the_next_tensor_is_still_past_the_end_of_its_own():
    """K and V side by side in one buffer: K's element 4160 is V's element 64, real memory.
    A check of "inside some tensor" passes it; the pointer's origin says it came from K."""
    pool = torch.randn(2 * 4096)
    k, v, out = pool[:4096], pool[4096:], torch.empty(64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        kernel = triton.jit(_read_k)
        with pytest.raises(OutOfBoundsAccess, match=r"^load from `K` at element 4160, past its end \(4096\), "), \
                bounds_checked():
            kernel[(1,)](k, v, out, 4160, BLOCK=64)


def test_a_store_before_the_start_is_stopped_before_it_writes(kernels):
    copy, _ = kernels
    pool, x = torch.zeros(300), torch.randn(100)
    with pytest.raises(OutOfBoundsAccess, match=r"^load from `src` at element -1, before its start, "), \
            bounds_checked():
        _launch(copy, pool[200:], pool[100:200], 100, shift=-1)  # src[-1] is real memory: pool[199]
    with pytest.raises(OutOfBoundsAccess, match=r"^store to `dst` at element 100, past its end \(100\), "), \
            bounds_checked():
        _launch(copy, x, pool[:100], 100, mask_store=False)
    assert torch.equal(pool[100:], torch.zeros(200))  # the lanes past dst never wrote into the rest of the pool


def test_an_access_caught_by_the_students_code_is_reported_when_the_block_ends(kernels):
    copy, _ = kernels
    with pytest.raises(OutOfBoundsAccess, match=r"^load from `src` at element 100"), bounds_checked():
        try:
            _launch(copy, torch.randn(100), torch.empty(100), 100, mask_load=False)
        except Exception:  # noqa: BLE001 - the student's code swallows the interpreter's error
            pass


def test_the_interpreter_is_restored_after_the_block(kernels):
    from triton.runtime import interpreter

    before = (interpreter._implicit_cvt, interpreter.GridExecutor._init_args_hst,
              dict(interpreter.interpreter_builder.__dict__))
    with pytest.raises(OutOfBoundsAccess), bounds_checked():
        _launch(kernels[0], torch.randn(10), torch.empty(10), 10, mask_load=False)
    after = (interpreter._implicit_cvt, interpreter.GridExecutor._init_args_hst,
             dict(interpreter.interpreter_builder.__dict__))
    assert after[:2] == before[:2]
    assert after[2].keys() == before[2].keys()
    with pytest.raises(RuntimeError, match="does not nest"), bounds_checked(), bounds_checked():
        pass


def test_chapter_7_grader_reports_the_access_to_the_student(tmp_path):
    """The catalogue's unmasked block-table load, graded as a student's notebook would be."""
    bug = next(b for b in load_catalogue("07_triton_kernels") if b.name == "paged_block_table_load_without_mask")
    from grading.judge import RemoteNotebook
    from tests import test_07_triton_kernels as grader

    text = nbformat.writes(bug.apply(nbformat.read(SOLUTIONS / "07_triton_kernels.ipynb", as_version=4)))
    nb = RemoteNotebook(SOLUTIONS / "07_triton_kernels.ipynb", text, "07_triton_kernels", "07_triton_kernels.ipynb")
    cid = "B2-H2-Hkv1-D16-page1-len5,9-fp32"  # the last sequence's tokens 9..15 index entries 10..15 of a 10-wide row
    try:
        with pytest.raises(GradingFailure) as info:
            grader._grade(nb, "7.5", cid)  # in a contestant, through the interpreter, bounds checked
    finally:
        nb.close()
    assert str(info.value).startswith("load from `Block_tables` at element 20, past its end (20), in program (1, ")
