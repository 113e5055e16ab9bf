"""Graders for Chapter 3 (exercises/03_quantized_kv_cache.ipynb) against tests/references.

Quantization is deterministic once the fp16 scale is fixed, so codes are checked
exactly against the reference; the only freedom left to a correct float32
implementation is a code one off where the exact ratio sits on a rounding boundary
(``ref.allowed_codes``), and an fp16 scale one ulp off from double rounding."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grading.compare import GradingFailure, assert_close, assert_equal, assert_raises, call_text, chunks_text
from grading.judge import watching
from tests.references import ref_03_quantized_kv_cache as ref

FP16_RTOL = 2.0**-10  # one fp16 ulp, relative
FP16_ATOL = 2.0**-24  # one fp16 subnormal step
DEQUANT_ATOL = 1e-6  # q * s + z in float32 vs fp64, for |x| up to ~50


def special_rows(d):
    """Rows that break naive code: all zero, tiny (the fp16 scale underflows or rounds
    down a lot), negative-dominated (max != absmax), constant, and a tie at .5."""
    zero = torch.zeros(d)
    tiny = torch.zeros(d)
    tiny[0], tiny[1], tiny[2] = 1.1e-5, -1e-6, 5e-6
    negative = torch.linspace(-5.0, 1.0, d)
    constant = torch.full((d,), 0.75)
    ties = torch.zeros(d)
    ties[0], ties[1], ties[2] = 127.0, 0.5, -1.5  # scale 1: 0.5 and -1.5 are exact ties
    return torch.stack([zero, tiny, negative, constant, ties])  # (5, d)


def allowed_text(allowed):
    return str(next(iter(allowed))) if len(allowed) == 1 else f"one of {sorted(allowed)}"


def check_codes(got, code_sets, call, what="the codes"):
    flat = got.reshape(-1, got.shape[-1]).tolist()
    for r, (got_row, allowed_row) in enumerate(zip(flat, code_sets)):
        for i, (c, allowed) in enumerate(zip(got_row, allowed_row)):
            if c not in allowed:
                index = tuple(int(j) for j in torch.unravel_index(torch.tensor(r * got.shape[-1] + i), got.shape))
                raise GradingFailure(f"{call}: {what} are wrong\n  first at index {index}: "
                                     f"expected {allowed_text(allowed)}, got {c}")


def check_within_step(got, expected, step, call, what):
    """|got - expected| <= step elementwise (step 0: exact up to float32 rounding)."""
    if tuple(got.shape) != tuple(expected.shape):
        raise GradingFailure(f"{call}: {what} has shape {tuple(got.shape)}; expected {tuple(expected.shape)}")
    err = (got.double() - expected).abs()
    bad = ~(err <= 1.05 * step + DEQUANT_ATOL)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise GradingFailure(f"{call}: {what} is wrong; {int(bad.sum())} of {bad.numel()} elements out of tolerance\n"
                             f"  first at index {idx}: expected {expected[idx].item():.6g} "
                             f"(+- {step[idx].item():.3g}), "
                             f"got {got[idx].item():.6g}")


# -- Exercise 3.1 ----------------------------------------------------------------------
INT8_CASES = [
    ("synthetic-B2-Hkv3-T5-D64-fp32", lambda: ref.synthetic_kv(2, 3, 5, 64)[0], torch.float32),
    ("synthetic-values-B1-Hkv2-T7-D128-fp32", lambda: ref.synthetic_kv(1, 2, 7, 128, seed=3)[1], torch.float32),
    ("synthetic-B1-Hkv2-T4-D32-fp16", lambda: ref.synthetic_kv(1, 2, 4, 32, seed=1)[0], torch.float16),
    ("synthetic-B1-Hkv1-T3-D16-bf16", lambda: ref.synthetic_kv(1, 1, 3, 16, seed=2)[0], torch.bfloat16),
    ("special-rows-D16", lambda: special_rows(16), torch.float32),
    ("one-element-rows", lambda: torch.tensor([[3.0], [-2.0], [0.0]]), torch.float32),
]


@pytest.mark.ex3_1
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,make,dtype", INT8_CASES, ids=[c[0] for c in INT8_CASES])
def test_quantize_int8(nb, name, make, dtype):
    x = make().to(dtype)
    call = call_text("quantize_int8", x)
    out = nb.quantize_int8(x)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise GradingFailure(f"{call} returned {type(out).__name__}; expected a tuple (q, scale)")
    q, scale = out
    assert_close(scale, ref.int8_scales(x), call, atol=FP16_ATOL, rtol=FP16_RTOL, dtype=torch.float16, what="scale")
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.shape != x.shape:
        raise GradingFailure(f"{call}: q must be an int8 tensor of shape {tuple(x.shape)}, got "
                             f"{getattr(q, 'dtype', type(q).__name__)} {tuple(getattr(q, 'shape', ()))}")
    check_codes(q, ref.int8_code_sets(x, scale), call)


@pytest.mark.ex3_1
@pytest.mark.points(2)
@pytest.mark.parametrize("name,make,dtype", INT8_CASES, ids=[c[0] for c in INT8_CASES])
def test_dequantize_int8_reconstruction(nb, name, make, dtype):
    """Exact q * s, and the round trip lands within half a step of the input."""
    x = make().to(dtype)
    q, scale = nb.quantize_int8(x)
    call = call_text("dequantize_int8", q, scale)
    x_hat = nb.dequantize_int8(q, scale)
    assert_close(x_hat, q.double() * scale.double(), call, atol=DEQUANT_ATOL, rtol=1e-6, dtype=torch.float32)
    s = scale.double().expand_as(x_hat)
    # Half a step, except where the fp16 scale rounded down so far that the code was
    # clamped at 127 (or underflowed to 0): there the error is what the clamp cut off.
    half_step = torch.maximum(0.5 * s * (1 + 1e-3), x.double().abs() - ref.INT8_QMAX * s)
    check_within_step(x_hat, x.double(), half_step, f"round trip of {call_text('quantize_int8', x)}",
                      "the reconstruction")


@pytest.mark.ex3_1
@pytest.mark.parametrize("d", [1, 16, 128])
def test_quantize_int8_zero_rows_make_no_nan(nb, d):
    """An all-zero row has scale 0: no NaN or inf may appear, not even in an intermediate
    (casting NaN to an integer is undefined behaviour; on CPU it happens to give 0)."""
    x = torch.zeros(3, d)
    x[1] = torch.linspace(-1.0, 2.0, d)
    with watching(nb, "non_finite") as watch:  # in the contestant, where the code runs (grading.contestant.watch)
        q, scale = nb.quantize_int8(x)
        x_hat = nb.dequantize_int8(q, scale)
    if watch.seen:
        raise GradingFailure("quantize_int8 on rows of zeros produced NaN or inf in: "
                             + ", ".join(dict.fromkeys(watch.seen)))
    assert_equal(q[0].tolist(), [0] * d, f"quantize_int8(zeros(3, {d}))[0][0]")
    assert_equal(x_hat[0].tolist(), [0.0] * d, "dequantize_int8 of a zero row")


@pytest.mark.ex3_1
def test_quantize_int8_is_odd(nb):
    """Symmetric range [-127, 127]: the code of -x is minus the code of x."""
    x = ref.synthetic_kv(1, 2, 6, 64, seed=5)[0]
    q_pos, _ = nb.quantize_int8(x)
    q_neg, _ = nb.quantize_int8(-x)
    assert_equal((q_neg.int() == -q_pos.int()).all().item(), True, "quantize_int8(-x)[0] == -quantize_int8(x)[0]")
    assert_equal(int(q_pos.int().abs().max()), 127, "max |code| of quantize_int8(x)")


@pytest.mark.ex3_1
@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.one_of(st.just(0.0), st.floats(-1e4, 1e4, allow_subnormal=False, width=32)),
                min_size=1, max_size=16))
def test_quantize_int8_property(nb, row):
    """Any finite row: codes exactly as the reference says for the stored scale."""
    x = torch.tensor([row], dtype=torch.float32)
    call = call_text("quantize_int8", x) + f" with x = {row}"
    q, scale = nb.quantize_int8(x)
    assert_close(scale, ref.int8_scales(x), call, atol=FP16_ATOL, rtol=FP16_RTOL, dtype=torch.float16, what="scale")
    check_codes(q, ref.int8_code_sets(x, scale), call)


@pytest.mark.ex3_1
@pytest.mark.parametrize(
    "fn,args,exc,names",
    [
        ("quantize_int8", (torch.arange(8),), TypeError, "x"),
        ("quantize_int8", ([1.0, 2.0],), TypeError, "x"),
        ("quantize_int8", (torch.tensor([1.0, float("nan")]),), ValueError, "x"),
        ("dequantize_int8", (torch.zeros(2, 4), torch.ones(2, 1)), TypeError, "q"),
        ("dequantize_int8", (torch.zeros(2, 4, dtype=torch.int8), torch.ones(3, 1)), ValueError, "scale"),
    ],
    ids=["int-x", "list-x", "nan-x", "float-q", "scale-wrong-shape"],
)
def test_int8_rejects_bad_input(nb, fn, args, exc, names):
    assert_raises(getattr(nb, fn), *args, exc=exc, names=names)


# -- Exercise 3.2 ----------------------------------------------------------------------
ASYM_CASES = [
    ("values-B2-Hkv2-T5-D64-int4-g32", lambda: ref.synthetic_kv(2, 2, 5, 64)[1], 4, 32),
    ("keys-B1-Hkv2-T6-D128-int4-g64", lambda: ref.synthetic_kv(1, 2, 6, 128, seed=1)[0], 4, 64),
    ("keys-B1-Hkv1-T4-D64-int2-g16", lambda: ref.synthetic_kv(1, 1, 4, 64, seed=2)[0], 2, 16),
    ("keys-B1-Hkv1-T3-D32-int8-g32", lambda: ref.synthetic_kv(1, 1, 3, 32, seed=3)[0], 8, 32),
    ("int3-g8-fp16-input", lambda: ref.synthetic_kv(1, 1, 4, 16, seed=4)[0].half(), 3, 8),
    ("special-rows-int4-g8", lambda: special_rows(16), 4, 8),
    ("all-positive-offset-int4-g4", lambda: torch.linspace(100.0, 101.0, 24).reshape(3, 8), 4, 4),
]


@pytest.mark.ex3_2
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,make,bits,g", ASYM_CASES, ids=[c[0] for c in ASYM_CASES])
def test_quantize_asym(nb, name, make, bits, g):
    x = make()
    call = call_text("quantize_asym", x, bits, g)
    out = nb.quantize_asym(x, bits, g)
    if not (isinstance(out, tuple) and len(out) == 3):
        raise GradingFailure(f"{call} returned {type(out).__name__}; expected a tuple (q, scale, zero)")
    q, scale, zero = out
    ref_scale, ref_zero = ref.asym_params(x, bits, g)
    assert_close(scale, ref_scale, call, atol=FP16_ATOL, rtol=FP16_RTOL, dtype=torch.float16, what="scale")
    assert_close(zero, ref_zero, call, atol=FP16_ATOL, rtol=FP16_RTOL, dtype=torch.float16, what="zero")
    if not isinstance(q, torch.Tensor) or q.dtype != torch.uint8 or q.shape != x.shape:
        raise GradingFailure(f"{call}: q must be a uint8 tensor of shape {tuple(x.shape)}, got "
                             f"{getattr(q, 'dtype', type(q).__name__)} {tuple(getattr(q, 'shape', ()))}")
    check_codes(q, ref.asym_code_sets(x, scale, zero, bits, g), call)


@pytest.mark.ex3_2
@pytest.mark.points(2)
@pytest.mark.parametrize("name,make,bits,g", ASYM_CASES, ids=[c[0] for c in ASYM_CASES])
def test_dequantize_asym(nb, name, make, bits, g):
    """Exact q * s + z on the reference's own codes, and a round trip within half a step."""
    x = make()
    ref_scale, ref_zero = ref.asym_params(x, bits, g)
    codes = torch.tensor([[min(s) for s in row] for row in ref.asym_code_sets(x, ref_scale, ref_zero, bits, g)],
                         dtype=torch.uint8).reshape(x.shape)
    scale16, zero16 = ref_scale.to(torch.float16), ref_zero.to(torch.float16)
    call = call_text("dequantize_asym", codes, scale16, zero16, g)
    got = nb.dequantize_asym(codes, scale16, zero16, g)
    assert_close(got, ref.asym_dequant(codes, ref_scale, ref_zero, g), call, atol=DEQUANT_ATOL, rtol=1e-6,
                 dtype=torch.float32)
    step = ref_scale.repeat_interleave(g, dim=-1)
    slack = torch.tensor([ref.fp16_ulp(z) for z in ref_zero.flatten().tolist()], dtype=torch.float64)
    slack = slack.reshape(ref_zero.shape).repeat_interleave(g, dim=-1)
    check_within_step(got, x.double(), 0.5 * step + slack, call, "the reconstruction of x")


@pytest.mark.ex3_2
def test_asym_constant_groups_make_no_nan(nb):
    x = torch.zeros(2, 16)
    x[1, :8] = 3.0
    with watching(nb, "non_finite") as watch:  # in the contestant, where the code runs (grading.contestant.watch)
        q, scale, zero = nb.quantize_asym(x, 4, 8)
        x_hat = nb.dequantize_asym(q, scale, zero, 8)
    if watch.seen:
        raise GradingFailure("quantize_asym on constant groups produced NaN or inf in: "
                             + ", ".join(dict.fromkeys(watch.seen)))
    assert_close(x_hat, x, "dequantize_asym(*quantize_asym(constant groups, 4, 8), 8)", atol=0.0)


@pytest.mark.ex3_2
@pytest.mark.parametrize(
    "fn,args,exc,names",
    [
        ("quantize_asym", (torch.zeros(2, 8), 4, 3), ValueError, "group_size"),
        ("quantize_asym", (torch.zeros(2, 8), 9, 4), ValueError, "bits"),
        ("quantize_asym", (torch.zeros(2, 8), 0, 4), ValueError, "bits"),
        ("quantize_asym", (torch.zeros(2, 8, dtype=torch.int32), 4, 4), TypeError, "x"),
        ("dequantize_asym", (torch.zeros(2, 8, dtype=torch.uint8), torch.ones(2, 2), torch.ones(2, 3), 4),
         ValueError, "zero"),
        ("dequantize_asym", (torch.zeros(2, 8, dtype=torch.int8), torch.ones(2, 2), torch.ones(2, 2), 4),
         TypeError, "q"),
    ],
    ids=["group-does-not-divide", "bits-9", "bits-0", "int-x", "zero-wrong-shape", "int8-codes"],
)
def test_asym_rejects_bad_input(nb, fn, args, exc, names):
    assert_raises(getattr(nb, fn), *args, exc=exc, names=names)


# -- Exercise 3.3 ----------------------------------------------------------------------
def transpose_last(t):
    return t.transpose(-1, -2).contiguous()


PER_CHANNEL_CASES = [
    ("B1-Hkv2-T64-D32-int4-g32", (1, 2, 64, 32), 4, 32, 0),
    ("B2-Hkv1-T48-D16-int2-g16", (2, 1, 48, 16), 2, 16, 1),
    ("B1-Hkv1-T8-D24-int8-g8", (1, 1, 8, 24), 8, 8, 2),
    ("B1-Hkv3-T12-D8-int4-g1", (1, 3, 12, 8), 4, 1, 3),
]


@pytest.mark.ex3_3
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,shape,bits,g,seed", PER_CHANNEL_CASES, ids=[c[0] for c in PER_CHANNEL_CASES])
def test_quantize_keys_per_channel(nb, name, shape, bits, g, seed):
    k = ref.synthetic_kv(*shape, num_outliers=2, seed=seed)[0]
    call = call_text("quantize_keys_per_channel", k, bits, g)
    q, scale, zero = nb.quantize_keys_per_channel(k, bits, g)
    # Per channel over tokens is the per-row math on the transposed keys.
    ref_scale, ref_zero = ref.asym_params(transpose_last(k), bits, g)
    assert_close(scale, transpose_last(ref_scale), call, atol=FP16_ATOL, rtol=FP16_RTOL, dtype=torch.float16,
                 what="scale")
    assert_close(zero, transpose_last(ref_zero), call, atol=FP16_ATOL, rtol=FP16_RTOL, dtype=torch.float16, what="zero")
    if not isinstance(q, torch.Tensor) or q.dtype != torch.uint8 or q.shape != k.shape:
        raise GradingFailure(f"{call}: q must be a uint8 tensor of shape {tuple(k.shape)}")
    check_codes(transpose_last(q), ref.asym_code_sets(transpose_last(k), transpose_last(scale), transpose_last(zero),
                                                      bits, g), call)
    got = nb.dequantize_keys_per_channel(q, scale, zero, g)
    expected = transpose_last(ref.asym_dequant(transpose_last(q), transpose_last(scale.double()),
                                               transpose_last(zero.double()), g))
    assert_close(got, expected, call_text("dequantize_keys_per_channel", q, scale, zero, g), atol=DEQUANT_ATOL,
                 rtol=1e-6, dtype=torch.float32)


@pytest.mark.ex3_3
def test_per_channel_beats_per_token_on_outliers(nb):
    """The reason for Exercise 3.3: on keys with outlier channels, per-channel INT4 has
    a much smaller reconstruction error than per-token INT4 at the same group size."""
    k, _, channels = ref.synthetic_kv(1, 2, 64, 64, seed=7)
    per_channel = nb.dequantize_keys_per_channel(*nb.quantize_keys_per_channel(k, 4, 32), 32)
    per_token = nb.dequantize_asym(*nb.quantize_asym(k, 4, 32), 32)
    normal = torch.ones(2, 64, dtype=torch.bool)  # the channels without outliers, where per-token loses
    for h, chans in enumerate(channels):
        normal[h, chans] = False
    normal = normal[None, :, None, :].expand_as(k)
    err_channel = ((per_channel.double() - k.double())[normal].norm() / k.double()[normal].norm()).item()
    err_token = ((per_token.double() - k.double())[normal].norm() / k.double()[normal].norm()).item()
    if not err_channel * 2 < err_token:
        raise GradingFailure(f"on the ordinary channels, per-channel INT4 keys have relative error {err_channel:.4f} "
                             f"and per-token {err_token:.4f}; per channel should be at least 2x smaller")


@pytest.mark.ex3_3
@pytest.mark.parametrize(
    "args,exc,names",
    [((torch.zeros(2, 10, 4), 4, 4), ValueError, "group_size"), ((torch.zeros(8), 4, 4), ValueError, "k")],
    ids=["tokens-not-multiple-of-group", "one-dim-keys"],
)
def test_keys_per_channel_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.quantize_keys_per_channel, *args, exc=exc, names=names)


# -- Exercise 3.4 ----------------------------------------------------------------------
PACK_SHAPES = [("D2", (2,)), ("H3-D8", (3, 8)), ("B2-Hkv2-T5-D64", (2, 2, 5, 64))]


@pytest.mark.ex3_4
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("name,shape", PACK_SHAPES, ids=[s[0] for s in PACK_SHAPES])
def test_pack_int4(nb, name, shape):
    q = torch.randint(0, 16, shape, generator=torch.Generator().manual_seed(len(shape)), dtype=torch.uint8)
    call = call_text("pack_int4", q)
    packed = nb.pack_int4(q)
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        raise GradingFailure(f"{call} must return a uint8 tensor, got "
                             f"{getattr(packed, 'dtype', type(packed).__name__)}")
    assert_close(packed, ref.pack_int4(q), call, atol=0)


@pytest.mark.ex3_4
def test_pack_int4_nibble_order(nb):
    """Element 2i in the low nibble: codes [1, 2] pack to 1 + 16 * 2 = 33."""
    assert_equal(nb.pack_int4(torch.tensor([1, 2, 15, 0], dtype=torch.uint8)).tolist(), [33, 15],
                 "pack_int4(tensor([1, 2, 15, 0]))")


@pytest.mark.ex3_4
@pytest.mark.points(2)
@pytest.mark.parametrize("name,shape", PACK_SHAPES, ids=[s[0] for s in PACK_SHAPES])
def test_unpack_int4(nb, name, shape):
    shape = (*shape[:-1], max(1, shape[-1] // 2))
    packed = torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(7), dtype=torch.uint8)
    call = call_text("unpack_int4", packed)
    got = nb.unpack_int4(packed)
    if not isinstance(got, torch.Tensor) or got.dtype != torch.uint8:
        raise GradingFailure(f"{call} must return a uint8 tensor, got {getattr(got, 'dtype', type(got).__name__)}")
    assert_close(got, ref.unpack_int4(packed), call, atol=0)
    assert_close(nb.pack_int4(got), packed, f"pack_int4({call_text('unpack_int4', packed)})", atol=0)


@pytest.mark.ex3_4
@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.integers(0, 15), min_size=1, max_size=24).map(lambda xs: xs + xs[:1] if len(xs) % 2 else xs))
def test_pack_int4_round_trip_property(nb, codes):
    """Any even-length list of 4-bit codes packs to the reference bytes and back."""
    q = torch.tensor(codes, dtype=torch.uint8)
    packed = nb.pack_int4(q)
    assert_close(packed, ref.pack_int4(q), call_text("pack_int4", q) + f" with codes {codes}", atol=0)
    assert_close(nb.unpack_int4(packed), q, f"unpack_int4(pack_int4(tensor({codes})))", atol=0)


@pytest.mark.ex3_4
@pytest.mark.parametrize(
    "fn,args,exc,names",
    [
        ("pack_int4", (torch.tensor([1, 16], dtype=torch.uint8),), ValueError, "q"),
        ("pack_int4", (torch.tensor([1, 2, 3], dtype=torch.uint8),), ValueError, "q"),
        ("pack_int4", (torch.tensor([1, 2], dtype=torch.int8),), TypeError, "q"),
        ("unpack_int4", (torch.tensor([1, 2], dtype=torch.int32),), TypeError, "packed"),
    ],
    ids=["code-16", "odd-length", "int8-codes", "int32-bytes"],
)
def test_int4_packing_rejects_bad_input(nb, fn, args, exc, names):
    assert_raises(getattr(nb, fn), *args, exc=exc, names=names)


# -- Exercise 3.5 ----------------------------------------------------------------------
BYTES_CASES = [
    ("int8-per-token-L1-Hkv1-D128", (1, 1, 128, 8, 128, False)),
    ("int4-g64-L1-Hkv1-D128", (1, 1, 128, 4, 64, True)),
    ("int4-g32-llama3-8b", (32, 8, 128, 4, 32, True)),
    ("int2-g32-L64-Hkv8-D128", (64, 8, 128, 2, 32, True)),
    ("int3-g8-odd-L7-Hkv5-D96", (7, 5, 96, 3, 8, True)),
    ("int8-g1-worst-case", (2, 2, 4, 8, 1, True)),
    ("fp16-no-groups-matches-ch1", (64, 8, 128, 16, 128, False)),
]


@pytest.mark.ex3_5
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("name,args", BYTES_CASES, ids=[c[0] for c in BYTES_CASES])
def test_quantized_bytes_per_token(nb, name, args):
    got = nb.quantized_bytes_per_token(*args[:5], zero_point=args[5])
    call = call_text("quantized_bytes_per_token", *args[:5], zero_point=args[5])
    assert_equal(got, ref.quantized_bytes_per_token(*args), call)
    if not isinstance(got, int):
        raise GradingFailure(f"{call} returned {type(got).__name__}; a byte count is an int")


@pytest.mark.ex3_5
@pytest.mark.parametrize(
    "args,exc,names",
    [((1, 1, 128, 4, 48), ValueError, "group_size"), ((1, 1, 3, 4, 1), ValueError, "head_dim"),
     ((0, 1, 128, 4, 32), ValueError, "num_layers"), ((1, 1, 128, 4.0, 32), TypeError, "bits")],
    ids=["group-does-not-divide", "half-a-byte", "zero-layers", "float-bits"],
)
def test_quantized_bytes_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.quantized_bytes_per_token, *args, exc=exc, names=names)


# -- Exercise 3.6 ----------------------------------------------------------------------
CACHE_CASES = [
    # id, (B, H_kv, T, d), bits, group_size, append sizes, dtype
    ("B1-Hkv2-T70-D64-int4-g32-chunks7", (1, 2, 70, 64), 4, 32, [7] * 10, torch.float32),
    ("B2-Hkv1-T48-D32-int8-g16-one-by-one", (2, 1, 48, 32), 8, 16, [1] * 48, torch.float32),
    ("B1-Hkv1-T40-D16-int4-g8-prefill-then-decode", (1, 1, 40, 16), 4, 8, [37, 1, 1, 1], torch.float32),
    ("B1-Hkv2-T5-D16-int4-g8-residual-only", (1, 2, 5, 16), 4, 8, [2, 3], torch.float32),
    ("B1-Hkv1-T33-D32-int4-g32-fp16-residual", (1, 1, 33, 32), 4, 32, [20, 13], torch.float16),
]


_KIVI_EXPECTED = {}


def filled_cache(nb, shape, bits, g, sizes, dtype, seed=0):
    B, H, T, d = shape
    k, v, _ = ref.synthetic_kv(B, H, T, d, num_outliers=2, seed=seed)
    k, v = k.to(dtype), v.to(dtype)
    cache = nb.QuantizedKVCache(B, H, d, bits=bits, group_size=g)
    start = 0
    for n in sizes:
        cache.append(k[:, :, start:start + n], v[:, :, start:start + n])
        start += n
    return cache, k, v


@pytest.mark.ex3_6
@pytest.mark.core
@pytest.mark.points(4)
@pytest.mark.parametrize("name,shape,bits,g,sizes,dtype", CACHE_CASES, ids=[c[0] for c in CACHE_CASES])
def test_cache_keys_values(nb, name, shape, bits, g, sizes, dtype):
    cache, k, v = filled_cache(nb, shape, bits, g, sizes, dtype)
    B, H, _, d = shape
    call = f"QuantizedKVCache({B}, {H}, {d}, bits={bits}, group_size={g}) after appending chunks {chunks_text(sizes)}"
    assert_equal(len(cache), shape[2], f"len({call})")
    out = cache.keys_values()
    if not (isinstance(out, tuple) and len(out) == 2):
        raise GradingFailure(f"{call}.keys_values() returned {type(out).__name__}; expected (k, v)")
    got_k, got_v = out
    for what, got in (("keys", got_k), ("values", got_v)):
        if not isinstance(got, torch.Tensor) or got.dtype != torch.float32:
            raise GradingFailure(f"{call}.keys_values(): {what} must be a float32 tensor, got "
                                 f"{getattr(got, 'dtype', type(got).__name__)}")
    if name not in _KIVI_EXPECTED:  # the fp64 loops are slow; every bug reuses them
        _KIVI_EXPECTED[name] = ref.kivi_expected(k, v, bits, g)
    k_hat, v_hat, k_step, v_step = _KIVI_EXPECTED[name]
    check_within_step(got_k, k_hat, k_step, f"{call}.keys_values()", "keys")
    check_within_step(got_v, v_hat, v_step, f"{call}.keys_values()", "values")
    # Within one step of the reference still admits a cache that rounds every code down;
    # rounding to nearest keeps each element within half a step of what was appended.
    check_within_step(got_k, k.double(), 0.5 * k_step, f"{call}.keys_values() against the keys appended", "keys")
    check_within_step(got_v, v.double(), 0.5 * v_step, f"{call}.keys_values() against the values appended", "values")


@pytest.mark.ex3_6
@pytest.mark.points(2)
@pytest.mark.parametrize("name,shape,bits,g,sizes,dtype", CACHE_CASES, ids=[c[0] for c in CACHE_CASES])
def test_cache_nbytes(nb, name, shape, bits, g, sizes, dtype):
    """Honest accounting: packed codes, fp16 scales and zero-points, and the residual
    held at its own dtype, nothing else (no unpacked copies, no full-precision shadow)."""
    cache, k, _ = filled_cache(nb, shape, bits, g, sizes, dtype)
    B, H, T, d = shape
    assert_equal(cache.nbytes(), ref.kivi_nbytes(B, H, d, T, bits, g, k.element_size()),
                 f"QuantizedKVCache({B}, {H}, {d}, bits={bits}, group_size={g}).nbytes() after {T} tokens")


@pytest.mark.ex3_6
@pytest.mark.points(2)
def test_cache_attention_output(nb):
    """What the cache is for: attention over its keys and values stays close to exact
    attention (and exact on the residual-only prefix)."""
    B, H, Hkv, T, d = 1, 4, 2, 64, 64
    k, v, _ = ref.synthetic_kv(B, Hkv, T, d, seed=11)
    q = torch.randn(B, H, 3, d, generator=torch.Generator().manual_seed(12))
    cache = nb.QuantizedKVCache(B, Hkv, d, bits=8, group_size=32)
    cache.append(k[:, :, :20], v[:, :, :20])
    k_hat, v_hat = cache.keys_values()
    assert_close(ref.attention(q, k_hat, v_hat), ref.attention(q, k[:, :, :20], v[:, :, :20]),
                 "attention over QuantizedKVCache after 20 tokens (all in the residual)", atol=1e-6)
    cache.append(k[:, :, 20:], v[:, :, 20:])
    k_hat, v_hat = cache.keys_values()
    exact = ref.attention(q, k, v)
    err = ((ref.attention(q, k_hat, v_hat) - exact).norm() / exact.norm()).item()
    if not err < 0.02:
        raise GradingFailure(f"attention over an 8-bit QuantizedKVCache has relative error {err:.4f}; expected < 0.02")


@pytest.mark.ex3_6
def test_empty_cache(nb):
    cache = nb.QuantizedKVCache(1, 2, 16, bits=4, group_size=8)
    assert_equal(len(cache), 0, "len(QuantizedKVCache(1, 2, 16)) before any append")
    assert_equal(cache.nbytes(), 0, "QuantizedKVCache(1, 2, 16).nbytes() before any append")
    k, v = cache.keys_values()
    assert_equal((tuple(k.shape), tuple(v.shape)), ((1, 2, 0, 16), (1, 2, 0, 16)), "keys_values() of an empty cache")


@pytest.mark.ex3_6
@pytest.mark.parametrize(
    "kwargs,exc,names",
    [(dict(bits=3), ValueError, "bits"), (dict(group_size=24), ValueError, "group_size"),
     (dict(group_size=0), ValueError, "group_size")],
    ids=["bits-3", "group-does-not-divide-head-dim", "group-0"],
)
def test_cache_rejects_bad_config(nb, kwargs, exc, names):
    assert_raises(nb.QuantizedKVCache, 1, 2, 64, exc=exc, names=names, **kwargs)


@pytest.mark.ex3_6
@pytest.mark.parametrize(
    "k_shape,v_shape,names",
    [((1, 2, 3, 32), (1, 2, 3, 16), "v"), ((1, 3, 3, 16), (1, 3, 3, 16), "k"), ((1, 2, 0, 16), (1, 2, 0, 16), "k")],
    ids=["v-wrong-head-dim", "k-wrong-heads", "zero-new-tokens"],
)
def test_cache_append_rejects_bad_shapes(nb, k_shape, v_shape, names):
    cache = nb.QuantizedKVCache(1, 2, 16, bits=4, group_size=8)
    assert_raises(cache.append, torch.zeros(k_shape), torch.zeros(v_shape), exc=ValueError, names=names,
                  call=f"QuantizedKVCache(1, 2, 16).append(zeros{k_shape}, zeros{v_shape})")


# -- Exercise 3.7 ----------------------------------------------------------------------
FP8_DEQUANT_RTOL = 2.0**-23  # a 4-bit FP8 value times a float32 scale, rounded once to float32


def zero_head(shape, seed):
    """Synthetic keys whose KV head 1 is all zeros (a freshly zeroed page)."""
    k = ref.synthetic_kv(*shape, seed=seed)[0]
    k[:, 1] = 0.0
    return k


FP8_CASES = [
    # id, make x, per_head, dtype
    ("keys-B1-Hkv2-T16-D64-per-tensor-e4m3fn", lambda: ref.synthetic_kv(1, 2, 16, 64)[0], False, "float8_e4m3fn"),
    ("keys-B2-Hkv2-T8-D32-per-head-e4m3fn", lambda: ref.synthetic_kv(2, 2, 8, 32, seed=1)[0], True, "float8_e4m3fn"),
    ("keys-B1-Hkv3-T9-D16-per-head-e4m3fnuz", lambda: ref.synthetic_kv(1, 3, 9, 16, seed=2)[0], True,
     "float8_e4m3fnuz"),
    ("values-B1-Hkv2-T8-D32-per-tensor-e4m3fnuz", lambda: ref.synthetic_kv(1, 2, 8, 32, seed=3)[1], False,
     "float8_e4m3fnuz"),
    ("keys-fp16-B1-Hkv2-T4-D16-per-head-e4m3fn", lambda: ref.synthetic_kv(1, 2, 4, 16, seed=4)[0].half(), True,
     "float8_e4m3fn"),
    ("keys-bf16-B1-Hkv1-T4-D16-per-tensor-e4m3fn", lambda: ref.synthetic_kv(1, 1, 4, 16, seed=5)[0].bfloat16(),
     False, "float8_e4m3fn"),
    ("zero-head-B1-Hkv3-T4-D16-per-head-e4m3fn", lambda: zero_head((1, 3, 4, 16), 6), True, "float8_e4m3fn"),
    ("tiny-B1-Hkv1-T2-D8-per-tensor-subnormal-codes", lambda: torch.tensor(
        [[[[3e-3, -1e-5, 2e-6, 0.0, 1.0, -0.5, 7e-4, 2.5e-3], [1e-4] * 8]]]), False, "float8_e4m3fn"),
]


def check_fp8_pair(out, x, per_head, dtype, call):
    """The (codes, scale) returned: types, shapes and dtypes; returns them."""
    if not (isinstance(out, tuple) and len(out) == 2):
        raise GradingFailure(f"{call} returned {type(out).__name__}; expected a tuple (codes, scale)")
    codes, scale = out
    if not isinstance(codes, torch.Tensor) or codes.dtype != dtype or tuple(codes.shape) != tuple(x.shape):
        raise GradingFailure(f"{call}: codes must be a {dtype} tensor of shape {tuple(x.shape)}, got "
                             f"{getattr(codes, 'dtype', type(codes).__name__)} {tuple(getattr(codes, 'shape', ()))}")
    scale_shape = (*x.shape[:2], 1, 1) if per_head else ()
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32 or tuple(scale.shape) != scale_shape:
        raise GradingFailure(f"{call}: scale must be a float32 tensor of shape {scale_shape} (one per "
                             f"{'KV head' if per_head else 'tensor'}), got "
                             f"{getattr(scale, 'dtype', type(scale).__name__)}"
                             f" {tuple(getattr(scale, 'shape', ()))}")
    return codes, scale


@pytest.mark.ex3_7
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,make,per_head,dtype_name", FP8_CASES, ids=[c[0] for c in FP8_CASES])
def test_quantize_fp8(nb, name, make, per_head, dtype_name):
    x, dtype = make(), getattr(torch, dtype_name)
    call = call_text("quantize_fp8", x, per_head=per_head, dtype=dtype)
    codes, scale = check_fp8_pair(nb.quantize_fp8(x, per_head=per_head, dtype=dtype), x, per_head, dtype, call)
    assert_close(scale, ref.fp8_scales(x, per_head, dtype_name), call, atol=0.0, rtol=ref.FP8_SCALE_RTOL,
                 what="scale")
    check_codes(codes.float(), ref.fp8_code_sets(x, scale, dtype_name), call)


@pytest.mark.ex3_7
@pytest.mark.points(2)
@pytest.mark.parametrize("name,make,per_head,dtype_name", FP8_CASES, ids=[c[0] for c in FP8_CASES])
def test_dequantize_fp8(nb, name, make, per_head, dtype_name):
    """codes * scale on the reference's own codes and scale."""
    x = make()
    codes, scale = ref.quantize_fp8(x, per_head=per_head, dtype=getattr(torch, dtype_name))
    call = call_text("dequantize_fp8", codes, scale)
    assert_close(nb.dequantize_fp8(codes, scale), codes.double() * scale.double(), call, atol=0.0,
                 rtol=FP8_DEQUANT_RTOL, dtype=torch.float32)


SATURATION_CASES = [
    # id, the elements, the given scale, dtype: past M * scale the codes saturate at +-M
    ("scale-1-e4m3fnuz-past-240", [300.0, -241.0, 239.0, 1e4], 1.0, "float8_e4m3fnuz"),
    ("scale-1-e4m3fn-past-448", [500.0, -449.0, 447.0, -1e6], 1.0, "float8_e4m3fn"),
    ("scale-0.25-e4m3fnuz", [100.0, -60.0, 59.0, 0.01], 0.25, "float8_e4m3fnuz"),
]


@pytest.mark.ex3_7
@pytest.mark.points(2)
@pytest.mark.parametrize("name,values,given,dtype_name", SATURATION_CASES, ids=[c[0] for c in SATURATION_CASES])
def test_quantize_fp8_given_scale_saturates(nb, name, values, given, dtype_name):
    """A given (calibrated) scale is used as is, and what lies past M * scale becomes +-M,
    not NaN: a cast out of range gives NaN in E4M3FNUZ (and in E4M3FN on some versions)."""
    x, dtype = torch.tensor(values).reshape(1, 1, 1, -1), getattr(torch, dtype_name)
    call = call_text("quantize_fp8", x, scale=given, dtype=dtype)
    codes, scale = check_fp8_pair(nb.quantize_fp8(x, scale=given, dtype=dtype), x, False, dtype, call)
    assert_close(scale, torch.tensor(given, dtype=torch.float64), call, atol=0.0, what="scale")
    check_codes(codes.float(), ref.fp8_code_sets(x, scale, dtype_name), call)


@pytest.mark.ex3_7
@pytest.mark.parametrize("per_head", [False, True], ids=["per-tensor", "per-head"])
def test_fp8_zeros_make_no_nan(nb, per_head):
    """A tensor (or head) of zeros: scale 1, codes 0, and no 0 / 0 on the way."""
    x = torch.zeros(1, 2, 3, 8)
    if per_head:
        x[:, 1] = torch.linspace(-2.0, 3.0, 24).reshape(3, 8)
    with watching(nb, "non_finite") as watch:  # in the contestant, where the code runs (grading.contestant.watch)
        codes, scale = nb.quantize_fp8(x, per_head=per_head)
        x_hat = nb.dequantize_fp8(codes, scale)
    if watch.seen:
        raise GradingFailure(f"quantize_fp8 on zeros (per_head={per_head}) produced NaN or inf in: "
                             + ", ".join(dict.fromkeys(watch.seen)))
    call = call_text("quantize_fp8", x, per_head=per_head)
    assert_equal(scale.flatten()[0].item(), 1.0, f"{call}: the scale of the zero {'head' if per_head else 'tensor'}")
    assert_equal(x_hat[:, 0].abs().max().item(), 0.0, f"max |dequantize_fp8(*{call})| over the zeros")


@pytest.mark.ex3_7
@pytest.mark.parametrize(
    "fn,args,kwargs,exc,names",
    [
        ("quantize_fp8", (torch.zeros(1, 2, 3, 4, dtype=torch.int32),), {}, TypeError, "x"),
        ("quantize_fp8", (torch.zeros(2, 3, 4),), {}, ValueError, "x"),
        ("quantize_fp8", (torch.tensor([[[[1.0, float("inf")]]]]),), {}, ValueError, "x"),
        ("quantize_fp8", (torch.zeros(1, 1, 2, 4),), {"dtype": torch.float16}, TypeError, "dtype"),
        ("quantize_fp8", (torch.zeros(1, 1, 2, 4),), {"scale": 0.0}, ValueError, "scale"),
        ("quantize_fp8", (torch.zeros(1, 1, 2, 4),), {"scale": "1"}, TypeError, "scale"),
        ("quantize_fp8", (torch.zeros(1, 1, 2, 4),), {"scale": 1.0, "per_head": True}, ValueError, "scale"),
        ("dequantize_fp8", (torch.zeros(1, 1, 2, 4), torch.tensor(1.0)), {}, TypeError, "codes"),
        ("dequantize_fp8", (torch.zeros(1, 2, 2, 4, dtype=torch.float8_e4m3fn), torch.ones(1, 2, 2, 1)), {},
         ValueError, "scale"),
    ],
    ids=["int-x", "three-dim-x", "inf-x", "fp16-dtype", "zero-scale", "string-scale", "scale-with-per-head",
         "float32-codes", "scale-per-token"],
)
def test_fp8_rejects_bad_input(nb, fn, args, kwargs, exc, names):
    assert_raises(getattr(nb, fn), *args, exc=exc, names=names, **kwargs)


# -- Exercise 3.8 ----------------------------------------------------------------------
HADAMARD_ATOL = 2.0**-22  # +-1/sqrt(n) in float32, built by any order of fp32 scalings (a few ulps)
# fp32 x @ H, and x_hat @ H.T, against fp64, in units of the quantized ratio (x H) / s, whose
# largest magnitude is M: measured at most 7e-4 (1.6e-6 M) on these cases; a code one off
# is allowed only where the exact ratio lies within this of a rounding boundary.
ROTATED_NOISE = 2e-5  # times M


@pytest.mark.ex3_8
@pytest.mark.parametrize("n", [1, 2, 8, 64, 128])
def test_rotation_hadamard_matrix(nb, n):
    got = nb.hadamard(n)
    assert_close(got, ref.hadamard(n), call_text("hadamard", n), atol=HADAMARD_ATOL, dtype=torch.float32)


ROTATED_CASES = [
    # id, (B, H_kv, T, d), seed, per_head, dtype
    ("keys-B1-Hkv2-T16-D64-per-tensor-e4m3fn", (1, 2, 16, 64), 0, False, "float8_e4m3fn"),
    ("keys-B2-Hkv2-T8-D128-per-head-e4m3fn", (2, 2, 8, 128), 1, True, "float8_e4m3fn"),
    ("keys-B1-Hkv3-T11-D32-per-head-e4m3fnuz", (1, 3, 11, 32), 2, True, "float8_e4m3fnuz"),
    ("keys-B1-Hkv1-T8-D16-per-tensor-e4m3fnuz", (1, 1, 8, 16), 3, False, "float8_e4m3fnuz"),
]


@pytest.mark.ex3_8
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,shape,seed,per_head,dtype_name", ROTATED_CASES, ids=[c[0] for c in ROTATED_CASES])
def test_rotation_roundtrip(nb, name, shape, seed, per_head, dtype_name):
    """Rotated back by H^T, the result is the reference's FP8 codes of x H, times the
    scale, times H^T: checked code by code, in the rotated basis."""
    k = ref.synthetic_kv(*shape, seed=seed)[0]
    dtype = getattr(torch, dtype_name)
    call = call_text("fp8_roundtrip_rotated", k, per_head=per_head, dtype=dtype)
    got = nb.fp8_roundtrip_rotated(k, per_head=per_head, dtype=dtype)
    if not isinstance(got, torch.Tensor) or got.dtype != torch.float32 or tuple(got.shape) != tuple(k.shape):
        raise GradingFailure(f"{call} must return a float32 tensor of shape {tuple(k.shape)}, got "
                             f"{getattr(got, 'dtype', type(got).__name__)} {tuple(getattr(got, 'shape', ()))}")
    rot = ref.hadamard(shape[-1])
    k_rot = k.double() @ rot  # (B, H_kv, T, d)
    scale = ref.fp8_scales(k_rot, per_head, dtype_name)
    noise = ROTATED_NOISE * ref.FP8_FORMATS[dtype_name][1]
    ratio_got = (got.double() @ rot) / scale  # the codes the result holds, in the rotated basis
    ratio = (k_rot / scale).reshape(-1, shape[-1]).tolist()
    allowed_rows = ref.fp8_noisy_code_sets(k_rot / scale, noise, dtype_name)
    for r, (got_row, row, allowed_row) in enumerate(zip(ratio_got.reshape(-1, shape[-1]).tolist(), ratio,
                                                        allowed_rows)):
        for i, (c, exact, allowed) in enumerate(zip(got_row, row, allowed_row)):
            if min(abs(c - a) for a in allowed) > noise:
                index = tuple(int(j) for j in torch.unravel_index(torch.tensor(r * shape[-1] + i), k.shape))
                raise GradingFailure(
                    f"{call} is wrong: rotated by hadamard({shape[-1]}), its element {index} should be the FP8 code "
                    f"{allowed_text(allowed)} of (x H) / s = {exact:.6g} (s = max |x H| / M), times s; "
                    f"it is {c:.6g} times s")


@pytest.mark.ex3_8
def test_rotation_keeps_scores(nb):
    """What the rotation is for: rotated queries meet the rotated, quantized keys in the
    same scores as the queries meet fp8_roundtrip_rotated's keys, and both stay close to
    the exact scores."""
    k = ref.synthetic_kv(1, 2, 32, 64, seed=9)[0]
    q = torch.randn(1, 2, 4, 64, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    k_hat = nb.fp8_roundtrip_rotated(k, per_head=True).double()
    exact = q @ k.double().transpose(-1, -2)  # (1, 2, 4, 32)
    err = ((q @ k_hat.transpose(-1, -2) - exact).norm() / exact.norm()).item()
    if not err < 0.05:
        raise GradingFailure(f"scores q . k over fp8_roundtrip_rotated(k, per_head=True) have relative error "
                             f"{err:.4f} against the exact scores; FP8 keeps them within 0.05")


@pytest.mark.ex3_8
@pytest.mark.parametrize(
    "fn,args,exc,names",
    [("hadamard", (6,), ValueError, "n"), ("hadamard", (4.0,), TypeError, "n"), ("hadamard", (0,), ValueError, "n"),
     ("fp8_roundtrip_rotated", (torch.zeros(1, 1, 2, 48),), ValueError, "x")],
    ids=["n-6", "float-n", "n-0", "head-dim-48"],
)
def test_rotation_rejects_bad_input(nb, fn, args, exc, names):
    assert_raises(getattr(nb, fn), *args, exc=exc, names=names)
