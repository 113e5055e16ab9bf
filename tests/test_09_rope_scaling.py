"""Graders for Chapter 9 (exercises/09_rope_scaling.ipynb) against tests/references.

The frequencies are compared with ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``
(through the adapter in tests/references/ref_09_rope_scaling.py), on the shapes of real
models and on many more."""

import pytest
import torch

from grading.compare import GradingFailure, assert_close, assert_raises, call_text
from tests.references import ref_09_rope_scaling as ref

# transformers computes inv_freq in float32: base**(2i/d) rounded to float32 has a
# relative error of up to about (1 + ln(base)) * 2**-24, i.e. 1.0e-6 for base 5e6,
# and YaRN's and Llama 3.1's blends add one or two float32 roundings more. A correct
# float64 solution is therefore within 2e-6 of the reference (7e-7 measured over these
# cases); 4e-6 leaves a margin, far below what any mistake of the catalogue changes.
FREQ_RTOL = 4e-6
FACTOR_ATOL = 1e-12  # the attention factor: one log, same formula, both float64
# vs complex128; |x| < 5, a <= 1.3. The solution's largest error is 3.1e-7 in fp32 (3.1% of
# 1e-5) and 4.4e-16 in fp64.
ROPE_ATOL = {torch.float64: 1e-12, torch.float32: 1e-5}
# fp16 from the rounding of a correct rotation in fp16 (the dtype of x, as the chapter and
# transformers compute it): cos, sin, the attention factor a, two products and one sum each
# round once, so to first order |y - exact| <= 4 u a (|x1| + |x2|), u = 2**-11 (fp16's unit
# roundoff), taken at the case's largest pair. It was 1e-2 before; the bound here is 7.6e-3.
FP16_UNIT_ROUNDOFF = 2.0**-11
ROPE_FP16_ROUNDINGS = 4


def rope_atol(x: torch.Tensor, attention_factor: float) -> float:
    if x.dtype != torch.float16:
        return ROPE_ATOL[x.dtype]
    half = x.shape[-1] // 2
    pairs = x[..., :half].double().abs() + x[..., half:].double().abs()  # (..., T, d/2)
    return ROPE_FP16_ROUNDINGS * FP16_UNIT_ROUNDOFF * attention_factor * float(pairs.max())

# head_dim, base: the rotary shapes of real models and a few odd ones.
SHAPES = [(16, 10000.0), (32, 500000.0), (64, 10000.0), (64, 100000.0), (80, 1e6), (96, 10000.0),
          (128, 500000.0), (128, 1e6), (256, 5e6)]
FACTORS = [1.0, 1.5, 2.0, 4.0, 8.0, 32.0]


def _shape_id(head_dim, base):
    return f"d{head_dim}-base{base:g}"


def _check_freqs(got, expected, call):
    if not isinstance(got, torch.Tensor):
        raise GradingFailure(f"{call} returned {type(got).__name__}; expected a float64 tensor")
    assert_close(got, expected, call, atol=0.0, rtol=FREQ_RTOL, dtype=torch.float64, what="the inverse frequencies")


# -- Exercise 9.1: the inverse frequencies ------------------------------------------------
@pytest.mark.ex9_1
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("head_dim,base", SHAPES, ids=[_shape_id(*s) for s in SHAPES])
def test_rope_inv_freq(nb, head_dim, base):
    call = call_text("rope_inv_freq", head_dim, base)
    _check_freqs(nb.rope_inv_freq(head_dim, base), ref.default_inv_freq(head_dim, base), call)


@pytest.mark.ex9_1
def test_rope_inv_freq_default_base(nb):
    _check_freqs(nb.rope_inv_freq(64), ref.default_inv_freq(64, 10000.0), "rope_inv_freq(64)")


@pytest.mark.ex9_1
@pytest.mark.parametrize("args,exc,names", [
    ((63, 10000.0), ValueError, "head_dim"), ((0, 10000.0), ValueError, "head_dim"),
    ((64.0, 10000.0), TypeError, "head_dim"), ((True, 10000.0), TypeError, "head_dim"),
    ((64, 1.0), ValueError, "base"), ((64, -5.0), ValueError, "base"), ((64, "10000"), TypeError, "base"),
], ids=["odd-d", "zero-d", "float-d", "bool-d", "base-1", "negative-base", "string-base"])
def test_rope_inv_freq_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.rope_inv_freq, *args, exc=exc, names=names)


# -- Exercise 9.2: RoPE with any frequencies and an attention factor ----------------------
ROPE_CASES = [
    # id, x shape (..., T, d), positions, base, factor for linear scaling, attention factor, dtype
    ("B1-H1-T5-d8-fp64", (1, 1, 5, 8), [0, 1, 2, 3, 4], 10000.0, 1.0, 1.0, torch.float64),
    ("B2-H3-T7-d64-fp64-a1.2", (2, 3, 7, 64), [0, 3, 9, 100, 2047, 4096, 8191], 100000.0, 2.0, 1.2, torch.float64),
    ("T4-d32-far-positions-fp64", (4, 32), [100_000, 250_000, 999_999, 3], 500000.0, 8.0, 1.3, torch.float64),
    ("B1-H2-T6-d128-fp32-a1.07", (1, 2, 6, 128), [5, 6, 7, 8, 9, 10], 1e6, 4.0, 1.07, torch.float32),
    ("H3-T3-d16-fp16", (3, 3, 16), [1, 20, 300], 10000.0, 1.0, 1.0, torch.float16),
]


@pytest.mark.ex9_2
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,shape,positions,base,factor,a,dtype", ROPE_CASES, ids=[c[0] for c in ROPE_CASES])
def test_apply_rope_freqs(nb, name, shape, positions, base, factor, a, dtype):
    g = torch.Generator().manual_seed(len(name))
    x = torch.randn(shape, generator=g, dtype=torch.float64).clamp(-4.5, 4.5).to(dtype)
    pos = torch.tensor(positions)
    inv_freq = ref.linear_inv_freq(shape[-1], base, factor)  # float64 (d/2,)
    call = (f"apply_rope_freqs(x {tuple(shape)} {dtype}, positions={positions}, "
            f"inv_freq (d={shape[-1]}, base {base:g}, /{factor:g}), attention_factor={a})")
    got = nb.apply_rope_freqs(x, pos, inv_freq, a)
    assert_close(got, ref.rotate(x, pos, inv_freq, a), call, atol=rope_atol(x, a), dtype=dtype)


@pytest.mark.ex9_2
def test_apply_rope_freqs_accepts_float32_frequencies_and_default_factor(nb):
    x = torch.randn(2, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    pos = torch.arange(5) * 37
    inv_freq = ref.default_inv_freq(16, 10000.0).float()
    call = "apply_rope_freqs(x (2, 5, 16) float64, positions=37 * arange(5), float32 inv_freq)"
    assert_close(nb.apply_rope_freqs(x, pos, inv_freq), ref.rotate(x, pos, inv_freq.double()), call,
                 atol=ROPE_ATOL[torch.float64], dtype=torch.float64)


@pytest.mark.ex9_2
@pytest.mark.parametrize("case,exc,names", [
    ("x-int", TypeError, "x"), ("x-odd-d", ValueError, "x"), ("pos-float", TypeError, "positions"),
    ("pos-wrong-length", ValueError, "positions"), ("pos-negative", ValueError, "positions"),
    ("freq-int", TypeError, "inv_freq"), ("freq-wrong-length", ValueError, "inv_freq"),
    ("factor-zero", ValueError, "attention_factor"), ("factor-string", TypeError, "attention_factor"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_apply_rope_freqs_rejects_bad_input(nb, case, exc, names):
    x, pos, freq, a = torch.zeros(1, 3, 8), torch.arange(3), torch.ones(4, dtype=torch.float64), 1.0
    bad = {
        "x-int": dict(x=torch.zeros(1, 3, 8, dtype=torch.int64)), "x-odd-d": dict(x=torch.zeros(1, 3, 7)),
        "pos-float": dict(pos=torch.arange(3.0)), "pos-wrong-length": dict(pos=torch.arange(4)),
        "pos-negative": dict(pos=torch.tensor([0, -1, 2])), "freq-int": dict(freq=torch.ones(4, dtype=torch.int64)),
        "freq-wrong-length": dict(freq=torch.ones(8, dtype=torch.float64)), "factor-zero": dict(a=0.0),
        "factor-string": dict(a="1.0"),
    }[case]
    x, pos, freq, a = bad.get("x", x), bad.get("pos", pos), bad.get("freq", freq), bad.get("a", a)
    assert_raises(nb.apply_rope_freqs, x, pos, freq, a, exc=exc, names=names, call=f"apply_rope_freqs({case})")


# -- Exercise 9.3: position interpolation --------------------------------------------------
LINEAR_CASES = [(d, b, s) for (d, b) in SHAPES for s in FACTORS[::2]] + [(64, 100000.0, 2.0), (128, 10000.0, 4.0)]


@pytest.mark.ex9_3
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("head_dim,base,factor", LINEAR_CASES,
                         ids=[f"{_shape_id(d, b)}-s{s:g}" for d, b, s in LINEAR_CASES])
def test_linear_inv_freq(nb, head_dim, base, factor):
    call = call_text("linear_inv_freq", head_dim, base, factor)
    _check_freqs(nb.linear_inv_freq(head_dim, base, factor), ref.linear_inv_freq(head_dim, base, factor), call)


@pytest.mark.ex9_3
@pytest.mark.parametrize("args,exc,names", [
    ((63, 10000.0, 2.0), ValueError, "head_dim"), ((64.0, 10000.0, 2.0), TypeError, "head_dim"),
    ((64, 1.0, 2.0), ValueError, "base"), ((64, 10000.0, 0.5), ValueError, "factor"),
    ((64, 10000.0, "2"), TypeError, "factor"),
], ids=["odd-d", "float-d", "base-1", "factor-below-1", "string-factor"])
def test_linear_inv_freq_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.linear_inv_freq, *args, exc=exc, names=names)


# -- Exercise 9.4: NTK-aware scaling of the base ---------------------------------------------
NTK_CASES = [(d, b, s) for (d, b) in SHAPES for s in FACTORS[1::2]] + [(4, 10000.0, 2.0), (64, 100000.0, 1.0)]


@pytest.mark.ex9_4
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("head_dim,base,factor", NTK_CASES, ids=[f"{_shape_id(d, b)}-s{s:g}" for d, b, s in NTK_CASES])
def test_ntk_inv_freq(nb, head_dim, base, factor):
    call = call_text("ntk_inv_freq", head_dim, base, factor)
    _check_freqs(nb.ntk_inv_freq(head_dim, base, factor), ref.ntk_inv_freq(head_dim, base, factor), call)


@pytest.mark.ex9_4
@pytest.mark.parametrize("args,exc,names", [
    ((2, 10000.0, 2.0), ValueError, "head_dim"), ((63, 10000.0, 2.0), ValueError, "head_dim"),
    ((64, 0.5, 2.0), ValueError, "base"), ((64, 10000.0, 0.0), ValueError, "factor"),
    ((64, 10000.0, None), TypeError, "factor"),
], ids=["d2", "odd-d", "base-below-1", "factor-0", "factor-None"])
def test_ntk_inv_freq_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.ntk_inv_freq, *args, exc=exc, names=names)


# -- Exercise 9.5: YaRN ----------------------------------------------------------------------
YARN_CASES = [
    # id, head_dim, base, factor, original_len, beta_fast, beta_slow
    ("smollm2-d64-base1e5-s2-L2048", 64, 100000.0, 2.0, 2048, 32.0, 1.0),
    ("smollm2-d64-base1e5-s4-L8192", 64, 100000.0, 4.0, 8192, 32.0, 1.0),
    ("qwen2.5-d128-base1e6-s4-L32768", 128, 1e6, 4.0, 32768, 32.0, 1.0),
    ("deepseek-v3-d64-base1e4-s40-L4096", 64, 10000.0, 40.0, 4096, 32.0, 1.0),
    ("llama2-d128-base1e4-s16-L4096", 128, 10000.0, 16.0, 4096, 32.0, 1.0),
    ("d96-base5e5-s8-L8192", 96, 500000.0, 8.0, 8192, 32.0, 1.0),
    ("d32-base1e4-s1.5-L1024", 32, 10000.0, 1.5, 1024, 32.0, 1.0),
    ("d256-base5e6-s32-L65536", 256, 5e6, 32.0, 65536, 32.0, 1.0),
    ("d64-base1e4-s1-L2048", 64, 10000.0, 1.0, 2048, 32.0, 1.0),
    ("d80-base1e6-s3-L4096-betas-16-2", 80, 1e6, 3.0, 4096, 16.0, 2.0),
    ("d128-base5e5-s8-L8192-betas-64-0.5", 128, 500000.0, 8.0, 8192, 64.0, 0.5),
    # The slow end of the ramp lies past the last pair (index 32.1 of 32 pairs): the ramp is
    # clamped at head_dim - 1, as transformers does, not at the last pair's index d/2 - 1.
    ("d64-base1e4-s4-L65536-slow-end-past-the-pairs", 64, 10000.0, 4.0, 65536, 32.0, 1.0),
    ("d16-base1e4-s4-L64-ramp-clamped-at-0", 16, 10000.0, 4.0, 64, 32.0, 1.0),
    ("d64-base1e4-s2-L16-both-ends-at-0", 64, 10000.0, 2.0, 16, 32.0, 1.0),
]
# Rounding the ramp's ends with floor and ceil is exact only away from integers; no
# case sits within 1e-6 of one, so float64 solutions written another way still agree.
for _case in YARN_CASES:
    for _end in ref.yarn_boundaries(*_case[1:3], *_case[4:]):
        assert abs(_end - round(_end)) > 1e-6, f"YaRN case {_case[0]} has a ramp end at an integer"


@pytest.mark.ex9_5
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,head_dim,base,factor,original_len,beta_fast,beta_slow", YARN_CASES,
                         ids=[c[0] for c in YARN_CASES])
def test_yarn_inv_freq(nb, name, head_dim, base, factor, original_len, beta_fast, beta_slow):
    call = call_text("yarn_inv_freq", head_dim, base, factor, original_len, beta_fast=beta_fast, beta_slow=beta_slow)
    got = nb.yarn_inv_freq(head_dim, base, factor, original_len, beta_fast=beta_fast, beta_slow=beta_slow)
    if not isinstance(got, tuple) or len(got) != 2:
        raise GradingFailure(f"{call} returned {type(got).__name__}; expected a tuple (inv_freq, attention_factor)")
    expected_freq, expected_factor = ref.yarn(head_dim, base, factor, original_len, beta_fast, beta_slow)
    _check_freqs(got[0], expected_freq, call)
    assert_close(torch.tensor(float(got[1])), torch.tensor(expected_factor), call, atol=FACTOR_ATOL,
                 what="the attention factor")


@pytest.mark.ex9_5
@pytest.mark.points(2)
@pytest.mark.parametrize("factor", [1.0, 1.25, 2.0, 4.0, 16.0, 40.0], ids=lambda s: f"s{s:g}")
def test_yarn_attention_factor(nb, factor):
    call = call_text("yarn_inv_freq", 64, 10000.0, factor, 4096)
    got = nb.yarn_inv_freq(64, 10000.0, factor, 4096)
    if not isinstance(got, tuple) or len(got) != 2:
        raise GradingFailure(f"{call} returned {type(got).__name__}; expected a tuple (inv_freq, attention_factor)")
    if isinstance(got[1], bool) or not isinstance(got[1], (int, float)):
        raise GradingFailure(f"{call}: the attention factor is a {type(got[1]).__name__}; expected a Python float")
    expected = ref.yarn(64, 10000.0, factor, 4096)[1]
    assert_close(torch.tensor(float(got[1])), torch.tensor(expected), call, atol=FACTOR_ATOL,
                 what="the attention factor (for q and k each, not its square)")


@pytest.mark.ex9_5
@pytest.mark.parametrize("args,kwargs,exc,names", [
    ((63, 10000.0, 2.0, 4096), {}, ValueError, "head_dim"),
    ((64, 1.0, 2.0, 4096), {}, ValueError, "base"),
    ((64, 10000.0, 0.9, 4096), {}, ValueError, "factor"),
    ((64, 10000.0, 2.0, 0), {}, ValueError, "original_len"),
    ((64, 10000.0, 2.0, 4096.0), {}, TypeError, "original_len"),
    ((64, 10000.0, 2.0, 4096), {"beta_slow": 0.0}, ValueError, "beta_slow"),
    ((64, 10000.0, 2.0, 4096), {"beta_fast": 1.0, "beta_slow": 1.0}, ValueError, "beta_fast"),
    ((64, 10000.0, 2.0, 4096), {"beta_fast": "32"}, TypeError, "beta_fast"),
], ids=["odd-d", "base-1", "factor-below-1", "L0", "float-L", "beta-slow-0", "betas-equal", "string-beta"])
def test_yarn_inv_freq_rejects_bad_input(nb, args, kwargs, exc, names):
    assert_raises(nb.yarn_inv_freq, *args, exc=exc, names=names, **kwargs)


# -- Exercise 9.6: Llama 3.1 -----------------------------------------------------------------
LLAMA3_CASES = [
    # id, head_dim, base, factor, original_len, low_freq_factor, high_freq_factor
    ("llama3.1-8B-d128-base5e5-s8-L8192", 128, 500000.0, 8.0, 8192, 1.0, 4.0),
    ("llama3.2-1B-d64-base5e5-s32-L8192", 64, 500000.0, 32.0, 8192, 1.0, 4.0),
    ("smollm2-d64-base1e5-s2-L2048", 64, 100000.0, 2.0, 2048, 1.0, 4.0),
    ("smollm2-d64-base1e5-s4-L8192", 64, 100000.0, 4.0, 8192, 1.0, 4.0),
    ("d128-base1e4-s4-L4096-factors-2-8", 128, 10000.0, 4.0, 4096, 2.0, 8.0),
    ("d96-base1e6-s16-L32768", 96, 1e6, 16.0, 32768, 1.0, 4.0),
    ("d32-base1e4-s2-L512-factors-0.5-3", 32, 10000.0, 2.0, 512, 0.5, 3.0),
    ("d256-base5e6-s1-L8192", 256, 5e6, 1.0, 8192, 1.0, 4.0),
    ("d16-base1e4-s8-L64", 16, 10000.0, 8.0, 64, 1.0, 4.0),
]


@pytest.mark.ex9_6
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,head_dim,base,factor,original_len,low,high", LLAMA3_CASES,
                         ids=[c[0] for c in LLAMA3_CASES])
def test_llama3_inv_freq(nb, name, head_dim, base, factor, original_len, low, high):
    call = call_text("llama3_inv_freq", head_dim, base, factor, original_len, low_freq_factor=low,
                     high_freq_factor=high)
    got = nb.llama3_inv_freq(head_dim, base, factor, original_len, low_freq_factor=low, high_freq_factor=high)
    _check_freqs(got, ref.llama3_inv_freq(head_dim, base, factor, original_len, low, high), call)


@pytest.mark.ex9_6
def test_llama3_inv_freq_defaults(nb):
    call = call_text("llama3_inv_freq", 128, 500000.0, 8.0, 8192)
    _check_freqs(nb.llama3_inv_freq(128, 500000.0, 8.0, 8192), ref.llama3_inv_freq(128, 500000.0, 8.0, 8192), call)


@pytest.mark.ex9_6
@pytest.mark.parametrize("args,kwargs,exc,names", [
    ((63, 500000.0, 8.0, 8192), {}, ValueError, "head_dim"),
    ((64, 1.0, 8.0, 8192), {}, ValueError, "base"),
    ((64, 500000.0, 0.5, 8192), {}, ValueError, "factor"),
    ((64, 500000.0, 8.0, -1), {}, ValueError, "original_len"),
    ((64, 500000.0, 8.0, "8192"), {}, TypeError, "original_len"),
    ((64, 500000.0, 8.0, 8192), {"low_freq_factor": 0.0}, ValueError, "low_freq_factor"),
    ((64, 500000.0, 8.0, 8192), {"high_freq_factor": 1.0}, ValueError, "high_freq_factor"),
    ((64, 500000.0, 8.0, 8192), {"high_freq_factor": None}, TypeError, "high_freq_factor"),
], ids=["odd-d", "base-1", "factor-below-1", "negative-L", "string-L", "low-0", "high-equals-low", "high-None"])
def test_llama3_inv_freq_rejects_bad_input(nb, args, kwargs, exc, names):
    assert_raises(nb.llama3_inv_freq, *args, exc=exc, names=names, **kwargs)
