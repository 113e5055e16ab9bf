"""Graders for Chapter 7 (exercises/07_triton_kernels.ipynb) against tests/references.

Every kernel runs in a child process (grading.isolation): under TRITON_INTERPRET=1 an
unmasked load is a real out-of-bounds access and can kill the process with SIGSEGV;
isolated, that is one failed exercise with the signal named. The cases of one
exercise share one child (importing torch and Triton costs seconds), and its results
are kept for the parametrized tests of that exercise. In the child, every load and store
of an interpreted kernel is checked against the tensor its pointer came from
(grading.triton_bounds): a kernel that reads past a tensor fails with the argument and
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
"""

import math
import zlib

import pytest
import torch

from gpucompile import KernelCompileError, compile_kernel, jitted_functions
from gpucompile.chapter07 import ARCHS, GRADED_KERNELS, case_ids, graded_request
from grading.compare import GradingFailure, assert_close, assert_raises, call_text
from grading.isolation import run_checks, shared_batch
from grading.triton_bounds import bounds_checked
from tests.references import ref_07_triton_kernels as ref

INTERPRETER_ENV = {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
GPU_ENV = {"TRITON_INTERPRET": "0"}
COMPILE_ENV = {"TRITON_INTERPRET": "0"}  # kernels defined for the compiler, GPU or not
BATCH_TIMEOUT_S = 100  # all cases of one exercise, including the child's start (a few seconds)
# The compiles of one exercise for both targets: about 3 s each for the flash kernel on the
# 2-core reference machine, much less for the others and for a kernel already in Triton's cache.
COMPILE_TIMEOUT_S = 120
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Tolerances on outputs, scaled by max(1, max |expected|): fp32 keeps ~7 digits through the
# online softmax; fp16/bf16 outputs are rounded once on store and p is rounded before p @ v.
ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
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


def _compare(got, expected, call, dtype, *, what="the result", atol_table=ATOL):
    if isinstance(got, torch.Tensor):
        got = got.cpu()
    scale = max(1.0, expected.abs().max().item()) if expected.numel() else 1.0
    assert_close(got, expected, call, atol=atol_table[dtype] * scale, dtype=dtype, what=what)


# -- Exercise 7.1: vector add ------------------------------------------------------------
VECTOR_CASES = {  # id: (length, dtype, block_size or None for the default)
    "N1-fp32": (1, "fp32", None),
    "N1000-fp32": (1000, "fp32", None),
    "N97-fp16": (97, "fp16", None),
    "N256-block64-fp32": (256, "fp32", 64),
    "N300-block256-fp32": (300, "fp32", 256),
}
VECTOR_BAD = {  # id: (x shape, y shape, y dtype, block_size, exception, argument named)
    "length-mismatch": ((8,), (9,), torch.float32, 128, ValueError, "y"),
    "dtype-mismatch": ((8,), (8,), torch.float16, 128, TypeError, "y"),
    "2d-x": ((2, 4), (2, 4), torch.float32, 128, ValueError, "x"),
    "block-size-100": ((8,), (8,), torch.float32, 100, ValueError, "block_size"),
}


def _vector_value(nb, cid, device, dtype):
    n, _, block = VECTOR_CASES[cid]
    g = _generator(cid)
    x, y = torch.randn(n, generator=g).to(dtype), torch.randn(n, generator=g).to(dtype)
    kwargs = {} if block is None else {"block_size": block}
    got = _call(nb.vector_add, _to(x, device), _to(y, device), **kwargs)
    expected = ref.vector_add(x, y).to(dtype).double()  # one correctly rounded add per element
    _compare(got, expected, call_text("vector_add", x, y, **kwargs), dtype)


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
    _compare(got, ref.softmax_rows(x), call_text("softmax", x) + f" [{cid}]", dtype)


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
    "block-m-24": ((1, 2, 16, 16), (1, 2, 16, 16), (1, 2, 16, 16), torch.float32, {"block_m": 24}, ValueError, "block_m"),
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
    _compare(out, expected_out, call, dtype, what="out")
    if isinstance(lse, torch.Tensor):
        lse = lse.cpu()
    assert_close(lse, expected_lse, call, atol=LSE_ATOL[dtype], dtype=torch.float32, what="lse (natural log)")


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
             dtype, what=f"out[:, :, :{POISON_FROM}]")


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


def _paged_value(nb, cid, device, dtype):
    H, H_kv, d, page_size, lens, _ = PAGED_CASES[cid]
    q, kp, vp, tables, seq_lens = _paged_inputs(cid, H, H_kv, d, page_size, lens, dtype)
    got = _call(nb.paged_decode_attention, *(_to(t, device) for t in (q, kp, vp, tables, seq_lens)))
    call = call_text("paged_decode_attention", q, kp, vp, tables, seq_lens) + f" [{cid}]"
    _compare(got, ref.paged_decode(q, kp, vp, tables, seq_lens), call, dtype)


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
    """Runs in the child (grading.isolation): one case of one exercise on ``nb``. Under the
    interpreter every load and store is checked against the tensor it points into
    (grading.triton_bounds): reading past a tensor fails the case even when the values
    read are thrown away."""
    if device != "cpu":
        return _check_case(nb, exercise, cid, device)
    with bounds_checked():
        return _check_case(nb, exercise, cid, device)


def _check_case(nb, exercise, cid, device):
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


def _grade(nb, exercise, cid, device="cpu"):
    """Run every case of the exercise in one child process (once per notebook, exercise and
    device, shared between xdist workers), then raise what this case's grader should show."""
    path = nb.path  # a notebook that could not be read raises its GradingFailure here
    ids = list(VALUE_CASES[exercise]) + ([POISON_CASE] if exercise == "7.4" else [])
    if device == "cpu":
        ids += [f"bad:{b}" for b in BAD_CASES[exercise]]
    env = INTERPRETER_ENV if device == "cpu" else GPU_ENV
    results = shared_batch(f"{path}|{__name__}|{exercise}|{device}", lambda: run_checks(
        path, f"{__name__}:check_case", [(i, (exercise, i, device)) for i in ids], timeout=BATCH_TIMEOUT_S, env=env))
    results[cid].raise_for_status()


# -- compiling for a GPU, without one -----------------------------------------------------------
def _stub_message(nb, exercise):
    """The NotImplementedError message of a kernel (or a jitted helper it calls) that is still a stub."""
    for name in GRADED_KERNELS[exercise] + (("flash_fwd_kernel",) if exercise == "7.4" else ()):
        for fn in jitted_functions(getattr(nb, name)).values():
            if "raise NotImplementedError(" in fn.src:
                return fn.src.split("raise NotImplementedError(", 1)[1].split(")")[0].strip("\"'")
    return None


def check_compile(nb, exercise, cid):
    """Runs in the child (grading.isolation, TRITON_INTERPRET=0): compile one kernel for one target."""
    stub = _stub_message(nb, exercise)
    if stub is not None:
        raise NotImplementedError(stub)
    request = graded_request(nb, exercise, cid)
    try:
        compile_kernel(**request)
    except KernelCompileError as exc:
        raise GradingFailure(f"{exc}\n  (the interpreter runs a kernel the GPU compiler may reject; "
                             f"compiled as on a GPU: bf16, {request['constexprs']}, num_warps={request['num_warps']})"
                             ) from None


def _grade_compile(nb, exercise, arch):
    path = nb.path
    ids = case_ids(exercise)
    results = shared_batch(f"{path}|{__name__}|{exercise}|compile", lambda: run_checks(
        path, f"{__name__}:check_compile", [(i, (exercise, i)) for i in ids], timeout=COMPILE_TIMEOUT_S,
        env=COMPILE_ENV))
    for cid in ids:
        if cid.endswith(arch):
            results[cid].raise_for_status()


# -- the graders ----------------------------------------------------------------------------------
@pytest.mark.ex7_1
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(VECTOR_CASES))
def test_vector_add(nb, cid):
    _grade(nb, "7.1", cid)


@pytest.mark.ex7_1
@pytest.mark.parametrize("cid", list(VECTOR_BAD))
def test_vector_add_rejects_bad_input(nb, cid):
    _grade(nb, "7.1", f"bad:{cid}")


@pytest.mark.ex7_2
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(SOFTMAX_CASES))
def test_softmax(nb, cid):
    _grade(nb, "7.2", cid)


@pytest.mark.ex7_2
@pytest.mark.parametrize("cid", list(SOFTMAX_BAD))
def test_softmax_rejects_bad_input(nb, cid):
    _grade(nb, "7.2", f"bad:{cid}")


@pytest.mark.ex7_3
@pytest.mark.points(3)
@pytest.mark.parametrize("cid", list(FLASH_CASES))
def test_flash_attention(nb, cid):
    _grade(nb, "7.3", cid)


@pytest.mark.ex7_3
@pytest.mark.parametrize("cid", list(FLASH_BAD))
def test_flash_attention_rejects_bad_input(nb, cid):
    _grade(nb, "7.3", f"bad:{cid}")


@pytest.mark.ex7_4
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(CAUSAL_CASES))
def test_causal_attention(nb, cid):
    _grade(nb, "7.4", cid)


@pytest.mark.ex7_4
def test_causal_attention_reads_no_block_past_the_diagonal(nb):
    _grade(nb, "7.4", POISON_CASE)


@pytest.mark.ex7_5
@pytest.mark.points(2)
@pytest.mark.parametrize("cid", list(PAGED_CASES))
def test_paged_decode(nb, cid):
    _grade(nb, "7.5", cid)


@pytest.mark.ex7_5
@pytest.mark.parametrize("cid", PAGED_BAD)
def test_paged_decode_rejects_bad_input(nb, cid):
    _grade(nb, "7.5", f"bad:{cid}")


# -- the same value cases compiled for a GPU, in bf16 ------------------------------------------
GPU_CASES = [(ex, cid) for ex in ("7.1", "7.2", "7.3", "7.4", "7.5") for cid in VALUE_CASES[ex]] + [("7.4", POISON_CASE)]
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
