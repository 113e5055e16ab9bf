"""Graders for Chapter 13 (exercises/13_mla.ipynb) against tests/references.

Exercises 13.1 and 13.2 are compared with dense fp64 attention over keys and values
built head by head from the latent (tests/references/ref_13_mla.py); 13.3 to 13.5 with
counts added up term by term, layer by layer and rank by rank, exactly; 13.6 runs the
notebook's ``dcp_attention`` on real gloo processes (``grading.judge.run_ranks``, as in
Chapter 10), each rank holding the cache rows of the positions i with i mod P = rank,
and compares every rank's result with dense fp64 attention over the whole cache.
"""

import math

import pytest
import torch

from distlab.launch import RanksFailed, raise_for_failures
from grading.compare import GradingFailure, assert_close, assert_equal, assert_raises, call_text
from grading.judge import Unmeasurable, peak_memory, run_ranks
from tests.references import ref_13_mla as ref

DTYPES = {"fp32": torch.float32, "fp64": torch.float64}
# A correct fp32 MLA layer on these shapes is two einsums over at most 16 latent channels,
# a softmax over at most 33 keys of scores of order 1 and one weighted sum: the
# solution's error against the fp64 reference is below 1e-6 (naive and absorbed alike,
# which sum in different orders); 1e-5 leaves 10x. fp64: the same at 2**-52.
ATOL = {torch.float32: 1e-5, torch.float64: 1e-12}
RTOL = {torch.float32: 1e-5, torch.float64: 1e-12}
# A send or receive that waits longer than this is a deadlock; the whole run is killed
# after RUN_TIMEOUT_S (a correct run on these shapes takes well under a second per call).
OP_TIMEOUT_S, RUN_TIMEOUT_S = 10.0, 90.0


def randn(*shape, dtype=torch.float64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def lse_atol(expected, dtype) -> float:
    """ATOL, plus what a correct fp32 computation must lose at large logits: a score of
    size |s| is rounded to about u |s| (u the unit roundoff), which moves each softmax
    weight by that much relative, in an output of size |out|; four times that. On the
    large-logits case (|lse| up to 244, |out| up to 21) the fp32 term is 1.2e-3."""
    out, lse = expected
    largest_lse = float(lse[torch.isfinite(lse)].abs().max())
    largest_out = float(out.abs().max())
    return ATOL[dtype] + 4 * (torch.finfo(dtype).eps / 2) * largest_lse * largest_out


# -- Exercises 13.1 and 13.2 -------------------------------------------------------------

# (name, B, H, N_q, N, r, d_nope, d_rope, d_v)
MLA_CASES = [
    ("B1-H2-Nq1-N9-r8-nope4-rope4-v4-decode", 1, 2, 1, 9, 8, 4, 4, 4),
    ("B2-H3-Nq3-N12-r16-nope8-rope4-v6-three-queries", 2, 3, 3, 12, 16, 8, 4, 6),
    ("B1-H2-Nq5-N5-r8-nope8-rope2-v8-square-prefill", 1, 2, 5, 5, 8, 8, 2, 8),
    ("B1-H4-Nq2-N33-r12-nope6-rope8-v5-long", 1, 4, 2, 33, 12, 6, 8, 5),
]


def mla_inputs(B, H, N_q, N, r, d_nope, d_rope, d_v, dtype, seed=0):
    """q_nope, q_pe, c_kv, k_pe, w_uk, w_uv with scores of order 1 (the up-projections
    scaled by 1/sqrt(r), the RoPE parts by 1/2)."""
    return (randn(B, H, N_q, d_nope, dtype=dtype, seed=seed),
            randn(B, H, N_q, d_rope, dtype=dtype, seed=seed + 1),
            randn(B, N, r, dtype=dtype, seed=seed + 2),
            randn(B, N, d_rope, dtype=dtype, seed=seed + 3),
            randn(H, d_nope, r, dtype=dtype, seed=seed + 4, scale=1 / math.sqrt(r)),
            randn(H, d_v, r, dtype=dtype, seed=seed + 5, scale=1 / math.sqrt(r)))


def check_mla(nb, function, case, dtype_name):
    _name, B, H, N_q, N, r, d_nope, d_rope, d_v = case
    dtype = DTYPES[dtype_name]
    args = mla_inputs(B, H, N_q, N, r, d_nope, d_rope, d_v, dtype, seed=N + H)
    expected = ref.mla_attention_fp64(*args)
    call = call_text(function, *args)
    got = getattr(nb, function)(*[a.clone() for a in args])
    if not isinstance(got, torch.Tensor):
        raise GradingFailure(f"{call} returned {type(got).__name__}; expected a (B, H, N_q, d_v) tensor")
    assert_close(got, expected, call, atol=ATOL[dtype], rtol=RTOL[dtype], dtype=dtype)


def mla_bad_inputs():
    q_nope, q_pe, c_kv, k_pe, w_uk, w_uv = mla_inputs(1, 2, 2, 6, 8, 4, 4, 4, torch.float32)
    return [
        ((q_nope[0], q_pe, c_kv, k_pe, w_uk, w_uv), ValueError, "q_nope", "3d-q_nope"),
        ((q_nope, q_pe[..., :3], c_kv, k_pe[..., :3], w_uk, w_uv), ValueError, "q_pe", "odd-d_rope"),
        ((q_nope, q_pe, c_kv, k_pe[:, :5], w_uk, w_uv), ValueError, "k_pe", "k_pe-length"),
        ((q_nope, q_pe, c_kv, k_pe, w_uk[..., :6], w_uv), ValueError, "w_uk", "w_uk-rank"),
        ((q_nope, q_pe, c_kv, k_pe, w_uk, w_uv[:1]), ValueError, "w_uv", "w_uv-heads"),
        ((q_nope, q_pe, c_kv[:, :1], k_pe[:, :1], w_uk, w_uv), ValueError, "q_nope", "more-queries-than-tokens"),
        ((q_nope, q_pe, c_kv.double(), k_pe, w_uk, w_uv), TypeError, "c_kv", "c_kv-dtype"),
        ((q_nope, q_pe, c_kv.tolist(), k_pe, w_uk, w_uv), TypeError, "c_kv", "list-c_kv"),
        ((q_nope, q_pe[:, :1], c_kv, k_pe, w_uk, w_uv), ValueError, "q_pe", "q_pe-heads"),
        ((q_nope, q_pe, c_kv.repeat(2, 1, 1), k_pe.repeat(2, 1, 1), w_uk, w_uv), ValueError, "c_kv", "c_kv-batch"),
    ]


@pytest.mark.ex13_1
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("case", MLA_CASES, ids=[c[0] for c in MLA_CASES])
def test_mla_attention_naive(nb, case, dtype_name):
    check_mla(nb, "mla_attention_naive", case, dtype_name)


@pytest.mark.ex13_1
@pytest.mark.parametrize("index", range(len(mla_bad_inputs())), ids=[c[-1] for c in mla_bad_inputs()])
def test_mla_attention_naive_rejects_bad_input(nb, index):
    args, exc, names, _ = mla_bad_inputs()[index]
    assert_raises(nb.mla_attention_naive, *args, exc=exc, names=names)


@pytest.mark.ex13_2
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("case", MLA_CASES, ids=[c[0] for c in MLA_CASES])
def test_mla_attention_absorbed(nb, case, dtype_name):
    check_mla(nb, "mla_attention_absorbed", case, dtype_name)


# Memory, measured by the judge from outside the notebook's process (grading.judge.measure):
# a long cache and many heads, so that up-projecting it (K and V for every head, 13.1's
# way) is 128 MiB each, while the absorbed decode needs the 2 MiB latent cache, scores of
# 4 MiB and a few MiB beside them.
# (B, H, N_q, N, r, d_nope, d_rope, d_v)
ABSORBED_MEMORY_CASE = (1, 64, 1, 16384, 32, 32, 2, 32)
ABSORBED_MEMORY_ALLOWED = 80 * 2**20  # held and added during the call
CHECKED_HEADS = 2  # compared with the reference (all of them would cost it the up-projection)


@pytest.mark.ex13_2
@pytest.mark.points(2)
def test_mla_attention_absorbed_never_up_projects_the_cache(nb):
    """The absorbed decode attends over the latent cache itself: no (B, H, N, d) keys or values."""
    B, H, N_q, N, r, d_nope, d_rope, d_v = ABSORBED_MEMORY_CASE
    args = mla_inputs(B, H, N_q, N, r, d_nope, d_rope, d_v, torch.float32, seed=3)
    call = call_text("mla_attention_absorbed", *args)
    try:
        with peak_memory(nb) as peak:
            got = nb.mla_attention_absorbed(*args)
    except Unmeasurable as exc:
        pytest.skip(f"memory cannot be measured here: {exc}")
    q_nope, q_pe, c_kv, k_pe, w_uk, w_uv = args
    heads = slice(0, CHECKED_HEADS)
    expected = ref.mla_attention_fp64(q_nope[:, heads], q_pe[:, heads], c_kv, k_pe, w_uk[heads], w_uv[heads])
    got_heads = got[:, heads] if isinstance(got, torch.Tensor) and got.dim() == 4 else got
    assert_close(got_heads, expected, call, atol=ATOL[torch.float32], rtol=RTOL[torch.float32], dtype=torch.float32,
                 what=f"the first {CHECKED_HEADS} heads")
    if peak.bytes > ABSORBED_MEMORY_ALLOWED:
        mib = 2**20
        raise GradingFailure(
            f"{call} used {peak.bytes / mib:.0f} MiB ({peak.held / mib:.0f} MiB held when it started, "
            f"{peak.charged / mib:.0f} MiB more at its peak, measured by the {peak.how}); the keys up-projected "
            f"from the cache are {B * H * N * d_nope * 4 / mib:.0f} MiB, and attending over the latent cache "
            f"itself needs no more than {ABSORBED_MEMORY_ALLOWED / mib:.0f} MiB",
            # what diagnosis compares: the bound, not the measured MiB, which move from run to run
            {"kind": "message", "text": f"{call} used more than {ABSORBED_MEMORY_ALLOWED / mib:.0f} MiB"})


@pytest.mark.ex13_2
@pytest.mark.parametrize("index", range(len(mla_bad_inputs())), ids=[c[-1] for c in mla_bad_inputs()])
def test_mla_attention_absorbed_rejects_bad_input(nb, index):
    args, exc, names, _ = mla_bad_inputs()[index]
    assert_raises(nb.mla_attention_absorbed, *args, exc=exc, names=names)


# -- Exercise 13.3 ----------------------------------------------------------------------

DEEPSEEK_V3 = {"num_attention_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "v_head_dim": 128}
# Every size different, so that each term of the count is seen apart from the others.
SMALL_MLA = {"num_attention_heads": 3, "kv_lora_rank": 5, "qk_nope_head_dim": 7, "qk_rope_head_dim": 2,
             "v_head_dim": 11}
LLAMA_70B = {"num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}
SMALL_GQA = {"num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 5}

# (name, config, seq_len, mode, query_tokens, dtype_bytes)
COST_CASES = [
    ("v3-N32768-naive-s1", DEEPSEEK_V3, 32768, "naive", 1, 2),
    ("v3-N32768-absorbed-s1", DEEPSEEK_V3, 32768, "absorbed", 1, 2),
    ("v3-N4096-absorbed-s4-fp8", DEEPSEEK_V3, 4096, "absorbed", 4, 1),
    ("small-N13-naive-s3", SMALL_MLA, 13, "naive", 3, 2),
    ("small-N13-absorbed-s3", SMALL_MLA, 13, "absorbed", 3, 4),
    ("small-N1-absorbed-s1", SMALL_MLA, 1, "absorbed", 1, 2),
    ("llama70b-N32768-gqa-s1", LLAMA_70B, 32768, "gqa", 1, 2),
    ("small-gqa-N9-s2", SMALL_GQA, 9, "gqa", 2, 4),
]


@pytest.mark.ex13_3
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("case", COST_CASES, ids=[c[0] for c in COST_CASES])
def test_decode_step_cost(nb, case):
    _name, config, seq_len, mode, query_tokens, dtype_bytes = case
    call = call_text("decode_step_cost", config, seq_len, mode, query_tokens=query_tokens, dtype_bytes=dtype_bytes)
    got = nb.decode_step_cost(dict(config), seq_len, mode, query_tokens=query_tokens, dtype_bytes=dtype_bytes)
    if not (isinstance(got, tuple) and len(got) == 2 and all(type(x) is int for x in got)):
        raise GradingFailure(f"{call} returned {got!r}; expected the tuple (flops, bytes) of two Python ints")
    expected = ref.decode_step_cost(config, seq_len, mode, query_tokens, dtype_bytes)
    assert_equal(got[0], expected[0], call + " [flops]")
    assert_equal(got[1], expected[1], call + " [bytes]")


@pytest.mark.ex13_3
@pytest.mark.parametrize(
    "args,exc,names",
    [((DEEPSEEK_V3, 100, "mha"), ValueError, "mode"), ((LLAMA_70B, 100, "absorbed"), ValueError, "config"),
     ((list(DEEPSEEK_V3), 100, "naive"), TypeError, "config"), ((DEEPSEEK_V3, 0, "naive"), ValueError, "seq_len"),
     ((DEEPSEEK_V3, 100, "naive", 1.0), TypeError, "query_tokens"),
     ((DEEPSEEK_V3, 100, "naive", 1, 0), ValueError, "dtype_bytes"), ((DEEPSEEK_V3, 100, "gqa"), ValueError, "config"),
     (({**DEEPSEEK_V3, "num_attention_heads": 0}, 100, "absorbed"), ValueError, "num_attention_heads"),
     (({**DEEPSEEK_V3, "kv_lora_rank": 512.0}, 100, "absorbed"), TypeError, "kv_lora_rank")],
    ids=["unknown-mode", "gqa-config-for-mla", "list-config", "zero-seq_len", "float-query_tokens",
         "zero-dtype_bytes", "mla-config-for-gqa", "zero-heads", "float-kv_lora_rank"],
)
def test_decode_step_cost_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.decode_step_cost, *args, exc=exc, names=names)


# -- Exercise 13.4 ----------------------------------------------------------------------

FULL = {"kind": "full", "num_kv_heads": 8, "head_dim": 128}
SLIDING = {"kind": "sliding", "num_kv_heads": 8, "head_dim": 128, "window": 4096}
LATENT = {"kind": "latent", "kv_lora_rank": 512, "rope_head_dim": 64}
RECURRENT = {"kind": "recurrent", "num_heads": 16, "key_dim": 128, "value_dim": 256}

# (name, layers, seq_len, batch_size, dtype_bytes)
STACKS = [
    ("gemma-like-5-sliding-1-full-N32768", [SLIDING] * 5 + [FULL], 32768, 1, 2),
    ("window-longer-than-the-sequence-N1000", [SLIDING, FULL], 1000, 2, 2),
    ("yoco-like-shared-N8192", [SLIDING, SLIDING, FULL, {"kind": "shared", "source": 2},
                                {"kind": "shared", "source": 2}, {"kind": "shared", "source": 0}], 8192, 3, 2),
    ("hybrid-recurrent-latent-N65536", [RECURRENT, RECURRENT, RECURRENT, LATENT] * 2, 65536, 1, 1),
    ("empty-sequence", [FULL, SLIDING, LATENT, RECURRENT, {"kind": "shared", "source": 0}], 0, 1, 2),
    ("odd-sizes-N77", [{"kind": "sliding", "num_kv_heads": 3, "head_dim": 5, "window": 76},
                       {"kind": "latent", "kv_lora_rank": 7, "rope_head_dim": 2},
                       {"kind": "recurrent", "num_heads": 2, "key_dim": 3, "value_dim": 5}], 77, 2, 4),
]


@pytest.mark.ex13_4
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("case", STACKS, ids=[c[0] for c in STACKS])
def test_stack_kv_bytes(nb, case):
    _name, layers, seq_len, batch_size, dtype_bytes = case
    call = call_text("stack_kv_bytes", layers, seq_len, batch_size, dtype_bytes)
    got = nb.stack_kv_bytes([dict(layer) for layer in layers], seq_len, batch_size, dtype_bytes)
    if not (isinstance(got, list) and all(type(x) is int for x in got)):
        raise GradingFailure(f"{call} returned {got!r}; expected a list of Python ints, one per layer")
    assert_equal(got, ref.stack_kv_bytes(layers, seq_len, batch_size, dtype_bytes), call + " (bytes per layer)")


@pytest.mark.ex13_4
@pytest.mark.parametrize(
    "layers,seq_len,batch_size,dtype_bytes,exc,names",
    [([FULL, {"kind": "shared", "source": 1}], 10, 1, 2, ValueError, "layers"),
     ([FULL, {"kind": "shared", "source": 0}, {"kind": "shared", "source": 1}], 10, 1, 2, ValueError, "layers"),
     ([{"kind": "global", "num_kv_heads": 8, "head_dim": 128}], 10, 1, 2, ValueError, "layers"),
     ([{"kind": "sliding", "num_kv_heads": 8, "head_dim": 128}], 10, 1, 2, ValueError, "layers"),
     ([], 10, 1, 2, ValueError, "layers"), ((FULL,), 10, 1, 2, TypeError, "layers"),
     ([{**SLIDING, "window": 0}], 10, 1, 2, ValueError, "window"), ([FULL], -1, 1, 2, ValueError, "seq_len"),
     # -2 would be the sliding layer if read from the end of the list, as Python's indexing reads it
     ([FULL, SLIDING, {"kind": "shared", "source": -2}], 10, 1, 2, ValueError, "source"),
     ([FULL], 10, 0, 2, ValueError, "batch_size"), ([FULL, "full"], 10, 1, 2, TypeError, "layers"),
     ([FULL], 10, 1, 0, ValueError, "dtype_bytes")],
    ids=["shared-source-later", "shared-of-shared", "unknown-kind", "missing-window", "empty", "tuple",
         "zero-window", "negative-seq_len", "negative-source", "zero-batch_size", "a-layer-that-is-no-dict",
         "zero-dtype_bytes"],
)
def test_stack_kv_bytes_rejects_bad_input(nb, layers, seq_len, batch_size, dtype_bytes, exc, names):
    assert_raises(nb.stack_kv_bytes, layers, seq_len, batch_size, dtype_bytes, exc=exc, names=names)


# -- Exercise 13.5 ----------------------------------------------------------------------

GQA8 = {"attention": "gqa", "num_key_value_heads": 8, "head_dim": 128}
MQA = {"attention": "gqa", "num_key_value_heads": 1, "head_dim": 128}
MLA = {"attention": "mla", "kv_lora_rank": 512, "qk_rope_head_dim": 64}

# (name, config, tp_size, seq_len, dcp_size, dtype_bytes)
RANK_CASES = [
    ("gqa8-tp2", GQA8, 2, 4096, 1, 2),
    ("gqa8-tp8", GQA8, 8, 4096, 1, 2),
    ("gqa8-tp16", GQA8, 16, 4096, 1, 2),
    ("gqa8-tp16-dcp2-N1001", GQA8, 16, 1001, 2, 2),
    ("mqa-tp8-dcp4-N1001", MQA, 8, 1001, 4, 2),
    ("mla-tp4", MLA, 4, 4096, 1, 2),
    ("mla-tp8-dcp8-N1001", MLA, 8, 1001, 8, 2),
    ("mla-tp16-dcp4-N13-fp8", MLA, 16, 13, 4, 1),
    ("gqa-odd-Hkv3-d5-tp6-dcp2-N7", {"attention": "gqa", "num_key_value_heads": 3, "head_dim": 5}, 6, 7, 2, 4),
]


@pytest.mark.ex13_5
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("case", RANK_CASES, ids=[c[0] for c in RANK_CASES])
def test_kv_bytes_per_rank(nb, case):
    _name, config, tp_size, seq_len, dcp_size, dtype_bytes = case
    call = call_text("kv_bytes_per_rank", config, tp_size, seq_len, dcp_size, dtype_bytes)
    got = nb.kv_bytes_per_rank(dict(config), tp_size, seq_len, dcp_size, dtype_bytes)
    if not (isinstance(got, list) and all(type(x) is int for x in got)):
        raise GradingFailure(f"{call} returned {got!r}; expected a list of Python ints, one per rank")
    assert_equal(got, ref.kv_bytes_per_rank(config, tp_size, seq_len, dcp_size, dtype_bytes),
                 call + " (bytes on each rank)")


@pytest.mark.ex13_5
@pytest.mark.parametrize(
    "args,exc,names",
    [((GQA8, 3, 100), ValueError, "tp_size"), ((MLA, 8, 100, 3), ValueError, "dcp_size"),
     ((GQA8, 4, 100, 2), ValueError, "dcp_size"), (({"attention": "mha", "head_dim": 8}, 2, 100), ValueError, "config"),
     (({"attention": "mla", "kv_lora_rank": 512}, 2, 100), ValueError, "config"),
     ((MLA, 0, 100), ValueError, "tp_size"), ((MLA, 2, 100.0), TypeError, "seq_len"),
     ((["mla", 512, 64], 2, 100), TypeError, "config"), ((MLA, 2, 100, 0), ValueError, "dcp_size"),
     ((MLA, 2, 100, 1, 0), ValueError, "dtype_bytes")],
    ids=["tp-not-dividing", "dcp-not-dividing-mla", "dcp-without-duplication", "unknown-attention",
         "missing-rope-key", "zero-tp", "float-seq_len", "list-config", "zero-dcp_size", "zero-dtype_bytes"],
)
def test_kv_bytes_per_rank_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.kv_bytes_per_rank, *args, exc=exc, names=names)


# -- Exercise 13.6: real gloo processes --------------------------------------------------

# (name, B, H, s, seq_len, kv_lora_rank, d_rope, value scale, d_nope, dtype): the softmax scale is the
# model's 1/sqrt(d_nope + d_rope), which the rows' width r + d_rope does not tell; d_nope = r gives
# 1/sqrt(D), the scale a function that ignores its argument assumes, so the last cases differ.
DCP_CASES = [
    ("decode-s1-N10-fp32", 1, 4, 1, 10, 8, 4, 1.0, 8, torch.float32),
    ("three-queries-s3-N11-fp32", 2, 2, 3, 11, 6, 2, 1.0, 6, torch.float32),
    ("large-logits-s2-N9-fp32", 1, 2, 2, 9, 8, 2, 10.0, 8, torch.float32),
    ("three-queries-s3-N8-fp64", 1, 3, 3, 8, 4, 4, 1.0, 4, torch.float64),
    ("model-scale-nope3-s2-N9-fp64", 1, 2, 2, 9, 8, 2, 1.0, 3, torch.float64),
    # the first query sits at position 0: on every rank but rank 0 it sees no row
    ("prefill-from-position-0-s4-N4-fp32", 1, 2, 4, 4, 6, 2, 1.0, 6, torch.float32),
    # fewer tokens than ranks: on 3 ranks, rank 2 holds no row at all
    ("fewer-tokens-than-ranks-s2-N2-fp64", 2, 2, 2, 2, 4, 2, 1.0, 4, torch.float64),
]


def dcp_inputs(P):
    """For every case: the queries, the whole cache and each rank's (args, kwargs)."""
    cases, calls = [], [[] for _ in range(P)]
    for i, (name, B, H, s, N, r, d_rope, scale, d_nope, dtype) in enumerate(DCP_CASES):
        D = r + d_rope
        q = randn(B, H, s, D, dtype=dtype, seed=10 * i + P, scale=scale)
        kv = randn(B, N, D, dtype=dtype, seed=10 * i + P + 1, scale=scale)
        softmax_scale = 1 / math.sqrt(d_nope + d_rope)
        cases.append((q, kv, N, r, softmax_scale))
        for rank in range(P):
            rows = ref.dcp_positions(N, P, rank)
            calls[rank].append(((q.clone(), kv[:, rows].clone(), N, r, softmax_scale), {}))
    return cases, calls


def check_dcp(nb, P):
    cases, calls = dcp_inputs(P)
    results = run_ranks(nb, "dcp_attention", P, calls, op_timeout=OP_TIMEOUT_S, timeout=RUN_TIMEOUT_S)
    try:
        raise_for_failures(results)
    except RanksFailed as exc:
        if exc.not_implemented:
            raise NotImplementedError(str(exc)) from None
        deadlock = {"kind": "message", "text": f"dcp_attention on {P} gloo processes: deadlock"}
        observed = deadlock if exc.deadlock else None
        raise GradingFailure(f"dcp_attention on {P} gloo processes did not finish:\n{exc}", observed) from None
    for i, ((name, *_rest, dtype), (q, kv, N, r, softmax_scale)) in enumerate(zip(DCP_CASES, cases)):
        expected = ref.dcp_reference(q, kv, N, r, softmax_scale)
        atol = lse_atol(expected, dtype)
        for res in results:
            args, _ = calls[res.rank][i]
            call = f"rank {res.rank} of {P}: " + call_text("dcp_attention", *args) + f" [{name}]"
            got = res.calls[i].value
            if not isinstance(got, tuple) or len(got) != 2:
                raise GradingFailure(f"{call} returned {type(got).__name__}; expected the tuple (out, lse)")
            assert_close(got[0], expected[0], call + " [out]", atol=atol, rtol=RTOL[dtype], dtype=dtype)
            assert_close(got[1], expected[1], call + " [lse]", atol=atol, rtol=RTOL[dtype], dtype=dtype)


@pytest.mark.ex13_6
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.timeout(RUN_TIMEOUT_S + 25)
def test_dcp_attention_on_3_gloo_processes(nb):
    check_dcp(nb, 3)


@pytest.mark.ex13_6
@pytest.mark.points(2)
@pytest.mark.timeout(RUN_TIMEOUT_S + 25)
def test_dcp_attention_on_2_gloo_processes(nb):
    check_dcp(nb, 2)


def dcp_bad_inputs():
    """Arguments the statement says are checked before the process group: the grader's own
    process has none, so each must raise its own error, not the RuntimeError."""
    q, kv = randn(1, 2, 1, 6), randn(1, 4, 6)
    return [
        ((q.tolist(), kv, 4, 4, 0.5), TypeError, "q", "list-q"),
        ((q[0], kv, 4, 4, 0.5), ValueError, "q", "3d-q"),
        ((randn(1, 2, 5, 6), kv, 4, 4, 0.5), ValueError, "q", "more-queries-than-tokens"),
        ((q, kv[0], 4, 4, 0.5), ValueError, "kv", "2d-kv"),
        ((q, kv, 4, 7, 0.5), ValueError, "kv_lora_rank", "kv_lora_rank-wider-than-the-rows"),
        ((q, kv, 4, 4.0, 0.5), TypeError, "kv_lora_rank", "float-kv_lora_rank"),
        ((q, kv, 0, 4, 0.5), ValueError, "seq_len", "zero-seq_len"),
    ]


@pytest.mark.ex13_6
@pytest.mark.parametrize("index", range(len(dcp_bad_inputs())), ids=[c[-1] for c in dcp_bad_inputs()])
def test_dcp_attention_rejects_bad_input(nb, index):
    args, exc, names, _ = dcp_bad_inputs()[index]
    assert_raises(nb.dcp_attention, *args, exc=exc, names=names)


@pytest.mark.ex13_6
def test_dcp_attention_needs_a_process_group(nb):
    """In the grader's own process no process group is initialised: the statement's RuntimeError."""
    q, kv = randn(1, 2, 1, 6), randn(1, 4, 6)
    assert_raises(nb.dcp_attention, q, kv, 4, 4, 0.5, exc=RuntimeError)
