"""Graders for Chapter 6 (exercises/06_delta_rule.ipynb) against tests/references.

Every numeric test compares with an fp64 per-token loop over each batch element and
head (tests/references/ref_06_delta_rule.py), over batch > 1 and heads > 1 with
distinct data, d_k != d_v, lengths that are not multiples of the chunk, non-zero
initial states and gates near 0 and near 1. Failures report the max abs error and
the relative RMS error.

Tolerances (TOL) are 20 times the largest error of a correct implementation (the
solutions: the four recurrences, the parallel form and the chunkwise form at C = 16,
32 and 64) over every case below, measured as |got - expected| / (1 + |expected|) and
as the relative RMS error (AMD EPYC, MKL on AVX-512, and the same with MKL held to SSE4.2):

- fp32: 4.9e-6 and 5.0e-7 (linear attention's output, whose unnormalised state sums up
  to 130 outer products), so atol = rtol = 1e-4 and RMS 1e-5;
- fp64: 1.1e-14 and 1.2e-15, so atol = rtol = 2e-13 and RMS 3e-14 (was 1e-9 and 1e-10,
  which let through a mistake a hundred thousand times larger than rounding).

The factor 20 leaves room for a correct implementation that sums in another order."""

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from grading.compare import (
    GradingFailure,
    assert_close,
    assert_equal,
    assert_raises,
    call_text,
    observed_tensor,
    relative_rms_error,
)
from tests.references import ref_06_delta_rule as ref


@dataclass(frozen=True)
class Tol:
    atol: float
    rtol: float
    rms: float  # bound on ||got - expected|| / ||expected||


TOL = {torch.float64: Tol(2e-13, 2e-13, 3e-14), torch.float32: Tol(1e-4, 1e-4, 1e-5)}
DTYPES = {"fp64": torch.float64, "fp32": torch.float32}


@dataclass(frozen=True)
class Case:
    id: str
    B: int
    T: int
    H: int
    d_k: int
    d_v: int
    gates: str  # "mid", "near1" (alpha, beta -> 1), "near0" (alpha, beta -> 0), "mixed" (per head)
    with_state: bool = True


CASES = [
    Case("B2-T100-H3-Dk8-Dv12-mid-state", 2, 100, 3, 8, 12, "mid"),
    Case("B2-T64-H3-Dk8-Dv12-gates-near1-state", 2, 64, 3, 8, 12, "near1"),
    Case("B3-T37-H2-Dk16-Dv8-gates-near0-state", 3, 37, 2, 16, 8, "near0"),
    Case("B2-T130-H4-Dk8-Dv6-mixed-state", 2, 130, 4, 8, 6, "mixed"),
    Case("B1-T1-H2-Dk8-Dv4-mid-zero-state", 1, 1, 2, 8, 4, "mid", with_state=False),
]
BY_ID = {c.id: c for c in CASES}


def make_inputs(case: Case, dtype: torch.dtype):
    """q, k, v, g (log alpha), beta, initial_state; drawn in fp64 from a per-case seed."""
    gen = torch.Generator().manual_seed(sum(map(ord, case.id)))
    B, T, H, d_k, d_v = case.B, case.T, case.H, case.d_k, case.d_v
    q = torch.randn(B, T, H, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(B, T, H, d_k, generator=gen, dtype=torch.float64)
    v = torch.randn(B, T, H, d_v, generator=gen, dtype=torch.float64)
    u = torch.rand(B, T, H, generator=gen, dtype=torch.float64)
    z = torch.randn(B, T, H, generator=gen, dtype=torch.float64)
    near1_g, near1_b = -1e-3 * u, torch.sigmoid(z + 8)
    near0_g, near0_b = -(10 + 5 * u), torch.sigmoid(z - 8)
    mid_g, mid_b = F.logsigmoid(z + 1.5), torch.rand(B, T, H, generator=gen, dtype=torch.float64)
    if case.gates == "mid":
        g, beta = mid_g, mid_b
    elif case.gates == "near1":
        g, beta = near1_g, near1_b
    elif case.gates == "near0":
        g, beta = near0_g, near0_b
    else:  # heads 0..3: near 1, near 0, mid, near-1 decay with near-0 writes
        g = torch.stack([near1_g[..., 0], near0_g[..., 1], mid_g[..., 2], near1_g[..., 3]], -1)
        beta = torch.stack([near1_b[..., 0], near0_b[..., 1], mid_b[..., 2], near0_b[..., 3]], -1)
    state = torch.randn(B, H, d_k, d_v, generator=gen, dtype=torch.float64) if case.with_state else None
    cast = lambda x: None if x is None else x.to(dtype)  # noqa: E731
    return tuple(cast(x) for x in (q, k, v, g, beta, state))


_REF_CACHE = {}


def reference(kind: str, case: Case, dtype: torch.dtype):
    """The fp64 loop's (o, final_state) on exactly the values the notebook sees (cached:
    the same case is graded against the solution, the stub and every catalogued bug)."""
    key = (kind, case.id, dtype)
    if key not in _REF_CACHE:
        q, k, v, g, beta, state = make_inputs(case, dtype)
        if kind == "linear":
            _REF_CACHE[key] = ref.linear_attention(q, k, v, state)
        elif kind == "linear-zero-state":
            _REF_CACHE[key] = ref.linear_attention(q, k, v, None)
        elif kind == "delta":
            _REF_CACHE[key] = ref.delta_rule(q, k, v, beta, state)
        else:
            _REF_CACHE[key] = ref.gated_delta_rule(q, k, v, g, beta, state)
    return _REF_CACHE[key]


def check(got, expected, call, dtype, what):
    """assert_close with the dtype's tolerance, plus a bound on the relative RMS error;
    every failure reports both the max abs error and the relative RMS error."""
    tol = TOL[dtype]
    try:
        assert_close(got, expected, call, atol=tol.atol, rtol=tol.rtol, dtype=dtype, what=what)
    except GradingFailure as exc:
        rms = relative_rms_error(got, expected) if getattr(got, "shape", None) == expected.shape else math.nan
        # Keep what the check observed: the diagnosis compares it within the tolerance
        # (a message's digits change with the CPU's BLAS).
        raise GradingFailure(f"{exc}\n  relative RMS error {rms:.3g} (bound {tol.rms:g})", exc.observed) from None
    rms = relative_rms_error(got, expected)
    if not rms <= tol.rms:
        err = (got.double() - expected.double()).abs().max().item()
        raise GradingFailure(f"{call}: {what} is wrong\n"
                             f"  relative RMS error {rms:.3g} (bound {tol.rms:g}); max abs error {err:.3g}",
                             observed_tensor(got, call, atol=tol.atol, rtol=tol.rtol, what=what))


def unpack(result, call):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise GradingFailure(f"{call} returned {type(result).__name__}; expected the tuple (o, final_state)")
    return result


def check_pair(result, expected, call, dtype, output="the output o"):
    o, state = unpack(result, call)
    check(o, expected[0], call, dtype, output)
    check(state, expected[1], call, dtype, "the final state (S^T, (B, H, d_k, d_v))")


case_params = pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
dtype_params = pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))


def bad_inputs(kind):
    """(id, args, kwargs, exception, argument named) for the validation tests."""
    q, k, v, g, beta, state = make_inputs(CASES[0], torch.float64)
    base = {"linear": (q, k, v), "delta": (q, k, v, beta), "gated": (q, k, v, g, beta)}[kind]
    out = [
        ("q-3d", (q[0], *base[1:]), {}, ValueError, "q"),
        ("v-wrong-T", (q, k, v[:, :-1], *base[3:]), {}, ValueError, "v"),
        ("k-int", (q, k.long(), *base[2:]), {}, TypeError, "k"),
        ("state-wrong-shape", base, {"initial_state": state[:, :, :, :-1]}, ValueError, "initial_state"),
    ]
    if kind == "delta":
        out.append(("beta-above-1", (q, k, v, beta + 1), {}, ValueError, "beta"))
    if kind == "gated":
        out.append(("g-positive", (q, k, v, -g, beta), {}, ValueError, "g"))
        out.append(("beta-negative", (q, k, v, g, beta - 1), {}, ValueError, "beta"))
        out.append(("g-wrong-shape", (q, k, v, g[:, :, :1], beta), {}, ValueError, "g"))
    return out


def bad_params(kind):
    cases = bad_inputs(kind)
    return pytest.mark.parametrize("args,kwargs,exc,names", [c[1:] for c in cases], ids=[c[0] for c in cases])


# -- Exercise 6.1 --------------------------------------------------------------------


@pytest.mark.ex6_1
@pytest.mark.core
@pytest.mark.points(2)
@dtype_params
@case_params
def test_linear_attention_recurrent(nb, case, dtype):
    q, k, v, g, beta, state = make_inputs(case, dtype)
    call = call_text("linear_attention_recurrent", q, k, v, initial_state=state)
    check_pair(nb.linear_attention_recurrent(q, k, v, initial_state=state), reference("linear", case, dtype), call,
               dtype)


@pytest.mark.ex6_1
def test_linear_attention_recurrent_calls_are_independent(nb):
    """The initial state is read, never written: two identical calls agree."""
    case = BY_ID["B2-T100-H3-Dk8-Dv12-mid-state"]
    q, k, v, g, beta, state = make_inputs(case, torch.float64)
    before = state.clone()
    call = call_text("linear_attention_recurrent", q, k, v, initial_state=state)
    for _ in range(2):
        check_pair(nb.linear_attention_recurrent(q, k, v, initial_state=state),
                   reference("linear", case, torch.float64),
                   call + " (called twice)", torch.float64)
    if not torch.equal(state, before):
        raise GradingFailure(f"{call} modified initial_state in place; the caller's state must stay as it was")


@pytest.mark.ex6_1
@bad_params("linear")
def test_linear_attention_recurrent_rejects_bad_input(nb, args, kwargs, exc, names):
    assert_raises(nb.linear_attention_recurrent, *args, exc=exc, names=names, **kwargs)


# -- Exercise 6.2 --------------------------------------------------------------------


@pytest.mark.ex6_2
@pytest.mark.core
@pytest.mark.points(2)
@dtype_params
@case_params
def test_linear_attention_parallel(nb, case, dtype):
    q, k, v, *_ = make_inputs(case, dtype)
    check(nb.linear_attention_parallel(q, k, v), reference("linear-zero-state", case, dtype)[0],
          call_text("linear_attention_parallel", q, k, v), dtype, "the output o")


@pytest.mark.ex6_2
def test_linear_attention_parallel_custom_scale(nb):
    q, k, v, *_ = make_inputs(CASES[0], torch.float64)
    expected = ref.linear_attention(q, k, v, scale=0.5)[0]
    check(nb.linear_attention_parallel(q, k, v, scale=0.5), expected,
          call_text("linear_attention_parallel", q, k, v, scale=0.5), torch.float64, "the output o")


@pytest.mark.ex6_2
@pytest.mark.parametrize("bad_id", ["q-3d", "v-wrong-T", "k-int"])
def test_linear_attention_parallel_rejects_bad_input(nb, bad_id):
    _, args, _, exc, names = {c[0]: c for c in bad_inputs("linear")}[bad_id]
    assert_raises(nb.linear_attention_parallel, *args, exc=exc, names=names)


# -- Exercise 6.3 --------------------------------------------------------------------


@pytest.mark.ex6_3
@pytest.mark.core
@pytest.mark.points(2)
@dtype_params
@case_params
def test_delta_rule_recurrent(nb, case, dtype):
    q, k, v, g, beta, state = make_inputs(case, dtype)
    call = call_text("delta_rule_recurrent", q, k, v, beta, initial_state=state)
    check_pair(nb.delta_rule_recurrent(q, k, v, beta, initial_state=state), reference("delta", case, dtype), call,
               dtype)


@pytest.mark.ex6_3
def test_delta_rule_overwrites_a_key(nb):
    """With beta = 1 and a unit key, writing (k, v1) then (k, v2) must return v2 for k,
    where plain linear attention would return v1 + v2."""
    d_k, d_v = 4, 3
    k = torch.zeros(1, 2, 1, d_k, dtype=torch.float64)
    k[..., 0] = 1.0
    v = torch.tensor([[1.0, 2.0, 3.0], [-4.0, 5.0, 0.5]], dtype=torch.float64).view(1, 2, 1, d_v)
    beta = torch.ones(1, 2, 1, dtype=torch.float64)
    o, state = unpack(nb.delta_rule_recurrent(k, k, v, beta, scale=1.0),
                      "delta_rule_recurrent(k, k, v, beta=1, scale=1.0)")
    expected = ref.delta_rule(k, k, v, beta, scale=1.0)[0]
    check(o, expected, "delta_rule_recurrent(k, k, v, beta=1, scale=1.0) reading the key just written", torch.float64,
          "the output o (o[:, 1] must be the second value, not the sum)")


@pytest.mark.ex6_3
@bad_params("delta")
def test_delta_rule_rejects_bad_input(nb, args, kwargs, exc, names):
    assert_raises(nb.delta_rule_recurrent, *args, exc=exc, names=names, **kwargs)


# -- Exercise 6.4 --------------------------------------------------------------------


@pytest.mark.ex6_4
@pytest.mark.core
@pytest.mark.points(3)
@dtype_params
@case_params
def test_gated_delta_rule_recurrent(nb, case, dtype):
    q, k, v, g, beta, state = make_inputs(case, dtype)
    call = call_text("gated_delta_rule_recurrent", q, k, v, g, beta, initial_state=state)
    check_pair(nb.gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=state), reference("gated", case, dtype),
               call, dtype)


@pytest.mark.ex6_4
def test_gated_delta_rule_state_passing(nb):
    """Running the first 40 tokens, then the rest from the returned state, equals one run."""
    case = BY_ID["B2-T100-H3-Dk8-Dv12-mid-state"]
    q, k, v, g, beta, state = make_inputs(case, torch.float64)
    before = state.clone()
    o1, s1 = unpack(nb.gated_delta_rule_recurrent(q[:, :40], k[:, :40], v[:, :40], g[:, :40], beta[:, :40], state),
                    "gated_delta_rule_recurrent(first 40 tokens)")
    if not torch.equal(state, before):
        raise GradingFailure("gated_delta_rule_recurrent modified initial_state in place")
    o2, s2 = unpack(nb.gated_delta_rule_recurrent(q[:, 40:], k[:, 40:], v[:, 40:], g[:, 40:], beta[:, 40:], s1),
                    "gated_delta_rule_recurrent(last 60 tokens, state from the first call)")
    o_ref, s_ref = reference("gated", case, torch.float64)
    call = "gated_delta_rule_recurrent in two calls (40 + 60 tokens) passing the state"
    check(torch.cat([o1, o2], 1), o_ref, call, torch.float64, "the concatenated output")
    check(s2, s_ref, call, torch.float64, "the final state")


@pytest.mark.ex6_4
@bad_params("gated")
def test_gated_delta_rule_rejects_bad_input(nb, args, kwargs, exc, names):
    assert_raises(nb.gated_delta_rule_recurrent, *args, exc=exc, names=names, **kwargs)


# -- Exercise 6.5 --------------------------------------------------------------------


@pytest.mark.ex6_5
@pytest.mark.core
@pytest.mark.points(4)
@pytest.mark.parametrize("chunk_size", [64, 16], ids=["C64", "C16"])
@dtype_params
@case_params
def test_chunk_gated_delta_rule(nb, case, dtype, chunk_size):
    q, k, v, g, beta, state = make_inputs(case, dtype)
    call = call_text("chunk_gated_delta_rule", q, k, v, g, beta, initial_state=state, chunk_size=chunk_size)
    check_pair(nb.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state, chunk_size=chunk_size),
               reference("gated", case, dtype), call, dtype)


@pytest.mark.ex6_5
def test_chunk_default_chunk_size_and_scale(nb):
    case = BY_ID["B2-T130-H4-Dk8-Dv6-mixed-state"]
    q, k, v, g, beta, state = make_inputs(case, torch.float64)
    key = ("scale-0.3", case.id)
    if key not in _REF_CACHE:
        _REF_CACHE[key] = ref.gated_delta_rule(q, k, v, g, beta, state, scale=0.3)
    expected = _REF_CACHE[key]
    call = call_text("chunk_gated_delta_rule", q, k, v, g, beta, state, scale=0.3)
    check_pair(nb.chunk_gated_delta_rule(q, k, v, g, beta, state, scale=0.3), expected, call, torch.float64)


@pytest.mark.ex6_5
@bad_params("gated")
def test_chunk_rejects_bad_input(nb, args, kwargs, exc, names):
    assert_raises(nb.chunk_gated_delta_rule, *args, exc=exc, names=names, **kwargs)


@pytest.mark.ex6_5
@pytest.mark.parametrize("chunk_size", [0, 16.0], ids=["zero", "float"])
def test_chunk_rejects_bad_chunk_size(nb, chunk_size):
    q, k, v, g, beta, state = make_inputs(CASES[0], torch.float64)
    assert_raises(nb.chunk_gated_delta_rule, q, k, v, g, beta, chunk_size=chunk_size, exc=(ValueError, TypeError),
                  names="chunk_size")


# -- Exercise 6.6 --------------------------------------------------------------------

LAYER = dict(d_model=24, num_heads=3, head_dim_k=8, head_dim_v=6, chunk_size=16)


def layer_reference(weights, x, state, key):
    """ref.gated_deltanet_layer, cached by ``key`` (the weights come from a fixed seed)."""
    key = ("layer",) + key
    if key not in _REF_CACHE:
        _REF_CACHE[key] = ref.gated_deltanet_layer(weights, x, state)
    return _REF_CACHE[key]


def make_layer(nb, gates="mid"):
    # The layer lives in the notebook's process (grading.judge): its weights are drawn there,
    # from a seed set there, and changed there (load_state_dict); the reference reads them back.
    nb.torch.manual_seed(6)
    layer = nb.GatedDeltaNet(**LAYER).double()
    if gates == "extreme":  # one head that barely forgets, one that forgets almost everything
        layer.load_state_dict({"A_log": torch.tensor([math.log(1e-3), math.log(30.0), 0.0], dtype=torch.float64),
                               "dt_bias": torch.tensor([-6.0, 3.0, -1.0], dtype=torch.float64)}, strict=False)
    x = torch.randn(2, 45, LAYER["d_model"], dtype=torch.float64, generator=torch.Generator().manual_seed(60))
    weights = dict(layer.named_parameters())
    return layer, x, weights


@pytest.mark.ex6_6
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("gates", ["mid", "extreme"])
def test_layer_prefill_matches_reference(nb, gates):
    layer, x, weights = make_layer(nb, gates)
    state = torch.randn(2, 3, 8, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(61))
    y_ref, s_ref = layer_reference(weights, x, state, (gates, "state"))
    call = call_text("GatedDeltaNet(d_model=24, num_heads=3, head_dim_k=8, head_dim_v=6, chunk_size=16).forward", x,
                     state)
    with torch.no_grad():
        result = layer(x, state)
    check_pair(result, (y_ref, s_ref), call, torch.float64, "the layer's output y (B, T, d_model)")


@pytest.mark.ex6_6
@pytest.mark.points(2)
def test_layer_decode_matches_prefill(nb):
    """Prefill 30 tokens (chunkwise, state out), then decode 15 one at a time (recurrent,
    state in and out): the outputs and the state equal one prefill of all 45."""
    layer, x, weights = make_layer(nb, "extreme")
    y_ref, s_ref = layer_reference(weights, x, None, ("extreme", "zero-state"))
    with torch.no_grad():
        y, state = unpack(layer(x[:, :30]), "GatedDeltaNet.forward(x[:, :30])")
        ys = [y]
        for t in range(30, 45):
            y_t, state = unpack(layer.step(x[:, t], state), f"GatedDeltaNet.step(x[:, {t}], state)")
            if not isinstance(y_t, torch.Tensor) or y_t.shape != (2, LAYER["d_model"]):
                raise GradingFailure(f"GatedDeltaNet.step returned y_t of shape {getattr(y_t, 'shape', None)}; "
                                     "expected (B, d_model)")
            ys.append(y_t[:, None])
    call = "GatedDeltaNet: forward(x[:, :30]) then step() for tokens 30..44"
    check(torch.cat(ys, 1), y_ref, call, torch.float64, "the outputs")
    check(state, s_ref, call, torch.float64, "the state after the last step")


@pytest.mark.ex6_6
def test_layer_keeps_no_state_between_calls(nb):
    """forward(x) with no state starts from zeros every time, whatever ran before."""
    layer, x, weights = make_layer(nb)
    y_ref, s_ref = layer_reference(weights, x[:1, :20], None, ("mid", "B1-T20"))
    with torch.no_grad():
        layer(x[1:], None)
        first = unpack(layer(x[:1, :20]), "GatedDeltaNet.forward(x[:1, :20])")
        second = unpack(layer(x[:1, :20]), "GatedDeltaNet.forward(x[:1, :20]) again")
        y_step, s_step = unpack(layer.step(x[:1, 0]), "GatedDeltaNet.step(x[:1, 0]) with no state")
    for result, when in [(first, "after another call"), (second, "called a second time")]:
        check_pair(result, (y_ref, s_ref), f"GatedDeltaNet.forward(x[:1, :20]) {when}", torch.float64,
                   "the layer's output y (B, T, d_model)")
    check(y_step, y_ref[:, 0], "GatedDeltaNet.step(x[:1, 0]) with state=None", torch.float64,
          "the layer's output y_t (B, d_model)")


@pytest.mark.ex6_6
@pytest.mark.parametrize("method,shape,names", [("forward", (2, 5, 23), "x"), ("step", (2, 1, 24), "x_t")],
                         ids=["forward-wrong-d-model", "step-3d"])
def test_layer_rejects_bad_input(nb, method, shape, names):
    layer, x, weights = make_layer(nb)
    assert_raises(getattr(layer, method), torch.randn(*shape, dtype=torch.float64), exc=ValueError, names=names,
                  call=f"GatedDeltaNet.{method}(tensor{shape})")


# -- Exercise 6.7 --------------------------------------------------------------------

HYBRID = [
    # id, linear layers, H, d_k, d_v, attention layers, H_kv, head_dim, seq_len, batch, state dtype, kv dtype
    ("hybrid-3to1-128k", 36, 16, 128, 128, 12, 8, 128, 131_072, 1, "fp32", "fp16"),
    ("all-linear-B8", 48, 16, 128, 256, 0, 8, 128, 10**6, 8, "bf16", "fp16"),
    ("all-attention-fp8", 0, 16, 128, 128, 32, 8, 128, 32_768, 4, "fp32", "fp8"),
    ("empty-cache", 4, 2, 3, 5, 2, 1, 64, 0, 3, "fp16", "bf16"),
    ("odd-shapes", 7, 3, 96, 80, 5, 3, 72, 4097, 2, "fp32", "fp32"),
]


@pytest.mark.ex6_7
@pytest.mark.core
@pytest.mark.parametrize("args", [h[1:] for h in HYBRID], ids=[h[0] for h in HYBRID])
def test_hybrid_cache_bytes(nb, args):
    got = nb.hybrid_cache_bytes(*args)
    assert_equal(got, ref.hybrid_bytes(*args), call_text("hybrid_cache_bytes", *args))
    if not isinstance(got, int):
        raise GradingFailure(f"hybrid_cache_bytes returned {type(got).__name__}; a byte count is an int")


@pytest.mark.ex6_7
@pytest.mark.parametrize(
    "args,exc,names",
    [
        ((36, 0, 128, 128, 12, 8, 128, 100), ValueError, "num_heads"),
        ((36, 16, 128, 128, -1, 8, 128, 100), ValueError, "num_attention_layers"),
        ((36, 16, 128.0, 128, 12, 8, 128, 100), TypeError, "head_dim_k"),
        ((36, 16, 128, 128, 12, 8, 128, 100, 1, "fp64"), ValueError, "state_dtype"),
    ],
    ids=["zero-heads", "negative-attention-layers", "float-head-dim-k", "unknown-state-dtype"],
)
def test_hybrid_cache_bytes_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.hybrid_cache_bytes, *args, exc=exc, names=names)
