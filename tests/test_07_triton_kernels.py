"""Graders for Chapter 7 (exercises/07_triton_kernels.ipynb) against tests/references.

Every kernel runs in the notebook's contestant (grading.contestant.main), never here: under
TRITON_INTERPRET=1 an unmasked load is a real out-of-bounds access and can kill the
process with SIGSEGV; in a contestant, that is one failed case with the signal named,
and the next case starts a fresh one. In the contestant, every load and store
of an interpreted kernel is checked against the tensor its pointer came from
(grading.contestant.triton_bounds): a kernel that reads past a tensor fails with the argument and
the element ("load from `K` at element 4160, past its end (4096)"), even when it throws
the values away and its result is right.

On CPU the kernels run through the interpreter in fp32 and fp16 (the interpreter does
not emulate bf16 arithmetic faithfully). The tests marked ``gpu`` run the same value
cases compiled for CUDA in bf16, and are skipped, with the reason, without a GPU.

The interpreter accepts kernels the compiler rejects (a global Python float, a tl.dot
smaller than 16, a loop variable that changes shape). ``test_compiles_for_gpu`` compiles
every graded kernel for an A100 (sm_80) and an H100 (sm_90) with no GPU present
(gpucompile: Triton's compiler and NVIDIA's ptxas, shipped in the Triton wheel), in a
child process without the interpreter, at the block sizes the chapter uses.

Exercises 7.6 (occupancy) and 7.7 (block configuration) read the compiler's report. They
are graded on hand-made cases, each isolating one rule, and on the ptxas reports of a
flash_fwd_kernel compiled for sm_90 and sm_80 in one child; where the Triton wheel has no
ptxas, those cases are skipped with the reason (not counted).

A kernel exercise is graded on its kernel (grading.judge.triton_launch): the notebook's text,
read here, must show the wrapper launching the exercise's ``@triton.jit`` kernel, and on
CPU every element of each tensor it returns must hold what a store of that kernel wrote
(seen through the interpreter, in the contestant). ``vector_add`` returning ``x + y``
computes the right values and earns nothing, in its bad-input tests too.

Each exercise is graded alone (grading.judge.substitute): while one exercise's tests run, the
other exercises' functions are references (tests/references/ref_07_triton_jit.py), in
the child too, which applies the swap after loading the notebook. So 7.3's kernel runs
with the reference causal helpers; 7.4's helpers are graded inside the reference flash
kernel, re-made to call them (Triton looks a kernel's callees up in its globals when it
interprets or compiles it); 7.6 and 7.7 read the ptxas reports of the reference kernel.
"""

import functools
import zlib
from dataclasses import dataclass

import pytest
import torch

from gpucompile.chapter07 import ARCHS, GRADED_KERNELS, REAL_CONFIGS, case_ids
from grading.compare import GradingFailure, assert_close, assert_raises, call_text, derived_atol
from grading.judge import replay
from grading.judge.triton_launch import dynamic_launch_problem, jit_problem, static_launch_problem
from tests.references import ref_07_triton_kernels as ref

INTERPRETER_ENV = {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
GPU_ENV = {"TRITON_INTERPRET": "0"}
COMPILE_ENV = {"TRITON_INTERPRET": "0"}  # kernels defined for the compiler, GPU or not
BATCH_TIMEOUT_S = 100  # all cases of one exercise, including the child's start (a few seconds)
# The compiles of one exercise for both targets: about 3 s each for the flash kernel on the
# 2-core reference machine, much less for the others and for a kernel already in Triton's cache.
COMPILE_TIMEOUT_S = 120
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Tolerances on fp32 outputs, scaled by max(1, max |expected|): fp32 keeps ~7 digits
# through the online softmax.
ATOL = {torch.float32: 1e-5}
# fp16 and bf16 outputs: derived, case by case, from the error of a correct implementation
# on the same inputs, as in Chapter 5: a result may be off by LOW_PRECISION_FACTOR times
# that error, plus eps(dtype) / 16 where that error is 0. The correct implementations: one
# correctly rounded add (7.1), an fp32 softmax rounded once (7.2), PyTorch's SDPA, which
# accumulates in fp32 and rounds p before p @ v as the kernels do (7.3-7.5).
# Measured under the interpreter (2-core AMD EPYC, torch 2.13 CPU): the solution's fp16
# error is 1.00-1.02x SDPA's and equal to the fp32 softmax's. These replace atol = 2e-3
# (fp16) and 2e-2 (bf16) times max(1, max |expected|), which were 4.5-10x SDPA's error
# for attention and 33x the correct softmax's.
LOW_PRECISION = (torch.float16, torch.bfloat16)
LOW_PRECISION_FACTOR = 2.0
# The log-sum-exp is always fp32, computed from q k^T in fp32 from the same rounded inputs
# the reference gets (fp16 measured 5e-7 under the interpreter). bf16 runs only on a GPU and
# has not been measured there yet, so it keeps a wider bound until it is.
LSE_ATOL = {torch.float32: 1e-5, torch.float16: 1e-5, torch.bfloat16: 1e-3}
NEEDS_GPU = pytest.mark.skipif(not torch.cuda.is_available(),
                               reason="needs a CUDA GPU; on CPU these kernels are graded through TRITON_INTERPRET=1")


def _generator(case_id):
    return torch.Generator().manual_seed(zlib.crc32(case_id.encode()))


def _call(fn, *args, **kwargs):
    """Call a notebook function; a NotImplementedError raised inside an interpreted kernel
    (a stub helper) comes wrapped in Triton's InterpreterError: unwrap it."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        cause = exc
        while type(cause).__name__ == "InterpreterError" and cause.__cause__ is not None:
            cause = cause.__cause__  # a helper called from a kernel is wrapped once per level
        if isinstance(cause, NotImplementedError):
            raise cause from None
        raise


def _to(t, device):
    return t.to(device=device)


def _compare(got, expected, call, dtype, *, correct, what="the result"):
    """``got`` against the fp64 ``expected``; ``correct()`` is a correct result in ``dtype``
    on the same inputs, from which a low-precision tolerance is derived."""
    if isinstance(got, torch.Tensor):
        got = got.cpu()
    if dtype in LOW_PRECISION:
        atol = derived_atol(dtype, expected, correct, LOW_PRECISION_FACTOR)
    else:
        atol = ATOL[dtype] * (max(1.0, expected.abs().max().item()) if expected.numel() else 1.0)
    assert_close(got, expected, call, atol=atol, dtype=dtype, what=what)


def _sdpa(q, k, v, causal=False):
    """PyTorch's SDPA on the same inputs, GQA by repeating the KV heads: fp32 accumulation."""
    G = q.shape[1] // k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1), is_causal=causal)


# The wrapper each kernel exercise grades and the kernel it must launch; 7.4's helpers run
# inside the flash kernel, which 7.3's wrapper launches (the reference's, while 7.4 is graded).
WRAPPERS = {"7.1": ("vector_add", "add_kernel"), "7.2": ("softmax", "softmax_kernel"),
            "7.3": ("flash_attention", "flash_fwd_kernel"), "7.4": ("flash_attention", "flash_fwd_kernel"),
            "7.5": ("paged_decode_attention", "paged_decode_kernel")}


def _kernel_wrote(nb, exercise, call, *what):
    """The tensors the last call returned (named ``what``) hold what the exercise's kernel
    stored, as the contestant saw it through the interpreter (nothing is ruled without it)."""
    wrapper, kernel = WRAPPERS[exercise]
    problem = dynamic_launch_problem(vars(nb).get("launches"), wrapper, kernel, what)
    if problem is not None:
        raise GradingFailure(f"{call}: {problem}")


def _launches_its_kernel(nb, exercise):
    """The notebook's text (which the judge holds and never runs) launches the exercise's
    kernel from its wrapper; 7.4's helpers are @triton.jit functions."""
    text = vars(nb).get("text")
    if text is None:  # a notebook loaded in this process (make bench's baseline): no text to read
        return
    if exercise == "7.4":
        problem = jit_problem(text, GRADED_KERNELS["7.4"])
    else:
        problem = static_launch_problem(text, *WRAPPERS[exercise])
    if problem is not None:
        raise GradingFailure(problem)


# -- Exercise 7.1: vector add ------------------------------------------------------------
VECTOR_CASES = {  # id: (length, dtype, block_size or None for the default, layout)
    "N1-fp32": (1, "fp32", None, "dense"),
    "N1000-fp32": (1000, "fp32", None, "dense"),
    "N97-fp16": (97, "fp16", None, "dense"),
    "N256-block64-fp32": (256, "fp32", 64, "dense"),
    "N300-block256-fp32": (300, "fp32", 256, "dense"),
    # Every other element of a longer vector (stride 2), as a slice x[::2] is: the kernel
    # walks its pointers with unit stride, so the wrapper must hand it contiguous copies.
    "N200-strided-fp32": (200, "fp32", 64, "strided"),
}
VECTOR_BAD = {  # id: (x shape, y shape, y dtype, block_size, exception, argument named)
    "length-mismatch": ((8,), (9,), torch.float32, 128, ValueError, "y"),
    "dtype-mismatch": ((8,), (8,), torch.float16, 128, TypeError, "y"),
    "2d-x": ((2, 4), (2, 4), torch.float32, 128, ValueError, "x"),
    "block-size-100": ((8,), (8,), torch.float32, 100, ValueError, "block_size"),
}


def _vector_value(nb, cid, device, dtype):
    n, _, block, layout = VECTOR_CASES[cid]
    g = _generator(cid)
    x, y = torch.randn(n, generator=g).to(dtype), torch.randn(n, generator=g).to(dtype)
    if layout == "strided":  # the same values, every other element of a vector twice as long
        x, y = (torch.stack([t, torch.full_like(t, 1e4)], dim=1).reshape(-1)[::2] for t in (x, y))  # (n,) stride 2
    kwargs = {} if block is None else {"block_size": block}
    got = _call(nb.vector_add, _to(x, device), _to(y, device), **kwargs)
    expected = ref.vector_add(x, y).to(dtype).double()  # one correctly rounded add per element
    call = call_text("vector_add", x, y, **kwargs)
    _compare(got, expected, call, dtype, correct=lambda: expected.to(dtype))
    _kernel_wrote(nb, "7.1", call, "the result")


def _vector_bad(nb, cid):
    xs, ys, ydt, block, exc, names = VECTOR_BAD[cid]
    assert_raises(nb.vector_add, torch.ones(xs), torch.ones(ys, dtype=ydt), block_size=block, exc=exc, names=names)


# -- Exercise 7.2: softmax ------------------------------------------------------------------
SOFTMAX_CASES = {  # id: (rows, cols, dtype, how the input is made)
    "R1-C1-fp32": (1, 1, "fp32", "randn"),
    "R3-C37-fp32": (3, 37, "fp32", "randn"),
    "R8-C100-fp32": (8, 100, "fp32", "randn"),
    "R5-C128-fp32": (5, 128, "fp32", "randn"),
    "R4-C50-fp16": (4, 50, "fp16", "randn"),
    "R4-C37-strided-rows-fp32": (4, 37, "fp32", "strided"),
    "R3-C20-large-logits-fp32": (3, 20, "fp32", "large"),
    "R2-C33-some-minus-inf-fp32": (2, 33, "fp32", "minus-inf"),
}
SOFTMAX_BAD = {
    "1d-x": (torch.ones(5), ValueError, "x"),
    "int-x": (torch.ones(2, 5, dtype=torch.int64), TypeError, "x"),
}


def _softmax_input(cid, dtype):
    rows, cols, _, how = SOFTMAX_CASES[cid]
    g = _generator(cid)
    if how == "strided":
        return torch.randn(rows, cols + 27, generator=g).to(dtype)[:, :cols]  # row stride 64, not 37
    x = torch.randn(rows, cols, generator=g)
    if how == "large":
        x = x * 1000  # exp overflows unless the row max is subtracted first
    if how == "minus-inf":
        x[:, ::3] = float("-inf")  # masked entries get probability 0
    return x.to(dtype)


def _softmax_value(nb, cid, device, dtype):
    x = _softmax_input(cid, dtype)
    got = _call(nb.softmax, _to(x, device))
    call = call_text("softmax", x) + f" [{cid}]"
    _compare(got, ref.softmax_rows(x), call, dtype, correct=lambda: torch.softmax(x.float(), dim=-1).to(dtype))
    _kernel_wrote(nb, "7.2", call, "the result")


# -- Exercises 7.3 and 7.4: flash attention ----------------------------------------------------
FLASH_CASES = {  # id: (B, H, H_kv, N, d, dtype, how)
    "B1-H2-Hkv1-N77-D32-fp32": (1, 2, 1, 77, 32, "fp32", "randn"),
    "B2-H4-Hkv2-N50-D16-fp32": (2, 4, 2, 50, 16, "fp32", "randn"),
    "B1-H1-Hkv1-N1-D16-fp32": (1, 1, 1, 1, 16, "fp32", "randn"),
    "B1-H2-Hkv2-N64-D64-fp32": (1, 2, 2, 64, 64, "fp32", "randn"),
    "B2-H4-Hkv2-N45-D32-bnhd-layout-fp32": (2, 4, 2, 45, 32, "fp32", "bnhd"),
    "B1-H2-Hkv1-N70-D32-fp16": (1, 2, 1, 70, 32, "fp16", "randn"),
    "B1-H1-Hkv1-N100-D16-large-values-fp16": (1, 1, 1, 100, 16, "fp16", "large"),
}
CAUSAL_CASES = {
    "B1-H2-Hkv1-N77-D32-causal-fp32": (1, 2, 1, 77, 32, "fp32", "randn"),
    "B2-H4-Hkv2-N50-D16-causal-fp32": (2, 4, 2, 50, 16, "fp32", "randn"),
    "B1-H1-Hkv1-N1-D16-causal-fp32": (1, 1, 1, 1, 16, "fp32", "randn"),
    "B1-H2-Hkv2-N64-D64-causal-fp32": (1, 2, 2, 64, 64, "fp32", "randn"),
    "B1-H2-Hkv1-N70-D32-causal-fp16": (1, 2, 1, 70, 32, "fp16", "randn"),
}
POISON_CASE = "B1-H2-Hkv1-N80-D16-block16-NaN-past-key-32"
POISON_FROM = 32  # a multiple of the 16-wide blocks: query blocks 0 and 1 must never read key block 2
FLASH_BAD = {  # id: (q shape, k shape, v shape, k dtype, kwargs, exception, argument named)
    "q-3d": ((2, 16, 16), (1, 2, 16, 16), (1, 2, 16, 16), torch.float32, {}, ValueError, "q"),
    "v-shape-differs": ((1, 2, 16, 16), (1, 2, 16, 16), (1, 2, 8, 16), torch.float32, {}, ValueError, "v"),
    "k-dtype-differs": ((1, 2, 16, 16), (1, 2, 16, 16), (1, 2, 16, 16), torch.float16, {}, TypeError, "k"),
    "H4-Hkv3": ((1, 4, 16, 16), (1, 3, 16, 16), (1, 3, 16, 16), torch.float32, {}, ValueError, "k"),
    "head-dim-24": ((1, 2, 16, 24), (1, 2, 16, 24), (1, 2, 16, 24), torch.float32, {}, ValueError, "head_dim"),
    "block-m-24": ((1, 2, 16, 16), (1, 2, 16, 16), (1, 2, 16, 16), torch.float32, {"block_m": 24}, ValueError,
                   "block_m"),
}


def _qkv(cid, spec, dtype):
    B, H, H_kv, N, d, _, how = spec
    g = _generator(cid)
    if how == "bnhd":  # the (B, N, H, d) layout of a fused QKV projection, viewed as (B, H, N, d): not contiguous
        q = torch.randn(B, N, H, d, generator=g).transpose(1, 2)
        k = torch.randn(B, N, H_kv, d, generator=g).transpose(1, 2)
        v = torch.randn(B, N, H_kv, d, generator=g).transpose(1, 2)
        return q.to(dtype), k.to(dtype), v.to(dtype)
    q, k, v = (torch.randn(B, h, N, d, generator=g) for h in (H, H_kv, H_kv))
    if how == "large":
        # Near-uniform attention over values ~2000: the sum of p v reaches ~2e5, past fp16's 65504.
        q, v = q * 0.01, v.abs() * 1000 + 1500
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _flash_value(nb, cid, device, dtype, causal):
    spec = (CAUSAL_CASES if causal else FLASH_CASES)[cid]
    q, k, v = _qkv(cid, spec, dtype)
    result = _call(nb.flash_attention, _to(q, device), _to(k, device), _to(v, device), causal=causal)
    call = call_text("flash_attention", q, k, v, causal=causal) + f" [{cid}]"
    if not isinstance(result, tuple) or len(result) != 2:
        raise GradingFailure(f"{call} returned {type(result).__name__}; expected the tuple (out, lse)")
    out, lse = result
    expected_out, expected_lse = ref.attention(q, k, v, causal=causal)
    _compare(out, expected_out, call, dtype, what="out", correct=lambda: _sdpa(q, k, v, causal))
    if isinstance(lse, torch.Tensor):
        lse = lse.cpu()
    assert_close(lse, expected_lse, call, atol=LSE_ATOL[dtype], dtype=torch.float32, what="lse (natural log)")
    _kernel_wrote(nb, "7.4" if causal else "7.3", call, "out", "lse")


def _flash_poisoned(nb, device, dtype):
    """Keys and values from POISON_FROM on are NaN. Query blocks before it never see them
    (causal), and a kernel that stops at the diagonal block never loads them: a kernel that
    walks every block multiplies their zero weights by NaN and its rows come out NaN."""
    q, k, v = _qkv(POISON_CASE, (1, 2, 1, 80, 16, "fp32", "randn"), dtype)
    expected, _ = ref.attention(q, k, v, causal=True)
    k[:, :, POISON_FROM:], v[:, :, POISON_FROM:] = float("nan"), float("nan")
    out, _ = _call(nb.flash_attention, _to(q, device), _to(k, device), _to(v, device),
                   causal=True, block_m=16, block_n=16)
    call = call_text("flash_attention", q, k, v, causal=True, block_m=16, block_n=16)
    _compare(out.cpu()[:, :, :POISON_FROM], expected[:, :, :POISON_FROM],
             call + f": keys >= {POISON_FROM} are NaN; rows < {POISON_FROM} must never read them (early exit)",
             dtype, what=f"out[:, :, :{POISON_FROM}]",
             correct=lambda: _sdpa(q, k[:, :, :POISON_FROM], v[:, :, :POISON_FROM], True)[:, :, :POISON_FROM])
    _kernel_wrote(nb, "7.4", call, "out", "lse")


def _flash_bad(nb, cid):
    qs, ks, vs, kdt, kwargs, exc, names = FLASH_BAD[cid]
    assert_raises(nb.flash_attention, torch.randn(qs), torch.randn(ks).to(kdt), torch.randn(vs),
                  exc=exc, names=names, **kwargs)


# -- Exercise 7.5: paged decode attention ---------------------------------------------------
PAGED_CASES = {  # id: (H, H_kv, d, page_size, sequence lengths, dtype)
    "B3-H4-Hkv2-D32-page16-len1,37,64-fp32": (4, 2, 32, 16, [1, 37, 64], "fp32"),
    "B2-H2-Hkv1-D16-page1-len5,9-fp32": (2, 1, 16, 1, [5, 9], "fp32"),
    "B3-H4-Hkv4-D32-page5-len1,13,25-fp32": (4, 4, 32, 5, [1, 13, 25], "fp32"),
    "B2-H4-Hkv1-D16-page8-len40,17-fp16": (4, 1, 16, 8, [40, 17], "fp16"),
    # Chapter 2's pool (num_pages, 2, page_size, H_kv, d): K and V are the strided views pool[:, 0] and pool[:, 1].
    "B2-H4-Hkv2-D16-page4-len9,16-ch2-pool-fp32": (4, 2, 16, 4, [9, 16], "fp32"),
}


def _paged_inputs(cid, H, H_kv, d, page_size, lens, dtype, spare_pages=3, extra_table_entries=1):
    """Pages of all sequences scattered over a pool with spare pages; unused table entries are -1."""
    g = _generator(cid)
    pages_per_seq = [-(-n // page_size) for n in lens]
    num_pages = sum(pages_per_seq) + spare_pages
    order = torch.randperm(num_pages, generator=g)
    tables = torch.full((len(lens), max(pages_per_seq) + extra_table_entries), -1, dtype=torch.int32)
    used = 0
    for b, p in enumerate(pages_per_seq):
        tables[b, :p] = order[used : used + p]
        used += p
    q = torch.randn(len(lens), H, d, generator=g).to(dtype)
    if cid.endswith("ch2-pool-fp32"):
        pool = torch.randn(num_pages, 2, page_size, H_kv, d, generator=g).to(dtype)  # (P, 2, page_size, H_kv, d)
        k_pages, v_pages = pool[:, 0], pool[:, 1]  # views with the pool's strides, no copy
    else:
        k_pages = torch.randn(num_pages, page_size, H_kv, d, generator=g).to(dtype)  # (P, page_size, H_kv, d)
        v_pages = torch.randn(num_pages, page_size, H_kv, d, generator=g).to(dtype)
    return q, k_pages, v_pages, tables, torch.tensor(lens, dtype=torch.int32)


def _sdpa_paged(q, k_pages, v_pages, block_tables, seq_lens):
    """The correct low-precision result for paged decode: each sequence's keys and values
    gathered through its block table (a copy), then PyTorch's SDPA, one query row."""
    page_size = k_pages.shape[1]
    rows = []
    for b in range(q.shape[0]):
        n = int(seq_lens[b])
        slots = [(int(block_tables[b, t // page_size]), t % page_size) for t in range(n)]
        k = torch.stack([k_pages[p, o] for p, o in slots], dim=1)[None]  # (1, H_kv, n, d)
        v = torch.stack([v_pages[p, o] for p, o in slots], dim=1)[None]
        rows.append(_sdpa(q[b][None, :, None], k, v)[0, :, 0])  # (H, d)
    return torch.stack(rows)  # (B, H, d)


def _paged_value(nb, cid, device, dtype):
    H, H_kv, d, page_size, lens, _ = PAGED_CASES[cid]
    q, kp, vp, tables, seq_lens = _paged_inputs(cid, H, H_kv, d, page_size, lens, dtype)
    got = _call(nb.paged_decode_attention, *(_to(t, device) for t in (q, kp, vp, tables, seq_lens)))
    call = call_text("paged_decode_attention", q, kp, vp, tables, seq_lens) + f" [{cid}]"
    _compare(got, ref.paged_decode(q, kp, vp, tables, seq_lens), call, dtype,
             correct=lambda: _sdpa_paged(q, kp, vp, tables, seq_lens))
    _kernel_wrote(nb, "7.5", call, "the result")


def _paged_bad(nb, cid):
    q, kp, vp, tables, seq_lens = _paged_inputs("bad", 4, 2, 16, 4, [6, 3], torch.float32)
    if cid == "seq-len-zero":
        seq_lens[1], names = 0, "seq_lens"
    elif cid == "seq-len-past-table":
        seq_lens[0], names = tables.shape[1] * 4 + 1, "seq_lens"
    elif cid == "page-outside-pool":
        tables[0, 1], names = kp.shape[0] + 2, "block_tables"
    else:  # "H4-Hkv3"
        kp, vp, names = kp[:, :, :1].expand(-1, -1, 3, -1), vp[:, :, :1].expand(-1, -1, 3, -1), "k_pages"
    assert_raises(nb.paged_decode_attention, q, kp, vp, tables, seq_lens, exc=ValueError, names=names)


PAGED_BAD = ["seq-len-zero", "seq-len-past-table", "page-outside-pool", "H4-Hkv3"]


# -- running the cases in a child process ------------------------------------------------------
VALUE_CASES = {"7.1": VECTOR_CASES, "7.2": SOFTMAX_CASES, "7.3": FLASH_CASES, "7.4": CAUSAL_CASES, "7.5": PAGED_CASES}
BAD_CASES = {"7.1": list(VECTOR_BAD), "7.2": list(SOFTMAX_BAD), "7.3": list(FLASH_BAD), "7.4": [], "7.5": PAGED_BAD}


DTYPE_FIELD = {"7.1": 1, "7.2": 2, "7.3": 5, "7.4": 5, "7.5": 5}  # where each case spec names its dtype


def check_case(nb, exercise, cid, device):
    """One case of one exercise on ``nb``, whose contestant runs the kernels (through the
    interpreter on CPU, where it checks every load and store against the tensor it points
    into, grading.contestant.triton_bounds: reading past a tensor fails the case even when the values
    read are thrown away)."""
    torch.set_num_threads(1)
    if cid.startswith("bad:"):
        cid = cid[4:]
        {"7.1": _vector_bad, "7.3": _flash_bad, "7.5": _paged_bad}.get(exercise, _softmax_bad)(nb, cid)
        return
    if cid == POISON_CASE:
        _flash_poisoned(nb, device, torch.float32 if device == "cpu" else torch.bfloat16)
        return
    spec = VALUE_CASES[exercise][cid]
    dtype = DTYPES[spec[DTYPE_FIELD[exercise]]]
    if device != "cpu":
        dtype = torch.bfloat16  # the GPU run checks the dtype the interpreter cannot
    if exercise == "7.1":
        _vector_value(nb, cid, device, dtype)
    elif exercise == "7.2":
        _softmax_value(nb, cid, device, dtype)
    elif exercise in ("7.3", "7.4"):
        _flash_value(nb, cid, device, dtype, causal=exercise == "7.4")
    else:
        _paged_value(nb, cid, device, dtype)


def _softmax_bad(nb, cid):
    x, exc, names = SOFTMAX_BAD[cid]
    assert_raises(nb.softmax, x, exc=exc, names=names)


def _kernels(nb, device):
    """The notebook in a contestant that runs its kernels on ``device``: through the
    interpreter with every access bounds-checked on CPU, compiled on a GPU."""
    if device == "cpu":
        return nb.variant(env=INTERPRETER_ENV, bounds_checked=True)
    return nb.variant(env=GPU_ENV)


def _grade(nb, exercise, cid, device="cpu"):
    """One case, its kernels run by the contestant (a crash there costs this case; the next
    case starts a fresh contestant), its results compared here; then the notebook's text
    must show the exercise's kernel launched (a stub fails on its NotImplementedError first)."""
    check_case(_kernels(nb, device), exercise, cid, device)
    _launches_its_kernel(nb, exercise)


# -- compiling for a GPU, without one -----------------------------------------------------------
def _grade_compile(nb, exercise, arch):
    """Compile the exercise's kernel for ``arch`` as its wrapper launches it: the contestant,
    without the interpreter, says what the wrapper launches (gpucompile.chapter07.launch_request,
    a grading.contestant.services entry), and the judge compiles the kernel's source, as it
    reads it in the notebook's file, in a child of its own (grading.judge.triton_compile)."""
    from pathlib import Path

    from grading.judge.triton_compile import check_compile

    compiler = nb.variant(env=COMPILE_ENV)
    text = vars(nb).get("text") or Path(nb.path).read_text()  # make bench's in-process baseline has no text
    for cid in case_ids(exercise):
        if cid.endswith(arch):
            launched = functools.partial(compiler.service, "chapter07.launch_request", exercise, cid,
                                         timeout=COMPILE_TIMEOUT_S)
            check_compile(text, nb.name, exercise, vars(nb).get("exercise"), launched, COMPILE_TIMEOUT_S)


# -- the graders ----------------------------------------------------------------------------------
@pytest.mark.ex7_1
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(VECTOR_CASES))
def test_vector_add(nb, cid):
    _grade(nb, "7.1", cid)


@pytest.mark.ex7_1
@pytest.mark.parametrize("cid", list(VECTOR_BAD))
def test_vector_add_rejects_bad_input(nb, cid):
    _grade(nb, "7.1", f"bad:{cid}")


@pytest.mark.ex7_2
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(SOFTMAX_CASES))
def test_softmax(nb, cid):
    _grade(nb, "7.2", cid)


@pytest.mark.ex7_2
@pytest.mark.parametrize("cid", list(SOFTMAX_BAD))
def test_softmax_rejects_bad_input(nb, cid):
    _grade(nb, "7.2", f"bad:{cid}")


@pytest.mark.ex7_3
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("cid", list(FLASH_CASES))
def test_flash_attention(nb, cid):
    _grade(nb, "7.3", cid)


@pytest.mark.ex7_3
@pytest.mark.parametrize("cid", list(FLASH_BAD))
def test_flash_attention_rejects_bad_input(nb, cid):
    _grade(nb, "7.3", f"bad:{cid}")


@pytest.mark.ex7_4
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(CAUSAL_CASES))
def test_causal_attention(nb, cid):
    _grade(nb, "7.4", cid)


@pytest.mark.ex7_4
def test_causal_attention_reads_no_block_past_the_diagonal(nb):
    _grade(nb, "7.4", POISON_CASE)


@pytest.mark.ex7_5
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(PAGED_CASES))
def test_paged_decode(nb, cid):
    _grade(nb, "7.5", cid)


@pytest.mark.ex7_5
@pytest.mark.parametrize("cid", PAGED_BAD)
def test_paged_decode_rejects_bad_input(nb, cid):
    _grade(nb, "7.5", f"bad:{cid}")


# -- the same value cases compiled for a GPU, in bf16 ------------------------------------------
GPU_CASES = ([(ex, cid) for ex in ("7.1", "7.2", "7.3", "7.4", "7.5") for cid in VALUE_CASES[ex]]
             + [("7.4", POISON_CASE)])
GPU_MARKS = {ex: getattr(pytest.mark, f"ex{ex.replace('.', '_')}") for ex in VALUE_CASES}


@pytest.mark.gpu
@NEEDS_GPU
@pytest.mark.parametrize("exercise,cid", [pytest.param(ex, cid, marks=GPU_MARKS[ex], id=f"{ex}-{cid}-as-bf16")
                                          for ex, cid in GPU_CASES])
def test_gpu_bf16(nb, exercise, cid):
    _grade(nb, exercise, cid, device="cuda")


# -- every graded kernel compiled for an A100 and an H100, on the CPU ----------------------------
COMPILE_MARKS = {ex: getattr(pytest.mark, f"ex{ex.replace('.', '_')}") for ex in GRADED_KERNELS}


@pytest.mark.parametrize("exercise,arch", [pytest.param(ex, arch, marks=COMPILE_MARKS[ex], id=f"{ex}-{arch}")
                                           for ex in GRADED_KERNELS for arch in ARCHS])
def test_compiles_for_gpu(nb, exercise, arch):
    _grade_compile(nb, exercise, arch)


# -- Exercises 7.6 and 7.7: what the compiler's report allows on one SM ----------------------------
# Occupancy from ptxas numbers: (registers per thread, shared bytes per program, threads per
# program, arch). Each case isolates one rule of the statement (the id says which).
OCCUPANCY_CASES = {
    "R166-S128KiB-T256-sm_90-chapter-row": (166, 131072, 256, "sm_90"),
    "R16-S0-T32-sm_90-block-slots": (16, 0, 32, "sm_90"),
    "R24-S0-T512-sm_90-warp-slots": (24, 0, 512, "sm_90"),
    "R170-S0-T128-sm_90-register-unit-256": (170, 0, 128, "sm_90"),
    "R192-S0-T96-sm_90-sub-partitions": (192, 0, 96, "sm_90"),
    "R64-S0-T112-sm_90-partial-warp": (64, 0, 112, "sm_90"),
    "R32-S45KiB-T128-sm_90-reserved-1KiB": (32, 46080, 128, "sm_90"),
    "R32-S32300-T128-sm_90-shared-unit-128": (32, 32300, 128, "sm_90"),
    "R32-S114176-T128-sm_90-228KiB-not-228kB": (32, 114176, 128, "sm_90"),
    "R32-S40000-T128-sm_80-164KiB": (32, 40000, 128, "sm_80"),
    "R32-S232449-T128-sm_90-too-much-shared": (32, 232449, 128, "sm_90"),
    "R255-S0-T1024-sm_80-too-many-registers": (255, 0, 1024, "sm_80"),
    "R8-S0-T1-sm_80-one-thread": (8, 0, 1, "sm_80"),
}
OCCUPANCY_BAD = {  # id: (arguments, exception, argument named)
    "registers-float": ((64.0, 0, 128, "sm_90"), TypeError, "registers_per_thread"),
    "registers-bool": ((True, 0, 128, "sm_90"), TypeError, "registers_per_thread"),
    "registers-0": ((0, 0, 128, "sm_90"), ValueError, "registers_per_thread"),
    "registers-256": ((256, 0, 128, "sm_90"), ValueError, "registers_per_thread"),
    "shared-negative": ((64, -1, 128, "sm_90"), ValueError, "shared_bytes_per_block"),
    "threads-str": ((64, 0, "128", "sm_90"), TypeError, "threads_per_block"),
    "threads-0": ((64, 0, 0, "sm_90"), ValueError, "threads_per_block"),
    "threads-1025": ((64, 0, 1025, "sm_90"), ValueError, "threads_per_block"),
    "arch-sm_75": ((64, 0, 128, "sm_75"), ValueError, "arch"),
}


def _ptxas_log(registers, spill_stores=0, spill_loads=0, spill_line=True):
    """A ptxas -v report in the compiler's own words (ptxas 12.x, as Triton prints it)."""
    head = "ptxas info    : Compiling entry function 'flash_fwd_kernel' for 'sm_90a'\n"
    head += "ptxas info    : Function properties for flash_fwd_kernel\n"
    if spill_line:
        stack = spill_stores // 2
        head += f"    {stack} bytes stack frame, {spill_stores} bytes spill stores, {spill_loads} bytes spill loads\n"
    return head + f"ptxas info    : Used {registers} registers, used 1 barriers, 0 bytes cumulative stack size\n"


# id: ({(BLOCK_M, BLOCK_N, num_warps, num_stages): (registers, spill stores, spill loads)}, programs_per_sm)
CONFIG_CASES = {
    "largest-tile-spills-p1": ({(128, 128, 4, 2): (255, 164, 124), (128, 64, 8, 3): (166, 0, 0),
                                (64, 64, 4, 3): (168, 0, 0), (32, 32, 4, 2): (119, 0, 0)}, 1),
    "255-registers-8-warps-fit-p1": ({(128, 128, 8, 2): (255, 0, 0), (128, 64, 8, 3): (166, 0, 0)}, 1),
    "255-registers-8-warps-p2": ({(128, 128, 8, 2): (255, 0, 0), (128, 64, 8, 3): (166, 0, 0),
                                  (64, 64, 4, 3): (168, 0, 0)}, 2),
    "spill-loads-only": ({(128, 128, 8, 2): (255, 0, 8), (64, 64, 4, 3): (168, 0, 0)}, 1),
    "spill-stores-only": ({(128, 128, 8, 2): (255, 8, 0), (64, 64, 4, 3): (168, 0, 0)}, 1),
    "register-unit-256-p3": ({(128, 64, 4, 2): (170, 0, 0), (64, 64, 4, 2): (128, 0, 0)}, 3),
    "sub-partitions-2-warps-p5": ({(64, 64, 2, 2): (192, 0, 0), (32, 32, 2, 2): (100, 0, 0)}, 5),
    "ties-tile-then-block-m-warps-stages": ({(64, 128, 4, 3): (200, 0, 0), (128, 64, 8, 3): (150, 0, 0),
                                            (128, 64, 4, 3): (200, 0, 0), (128, 64, 4, 2): (200, 0, 0),
                                            (32, 64, 4, 3): (90, 0, 0)}, 1),
    "tile-before-block-m": ({(128, 32, 4, 2): (120, 0, 0), (64, 128, 4, 2): (180, 0, 0)}, 1),
    "everything-spills": ({(128, 128, 4, 2): (255, 164, 124), (64, 32, 2, 2): (255, 8, 8)}, 1),
    "no-spill-line": ({(64, 64, 4, 3): (168, None, None), (128, 128, 4, 2): (255, 164, 124)}, 1),
}
CONFIG_BAD = {  # id: (reports, programs_per_sm, exception, argument named)
    "reports-list": ([_ptxas_log(100)], 1, TypeError, "reports"),
    "key-of-3": ({(64, 64, 4): _ptxas_log(100)}, 1, ValueError, "reports"),
    "log-without-registers": ({(64, 64, 4, 3): "ptxas info    : 0 bytes gmem\n"}, 1, ValueError, "reports"),
    "programs-0": ({(64, 64, 4, 3): _ptxas_log(100)}, 0, ValueError, "programs_per_sm"),
    "programs-float": ({(64, 64, 4, 3): _ptxas_log(100)}, 1.0, TypeError, "programs_per_sm"),
}


def _config_reports(cid):
    table, programs = CONFIG_CASES[cid]
    reports = {cfg: _ptxas_log(r, s or 0, l or 0, spill_line=s is not None) for cfg, (r, s, l) in table.items()}
    return reports, programs


# The flash kernel 7.6 and 7.7 read (the references', each exercise graded alone), compiled as
# the chapter compiles it (bf16, d=128, N=8192) at gpucompile.chapter07.REAL_CONFIGS: the
# chapter's table, which spills at (128, 64, 4, 3), and two more that spill. Cold, ~4 s each
# on the 2-core machine, by the judge once, whatever the number of notebooks it grades.
REAL_CASES = {"7.6": ["sm_90", "sm_80"], "7.7": ["sm_90-programs1", "sm_90-programs2", "sm_80-programs1"]}
REAL_TIMEOUT_S = 240  # the nine compiles, cold, on the 2-core machine (measured ~40 s), with room


@dataclass(frozen=True)
class _Usage:
    registers: int
    shared_bytes: int
    spill_bytes: int


@dataclass(frozen=True)
class _Report:
    usage: _Usage
    ptxas_log: str


def _ptxas_missing():
    """Why the compiler cannot run here (no ptxas in the Triton wheel), or None."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return "Triton is not installed"
    ptxas = Path(list(spec.submodule_search_locations)[0]) / "backends" / "nvidia" / "bin" / "ptxas"
    return None if ptxas.exists() else f"{ptxas} is missing: this Triton wheel ships no ptxas to compile with"


def _real_reports():
    """{arch: {config: report}} for the flash_fwd_kernel 7.6 and 7.7 read (each graded alone:
    the references'), compiled by the judge itself, once per judge (grading.judge.triton_child
    keeps them)."""
    from grading.judge.triton_child import reference_reports

    plain = reference_reports(REAL_TIMEOUT_S)
    _check_reports(plain)
    return {arch: {tuple(row[:4]): _Report(_Usage(*row[4:7]), row[7]) for row in rows} for arch, rows in plain.items()}


def _check_reports(plain):
    """The compiling child's reports: one row per configuration compiled (REAL_CONFIGS),
    of the promised types, or the cases would check nothing at all."""
    rows_ok = isinstance(plain, dict) and sorted(plain) == sorted(REAL_CONFIGS) and all(
        isinstance(rows, list) and [tuple(r[:4]) for r in rows if isinstance(r, list)] == REAL_CONFIGS[arch]
        and all(isinstance(r, list) and len(r) == 8 and all(type(v) is int for v in r[:7])
                and isinstance(r[7], str) for r in rows)
        for arch, rows in plain.items())
    if not rows_ok:
        raise GradingFailure("the notebook's process sent the compiler's reports without one row per configuration "
                             f"compiled ({REAL_CONFIGS}): the grader cannot check them")


def check_compiler_numbers(nb, exercise, cid):
    """One case of 7.6 or 7.7 (the notebook's functions called in its contestant)."""
    from grading.compare import assert_equal

    if exercise == "7.6" and cid.startswith("bad:"):
        args, exc, names = OCCUPANCY_BAD[cid[4:]]
        assert_raises(nb.occupancy, *args, exc=exc, names=names)
    elif exercise == "7.6" and cid.startswith("real:"):
        nb.occupancy(64, 0, 128, "sm_90")  # a stub says so before anything is compiled
        arch = cid[5:]
        for (m, n, w, s), c in _real_reports()[arch].items():
            args = (c.usage.registers, c.usage.shared_bytes, 32 * w, arch)
            assert_equal(nb.occupancy(*args), ref.occupancy(*args), call_text("occupancy", *args)
                         + f" [flash_fwd_kernel compiled for {arch} with BLOCK_M={m}, BLOCK_N={n}, "
                           f"num_warps={w}, num_stages={s}: ptxas -v and Triton's shared memory]")
    elif exercise == "7.6":
        args = OCCUPANCY_CASES[cid]
        assert_equal(nb.occupancy(*args), ref.occupancy(*args), call_text("occupancy", *args) + f" [{cid}]")
    elif cid.startswith("bad:"):
        reports, programs, exc, names = CONFIG_BAD[cid[4:]]
        assert_raises(nb.choose_block_config, reports, programs, exc=exc, names=names)
    elif cid.startswith("real:"):
        nb.choose_block_config({(16, 16, 1, 1): _ptxas_log(32)}, 1)  # a stub says so before compiling
        arch, programs = cid[5:].split("-programs")
        compiled = _real_reports()[arch]
        reports = {cfg: c.ptxas_log for cfg, c in compiled.items()}
        table = "; ".join(f"{cfg}: {c.usage.registers} registers, {c.usage.spill_bytes} spill bytes"
                          for cfg, c in compiled.items())
        assert_equal(nb.choose_block_config(reports, int(programs)), ref.choose_block_config(reports, int(programs)),
                     f"choose_block_config(<ptxas -v of flash_fwd_kernel for {arch}>, {programs}) "
                     f"[the compiler reported {table}]")
    else:
        reports, programs = _config_reports(cid)
        assert_equal(nb.choose_block_config(reports, programs), ref.choose_block_config(reports, programs),
                     call_text("choose_block_config", reports, programs) + f" [{cid}]")


def _grade_compiler_numbers(nb, exercise, cid):
    """The cases graded on the compiled flash kernel skip where it cannot be compiled."""
    if cid.startswith("real:"):
        if replay.in_release():
            pytest.skip("the student edition holds expected values, not the references: it cannot compute them "
                        "for the kernel compiled here (yours); not counted (your instructor's graders check it)")
        missing = _ptxas_missing()
        if missing:
            pytest.skip(f"cannot compile for a GPU on this machine ({missing}); not counted")
    check_compiler_numbers(nb.variant(env=COMPILE_ENV), exercise, cid)


@pytest.mark.ex7_6
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(OCCUPANCY_CASES))
def test_occupancy(nb, cid):
    _grade_compiler_numbers(nb, "7.6", cid)


@pytest.mark.ex7_6
@pytest.mark.parametrize("cid", list(OCCUPANCY_BAD))
def test_occupancy_rejects_bad_input(nb, cid):
    _grade_compiler_numbers(nb, "7.6", f"bad:{cid}")


@pytest.mark.ex7_6
@pytest.mark.parametrize("arch", REAL_CASES["7.6"])
def test_occupancy_of_the_compiled_flash_kernel(nb, arch):
    _grade_compiler_numbers(nb, "7.6", f"real:{arch}")


@pytest.mark.ex7_7
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(CONFIG_CASES))
def test_choose_block_config(nb, cid):
    _grade_compiler_numbers(nb, "7.7", cid)


@pytest.mark.ex7_7
@pytest.mark.parametrize("cid", list(CONFIG_BAD))
def test_choose_block_config_rejects_bad_input(nb, cid):
    _grade_compiler_numbers(nb, "7.7", f"bad:{cid}")


@pytest.mark.ex7_7
@pytest.mark.parametrize("cid", REAL_CASES["7.7"])
def test_choose_block_config_on_the_compiled_flash_kernel(nb, cid):
    _grade_compiler_numbers(nb, "7.7", f"real:{cid}")
