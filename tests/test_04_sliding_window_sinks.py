"""Graders for Chapter 4 (exercises/04_sliding_window_sinks.ipynb) against tests/references."""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grading.compare import GradingFailure, assert_close, assert_equal, assert_raises, call_text, chunks_text
from grading.judge import data_ptr
from tests.references import ref_04_sliding_window_sinks as ref

# RoPE tolerances per dtype (the reference is complex128); cache copies are exact. The
# solution's largest RoPE error over every case is 2.7e-7 in fp32 (2.7% of 1e-5) and 0 in
# fp64 (1e-12 admits a rotation computed in another order; 1e-9 at positions up to 3e6,
# where an angle of that size carries up to 3e6 * 2**-53 = 3e-10 of rounding).
ROPE_ATOL = {torch.float64: 1e-12, torch.float32: 1e-5}
# fp16 from the error of a correct implementation that rotates in fp16, as the chapter and
# transformers do: y = fl(fl(x1 fl(cos)) - fl(x2 fl(sin))) rounds five times, and to first
# order |y - exact| <= 3 u (|x1| + |x2|) with u = 2**-11, fp16's unit roundoff. The bound is
# taken at the case's largest pair. It was 1e-2 before: measured, the correct fp16 rotation
# errs by at most 1.8e-3 on these cases, and the bound is 0.9e-3 to 7.7e-3 (RoPE sums two
# products, so it has no long accumulation to keep in a wider type).
FP16_UNIT_ROUNDOFF = 2.0**-11
ROPE_FP16_ROUNDINGS = 3


def rope_atol(x: torch.Tensor) -> float:
    if x.dtype != torch.float16:
        return ROPE_ATOL[x.dtype]
    half = x.shape[-1] // 2
    pairs = x[..., :half].double().abs() + x[..., half:].double().abs()  # (..., T, d/2)
    return ROPE_FP16_ROUNDINGS * FP16_UNIT_ROUNDOFF * float(pairs.max())
# A decode step is attention over at most a few dozen cached keys after RoPE: the
# solution's error is 3.5e-7 in fp32 (1.7% of 2e-5) and 8.9e-16 in fp64.
DECODE_ATOL = {torch.float64: 1e-10, torch.float32: 2e-5}


def stream(batch_size, num_kv_heads, n, head_dim, dtype=torch.float32, seed=0):
    """n tokens of keys and values, (B, H_kv, n, d) each, all entries distinct."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(batch_size, num_kv_heads, n, head_dim, generator=g, dtype=torch.float64)
    v = torch.randn(batch_size, num_kv_heads, n, head_dim, generator=g, dtype=torch.float64)
    return k.to(dtype), v.to(dtype)


# -- Exercise 4.1: the sliding-window mask ---------------------------------------------
MASK_CASES = [
    # q_len, kv_len, window, num_sink
    (1, 1, 1, 0),
    (5, 5, 1, 0),
    (7, 7, 3, 0),
    (7, 7, 10, 0),
    (3, 10, 4, 0),
    (1, 17, 4, 0),
    (9, 9, 3, 2),
    (4, 12, 5, 4),
    (6, 6, 2, 8),
    (13, 29, 6, 1),
]


@pytest.mark.ex4_1
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("q_len,kv_len,window,num_sink", MASK_CASES,
                         ids=[f"Tq{c[0]}-Tk{c[1]}-W{c[2]}-S{c[3]}" for c in MASK_CASES])
def test_sliding_window_mask(nb, q_len, kv_len, window, num_sink):
    call = call_text("sliding_window_mask", q_len, kv_len, window, num_sink=num_sink)
    got = nb.sliding_window_mask(q_len, kv_len, window, num_sink=num_sink)
    if not isinstance(got, torch.Tensor) or got.dtype != torch.bool:
        raise GradingFailure(f"{call} returned {getattr(got, 'dtype', type(got).__name__)}; expected a bool tensor")
    assert_equal(tuple(got.shape), (q_len, kv_len), f"{call}.shape")
    assert_equal(got.int().tolist(), ref.window_mask(q_len, kv_len, window, num_sink).int().tolist(), call)


@pytest.mark.ex4_1
def test_sliding_window_mask_default_has_no_sinks(nb):
    assert_equal(nb.sliding_window_mask(8, 8, 2).int().tolist(), ref.window_mask(8, 8, 2).int().tolist(),
                 "sliding_window_mask(8, 8, 2)")


@pytest.mark.ex4_1
@pytest.mark.parametrize(
    "args,exc,names",
    [
        ((4, 4, 0), ValueError, "window"),
        ((5, 4, 2), ValueError, "kv_len"),
        ((0, 4, 2), ValueError, "q_len"),
        ((4, 4, 2, -1), ValueError, "num_sink"),
        ((4, 4, 2.0), TypeError, "window"),
    ],
    ids=["zero-window", "more-queries-than-keys", "zero-queries", "negative-sinks", "float-window"],
)
def test_sliding_window_mask_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.sliding_window_mask, *args, exc=exc, names=names)


# -- Exercises 4.2 and 4.3: the ring buffer and the sink cache ---------------------------
RING_CASES = [
    # id, window, chunk sizes
    ("W1-chunks1-n7", 1, [1] * 7),
    ("W5-chunks1-n23", 5, [1] * 23),
    ("W4-chunks-longer-than-window", 4, [3, 6, 1, 2, 9, 1]),
    ("W8-exact-multiples", 8, [8, 8, 8]),
    ("W16-chunks5-n55", 16, [5] * 11),
    ("W3-one-chunk-of-50", 3, [50]),
    ("W6-many-wraps-n97", 6, [1, 2, 3, 4] * 9 + [1]),
]
B, HKV, D = 2, 3, 4


def _run_cache(cache, chunks, ks, vs, check):
    """Append the chunks one by one; after each, call check(num_seen, where), where
    ``where`` names the whole stream as the test id does and how far into it we are."""
    seen = 0
    for i, size in enumerate(chunks):
        cache.append(ks[:, :, seen:seen + size], vs[:, :, seen:seen + size])
        seen += size
        check(seen, f"after chunk {i + 1} of the stream {chunks_text(chunks)} ({seen} tokens)")


def _check_contents(cache, ks, vs, kept, label):
    got_k, got_v = cache.keys_values()
    assert_close(got_k, ks[:, :, kept], f"{label}: keys_values()", atol=0, dtype=ks.dtype,
                 what="the keys, oldest first")
    assert_close(got_v, vs[:, :, kept], f"{label}: keys_values()", atol=0, dtype=vs.dtype,
                 what="the values, oldest first")
    pos = cache.positions()
    if not isinstance(pos, torch.Tensor) or pos.dtype != torch.int64:
        raise GradingFailure(f"{label}: positions() returned {getattr(pos, 'dtype', type(pos).__name__)}; expected "
                             "int64")
    assert_equal(pos.tolist(), kept, f"{label}: positions()")


@pytest.mark.ex4_2
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,window,chunks", RING_CASES, ids=[c[0] for c in RING_CASES])
def test_ring_window_contents(nb, name, window, chunks):
    ks, vs = stream(B, HKV, sum(chunks), D)
    cache = nb.RingKVCache(B, HKV, window, D)

    def check(seen, done):
        label = f"RingKVCache(window={window}) {done}"
        _check_contents(cache, ks, vs, ref.kept_positions(seen, window), label)
        assert_equal(cache.num_seen, seen, f"{label}: num_seen")

    _run_cache(cache, chunks, ks, vs, check)


@pytest.mark.ex4_2
@pytest.mark.points(2)
@pytest.mark.parametrize("name,window,chunks", RING_CASES, ids=[c[0] for c in RING_CASES])
def test_ring_writes_in_place_at_slot_p_mod_w(nb, name, window, chunks):
    """The buffers are (B, H_kv, W, d), and position p sits in slot p % W."""
    ks, vs = stream(B, HKV, sum(chunks), D)
    cache = nb.RingKVCache(B, HKV, window, D)
    assert_equal(tuple(cache.k.shape), (B, HKV, window, D), f"RingKVCache({B}, {HKV}, {window}, {D}).k.shape")

    def check(seen, done):
        label = f"RingKVCache(window={window}) {done}"
        kept = ref.kept_positions(seen, window)
        slots = [p % window for p in kept]
        assert_close(cache.k[:, :, slots], ks[:, :, kept], f"{label}: cache.k[:, :, p % W] for the kept positions p",
                     atol=0, what="the buffer slots (token p belongs in slot p % W)")
        assert_close(cache.v[:, :, slots], vs[:, :, kept], f"{label}: cache.v[:, :, p % W] for the kept positions p",
                     atol=0, what="the buffer slots (token p belongs in slot p % W)")

    _run_cache(cache, chunks, ks, vs, check)


@pytest.mark.ex4_2
@pytest.mark.points(0.5)
@pytest.mark.parametrize("name,window,chunks", RING_CASES, ids=[c[0] for c in RING_CASES])
def test_ring_buffers_are_never_reallocated(nb, name, window, chunks):
    """append writes into the buffers allocated in __init__. Where a tensor keeps its memory
    is seen only inside the notebook's process, which could lie about it: this check is
    worth half a point (docs/security.md, "What is still trusted")."""
    ks, vs = stream(B, HKV, sum(chunks), D)
    cache = nb.RingKVCache(B, HKV, window, D)
    pointers = (data_ptr(cache, "k"), data_ptr(cache, "v"))

    def check(seen, done):
        if (data_ptr(cache, "k"), data_ptr(cache, "v")) != pointers:
            raise GradingFailure(f"RingKVCache(window={window}) {done}: cache.k or cache.v was reallocated; append "
                                 "must write into the buffers allocated in __init__ (no torch.cat, no new tensor)")

    _run_cache(cache, chunks, ks, vs, check)


@pytest.mark.ex4_2
@settings(max_examples=30, deadline=None, derandomize=True)
@given(window=st.integers(1, 9), chunks=st.lists(st.integers(1, 12), min_size=1, max_size=12))
def test_ring_any_stream(nb, window, chunks):
    """Any window, any chunking: the ring holds the last min(n, W) tokens, oldest first."""
    ks, vs = stream(1, 2, sum(chunks), 3, seed=len(chunks))
    cache = nb.RingKVCache(1, 2, window, 3)
    _run_cache(cache, chunks, ks, vs, lambda seen, done: _check_contents(
        cache, ks, vs, ref.kept_positions(seen, window), f"RingKVCache(window={window}) {done}"))


@pytest.mark.ex4_2
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=["fp16", "bf16", "fp64"])
def test_ring_keeps_dtype(nb, dtype):
    ks, vs = stream(1, 2, 11, 8, dtype)
    cache = nb.RingKVCache(1, 2, 4, 8, dtype=dtype)
    _run_cache(cache, [3, 3, 5], ks, vs, lambda seen, done: _check_contents(
        cache, ks, vs, ref.kept_positions(seen, 4), f"RingKVCache(1, 2, 4, 8, dtype={dtype}) {done}"))


@pytest.mark.ex4_2
def test_ring_rejects_bad_input(nb):
    assert_raises(nb.RingKVCache, 1, 2, 0, 8, exc=ValueError, names="window")
    assert_raises(nb.RingKVCache, 1, 2, 4.0, 8, exc=TypeError, names="window")
    assert_raises(nb.RingKVCache, 1, 0, 4, 8, exc=ValueError, names="num_kv_heads")
    cache = nb.RingKVCache(1, 2, 4, 8)
    good = torch.zeros(1, 2, 1, 8)
    assert_raises(cache.append, torch.zeros(1, 3, 1, 8), good, exc=ValueError, names="k", call="append(k with 3 heads)")
    assert_raises(cache.append, torch.zeros(1, 2, 1, 4), good, exc=ValueError, names="k", call="append(k with d=4)")
    assert_raises(cache.append, torch.zeros(1, 2, 0, 8), torch.zeros(1, 2, 0, 8), exc=ValueError, names="k",
                  call="append(k with T=0)")
    assert_raises(cache.append, good.double(), good, exc=TypeError, names="k", call="append(k in float64)")
    assert_raises(cache.append, good, torch.zeros(1, 2, 2, 8), exc=ValueError, names="v", call="append(v with T=2)")
    assert_raises(cache.append, [[0.0]], good, exc=TypeError, names="k", call="append(list)")
    assert_equal(cache.num_seen, 0, "num_seen after rejected appends (a bad append must not change the cache)")


SINK_CASES = [
    # id, num_sink, window, chunk sizes
    ("S4-W8-chunks1-n40", 4, 8, [1] * 40),
    ("S4-W1-chunks1-n10", 4, 1, [1] * 10),
    ("S0-W3-chunks2-n14", 0, 3, [2] * 7),
    ("S4-W6-straddling-chunks", 4, 6, [6, 1, 13, 2, 2]),
    ("S4-W4-first-chunks-shorter-than-sinks", 4, 4, [3, 3, 3, 3]),
    ("S2-W3-one-chunk-of-20", 2, 3, [20]),
    ("S4-W5-fewer-tokens-than-sinks", 4, 5, [1, 1, 1]),
    ("S1-W7-many-wraps-n61", 1, 7, [2, 5, 1] * 7 + [5]),
]


@pytest.mark.ex4_3
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,num_sink,window,chunks", SINK_CASES, ids=[c[0] for c in SINK_CASES])
def test_sink_cache_contents(nb, name, num_sink, window, chunks):
    ks, vs = stream(B, HKV, sum(chunks), D, seed=1)
    cache = nb.SinkKVCache(B, HKV, window, D, num_sink=num_sink)

    def check(seen, done):
        label = f"SinkKVCache(window={window}, num_sink={num_sink}) {done}"
        _check_contents(cache, ks, vs, ref.kept_positions(seen, window, num_sink), label)
        assert_equal(cache.num_seen, seen, f"{label}: num_seen")

    _run_cache(cache, chunks, ks, vs, check)


@pytest.mark.ex4_3
@pytest.mark.parametrize("name,num_sink,window,chunks", SINK_CASES[:4], ids=[c[0] for c in SINK_CASES[:4]])
def test_sink_cache_is_preallocated(nb, name, num_sink, window, chunks):
    ks, vs = stream(B, HKV, sum(chunks), D, seed=1)
    cache = nb.SinkKVCache(B, HKV, window, D, num_sink=num_sink)
    label = f"SinkKVCache(window={window}, num_sink={num_sink})"
    assert_equal(tuple(cache.sink_k.shape), (B, HKV, num_sink, D), f"{label}.sink_k.shape")
    assert_equal(tuple(cache.recent.k.shape), (B, HKV, window, D), f"{label}.recent.k.shape")

    def check(seen, done):
        sinks = ref.kept_positions(min(seen, num_sink), num_sink)
        assert_close(cache.sink_k[:, :, :len(sinks)], ks[:, :, sinks], f"{label}.sink_k {done}", atol=0)

    _run_cache(cache, chunks, ks, vs, check)


@pytest.mark.ex4_3
@pytest.mark.points(0.5)
@pytest.mark.parametrize("name,num_sink,window,chunks", SINK_CASES[:4], ids=[c[0] for c in SINK_CASES[:4]])
def test_sink_cache_buffers_are_never_reallocated(nb, name, num_sink, window, chunks):
    """Seen only inside the notebook's process, which could lie about it: worth half a
    point (docs/security.md, "What is still trusted")."""
    ks, vs = stream(B, HKV, sum(chunks), D, seed=1)
    cache = nb.SinkKVCache(B, HKV, window, D, num_sink=num_sink)
    pointers = tuple(data_ptr(cache, a) for a in ("sink_k", "sink_v", "recent.k", "recent.v"))

    def check(seen, done):
        if tuple(data_ptr(cache, a) for a in ("sink_k", "sink_v", "recent.k", "recent.v")) != pointers:
            raise GradingFailure(f"SinkKVCache(window={window}, num_sink={num_sink}) {done}: a buffer was reallocated")

    _run_cache(cache, chunks, ks, vs, check)


@pytest.mark.ex4_3
def test_sink_cache_rejects_bad_input(nb):
    assert_raises(nb.SinkKVCache, 1, 2, 4, 8, num_sink=-1, exc=ValueError, names="num_sink")
    assert_raises(nb.SinkKVCache, 1, 2, 0, 8, num_sink=4, exc=ValueError, names="window")
    cache = nb.SinkKVCache(1, 2, 4, 8, num_sink=2)
    assert_raises(cache.append, torch.zeros(1, 1, 1, 8), torch.zeros(1, 1, 1, 8), exc=ValueError, names="k",
                  call="append(k with 1 head)")
    assert_raises(cache.append, torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 3, 8), exc=ValueError, names="v",
                  call="append(v with T=3)")
    assert_equal(cache.num_seen, 0, "num_seen after rejected appends (a bad append must not change the cache)")


# -- Exercise 4.4: RoPE --------------------------------------------------------------------
ROPE_CASES = [
    # id, shape (..., T, d), positions, base
    ("T1-D2-pos0", (1, 1, 1, 2), [0], 10000.0),
    ("B2-H3-T7-D8-arange", (2, 3, 7, 8), list(range(7)), 10000.0),
    ("H4-T5-D64-gaps", (1, 4, 5, 64), [0, 3, 4, 100, 4097], 10000.0),
    ("T6-D16-base500-unsorted", (2, 6, 16), [9, 2, 2, 0, 31, 7], 500.0),
    ("3d-T33-D32", (3, 33, 32), list(range(50, 83)), 10000.0),
]


@pytest.mark.ex4_4
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16], ids=["fp64", "fp32", "fp16"])
@pytest.mark.parametrize("name,shape,positions,base", ROPE_CASES, ids=[c[0] for c in ROPE_CASES])
def test_apply_rope(nb, name, shape, positions, base, dtype):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)
    pos = torch.tensor(positions)
    got = nb.apply_rope(x, pos, base)
    assert_close(got, ref.rope(x, pos, base), call_text("apply_rope", x, f"positions={positions}", base=base),
                 atol=rope_atol(x), dtype=dtype)


@pytest.mark.ex4_4
def test_apply_rope_at_large_positions(nb):
    """A streaming cache reaches millions of tokens; the angles must still be right."""
    x = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    pos = torch.tensor([1_000_000, 1_000_001, 3_000_017])
    assert_close(nb.apply_rope(x, pos), ref.rope(x, pos), "apply_rope(x fp64, positions=[1e6, 1e6 + 1, 3e6 + 17])",
                 atol=1e-9, what="the rotated x (are the angles computed in float64?)")


@pytest.mark.ex4_4
def test_apply_rope_accepts_int32_positions(nb):
    x = torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    pos = torch.tensor([5, 6, 7, 8], dtype=torch.int32)
    assert_close(nb.apply_rope(x, pos), ref.rope(x, pos), "apply_rope(x, int32 positions)", atol=1e-12)


@pytest.mark.ex4_4
@pytest.mark.parametrize(
    "x,positions,exc,names",
    [
        (torch.zeros(1, 3, 7), torch.arange(3), ValueError, "x"),
        (torch.zeros(1, 3, 8, dtype=torch.int64), torch.arange(3), TypeError, "x"),
        (torch.zeros(1, 3, 8), torch.arange(3).double(), TypeError, "positions"),
        (torch.zeros(1, 3, 8), torch.arange(4), ValueError, "positions"),
        (torch.zeros(1, 3, 8), torch.tensor([0, -1, 2]), ValueError, "positions"),
        (torch.zeros(1, 3, 8), [0, 1, 2], TypeError, "positions"),
    ],
    ids=["odd-head-dim", "integer-x", "float-positions", "wrong-length", "negative-position", "list-positions"],
)
def test_apply_rope_rejects_bad_input(nb, x, positions, exc, names):
    assert_raises(nb.apply_rope, x, positions, exc=exc, names=names)


# -- Exercise 4.5: RoPE after or before caching -----------------------------------------------
DECODE_CASES = [
    # id, cache kind, num_sink, window, rope mode, dtype
    ("ring-W5-post-fp64", "ring", 0, 5, "post", torch.float64),
    ("ring-W5-pre-fp64", "ring", 0, 5, "pre", torch.float64),
    ("ring-W1-pre-fp64", "ring", 0, 1, "pre", torch.float64),
    ("ring-W7-post-fp32", "ring", 0, 7, "post", torch.float32),
    ("sink-S2-W4-post-fp64", "sink", 2, 4, "post", torch.float64),
    ("sink-S2-W4-pre-fp64", "sink", 2, 4, "pre", torch.float64),
    ("sink-S4-W3-pre-fp32", "sink", 4, 3, "pre", torch.float32),
]
STEPS, H, HKV_DECODE, D_DECODE = 20, 4, 2, 8


@functools.lru_cache(maxsize=None)
def _decode_inputs(dtype, seed=5):
    g = torch.Generator().manual_seed(seed)
    qs = torch.randn(1, H, STEPS, D_DECODE, generator=g, dtype=torch.float64)
    ks = torch.randn(1, HKV_DECODE, STEPS, D_DECODE, generator=g, dtype=torch.float64)
    vs = torch.randn(1, HKV_DECODE, STEPS, D_DECODE, generator=g, dtype=torch.float64)
    return qs.to(dtype), ks.to(dtype), vs.to(dtype)


@functools.lru_cache(maxsize=None)
def _decode_expected(dtype, window, num_sink, mode):
    qs, ks, vs = _decode_inputs(dtype)
    return ref.streaming_outputs(qs, ks, vs, window, num_sink, mode)


def _make_cache(nb, kind, num_sink, window, dtype):
    if kind == "ring":
        return nb.RingKVCache(1, HKV_DECODE, window, D_DECODE, dtype=dtype)
    return nb.SinkKVCache(1, HKV_DECODE, window, D_DECODE, num_sink=num_sink, dtype=dtype)


@pytest.mark.ex4_5
@pytest.mark.core
@pytest.mark.points(4)
@pytest.mark.parametrize("name,kind,num_sink,window,mode,dtype", DECODE_CASES, ids=[c[0] for c in DECODE_CASES])
def test_rope_decode_step(nb, name, kind, num_sink, window, mode, dtype):
    qs, ks, vs = _decode_inputs(dtype)
    expected = _decode_expected(dtype, window, num_sink, mode)
    cache = _make_cache(nb, kind, num_sink, window, dtype)
    for t in range(STEPS):
        got = nb.rope_decode_step(cache, qs[:, :, t:t + 1], ks[:, :, t:t + 1], vs[:, :, t:t + 1], rope=mode)
        assert_close(got, expected[:, :, t:t + 1],
                     f"rope_decode_step({kind} cache, window={window}, num_sink={num_sink}, rope={mode!r}) at step {t}",
                     atol=DECODE_ATOL[dtype], what="the attention output")
    # What the cache holds is the point of the exercise: rotated keys (post) or raw keys (pre).
    kept = ref.kept_positions(STEPS, window, num_sink)
    idx = torch.tensor(kept)
    stored = ref.rope(ks[:, :, idx], idx) if mode == "post" else ks[:, :, idx].double()
    assert_close(cache.keys_values()[0], stored, f"{kind} cache keys after {STEPS} steps with rope={mode!r}",
                 atol=DECODE_ATOL[dtype], what="the cached keys (" + ("rotated at their absolute positions)"
                                                                     if mode == "post" else "not rotated)"))


@pytest.mark.ex4_5
def test_rope_decode_step_pre_and_post_agree_on_a_plain_window(nb):
    """Without sinks the cache is contiguous, so distances within it equal absolute distances."""
    qs, ks, vs = _decode_inputs(torch.float64)
    caches = {m: nb.RingKVCache(1, HKV_DECODE, 6, D_DECODE, dtype=torch.float64) for m in ("post", "pre")}
    for t in range(STEPS):
        step = slice(t, t + 1)
        post = nb.rope_decode_step(caches["post"], qs[:, :, step], ks[:, :, step], vs[:, :, step], rope="post")
        pre = nb.rope_decode_step(caches["pre"], qs[:, :, step], ks[:, :, step], vs[:, :, step], rope="pre")
        assert_close(pre, post, f"rope_decode_step(ring, rope='pre') vs rope='post' at step {t}", atol=1e-10)


@pytest.mark.ex4_5
def test_rope_decode_step_rejects_bad_input(nb):
    cache = nb.RingKVCache(1, 2, 4, 8)
    k, v = torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8)
    assert_raises(nb.rope_decode_step, cache, torch.zeros(1, 4, 1, 8), k, v, rope="absolute", exc=ValueError,
                  names="rope")
    assert_raises(nb.rope_decode_step, cache, torch.zeros(1, 4, 2, 8), k, v, exc=ValueError, names="q",
                  call="rope_decode_step(cache, q with 2 tokens, k, v)")
    assert_raises(nb.rope_decode_step, cache, torch.zeros(1, 3, 1, 8), k, v, exc=ValueError, names="q",
                  call="rope_decode_step(cache, q with 3 heads over 2 KV heads, k, v)")
    assert_raises(nb.rope_decode_step, cache, "q", k, v, exc=TypeError, names="q")
    assert_raises(nb.rope_decode_step, cache, torch.zeros(1, 4, 1, 8, dtype=torch.float64), k, v, exc=TypeError,
                  names="q", call="rope_decode_step(cache, q in float64, k and v in float32)")
    assert_equal(cache.num_seen, 0, "num_seen after rejected decode steps (nothing may be appended)")
