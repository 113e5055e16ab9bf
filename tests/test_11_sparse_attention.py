"""Graders for Chapter 11 (exercises/11_sparse_attention.ipynb) against tests/references.

Numbers are compared with dense attention in fp64 and with Python loops
(tests/references/ref_11_sparse_attention.py); selections are compared exactly, index
by index, on inputs where every choice the grader checks is decided by a margin far
above rounding, or by an exact tie that the statement breaks (the lower index wins).
"""

import math

import pytest
import torch

from grading.alternatives import heads_grouped_modulo, recognise, record_alternatives
from grading.compare import GradingFailure, assert_close, assert_equal, assert_raises, call_text
from tests.references import ref_11_sparse_attention as ref

DTYPES = {"fp32": torch.float32, "fp64": torch.float64}
# A correct fp32 implementation of 11.1, 11.2, 11.6 is a softmax over at most a few
# hundred keys of scores of order 1 to 10 and one weighted sum: its error against the
# fp64 loop is below 1e-6 on these cases (the solution's largest: 2.4e-7 on
# h2o_scores, whose sums reach about 40); 1e-5 relative and absolute leaves 10x.
# fp64: the same operations at 2**-52, summed in another order than math.fsum.
ATOL = {torch.float32: 1e-5, torch.float64: 1e-12}
RTOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def randn(*shape, dtype=torch.float64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def check_index(got, expected, call, what="the indices", rows=("batch", "KV head"), unit="positions", alternatives=()):
    """got must be an int64 tensor (bool for a gate) equal to expected, element by element.

    A wrong row is reported as a selection, in the row's own terms (``rows`` names its
    leading dimensions, ``unit`` what the last one counts): which were kept that should
    have been dropped, and which were dropped that should have been kept. A wrong
    selection equal to one of ``alternatives`` (grading.diagnosis) is recognised as
    that kind of mistake."""
    if not isinstance(got, torch.Tensor):
        raise GradingFailure(f"{call} returned {type(got).__name__}; expected an int64 tensor")
    if tuple(got.shape) != tuple(expected.shape):
        raise GradingFailure(f"{call}: {what} have shape {tuple(got.shape)}; expected {tuple(expected.shape)}")
    if got.dtype != expected.dtype:
        raise GradingFailure(f"{call}: {what} have dtype {got.dtype}; expected {expected.dtype}")
    bad = got != expected
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        row = idx[:-1]
        where = ", ".join(f"{name} {i}" for name, i in zip(rows, row))
        raise GradingFailure(f"{call}: {what} are wrong at {int(bad.sum())} of {bad.numel()} places; first in "
                             f"{where}{selection_difference(got[row], expected[row], unit)}\n"
                             f"  expected: {expected[row].tolist()}\n  got:      {got[row].tolist()}",
                             finding=recognise(got, alternatives, same_selection))
    record_alternatives(alternatives)


def same_selection(got, expected):
    return isinstance(expected, torch.Tensor) and got.dtype == expected.dtype and torch.equal(got, expected)


def grouped_modulo(reference, args, H, H_kv, heads, out_axis, key):
    """The alternative "query head h reads KV head h % H_kv" (the grouping `repeat` gives)
    of a check under GQA: ``heads`` maps each argument given per query head to its head
    axis; ``out_axis`` is the result's query-head axis (None: one result per KV head)."""
    return [heads_grouped_modulo(reference, args, H, H_kv, heads, out_axis, key=key)]


def selection_difference(got_row, expected_row, unit):
    """``: kept positions [..] that should have been dropped; dropped [..] that should
    have been kept``, or nothing where the two rows select the same set (the order or a
    padding entry differs). A bool row (a gate) selects the places where it is True;
    an index row selects its entries >= 0 (-1 pads a short row)."""
    def chosen(row):
        values = row.nonzero().flatten().tolist() if row.dtype == torch.bool else row.tolist()
        return {v for v in values if v >= 0}

    got, expected = chosen(got_row), chosen(expected_row)
    extra, missing = sorted(got - expected), sorted(expected - got)
    parts = []
    if extra:
        parts.append(f"kept {unit} {extra} that should have been dropped")
    if missing:
        parts.append(f"dropped {unit} {missing} that should have been kept")
    return ": " + "; ".join(parts) if parts else ""


# -- Exercise 11.1 ----------------------------------------------------------------------
MASS_CASES = [
    # id, shape, k, mask kind, scale
    ("Nq1-Nk10-k3", (1, 10), 3, None, 1.0),
    ("H2-Nq6-Nk40-k5-scale4", (2, 6, 40), 5, None, 4.0),
    ("B2-H3-Nq9-Nk9-k2-causal", (2, 3, 9, 9), 2, "causal", 2.0),
    ("Nq12-Nk12-k4-causal-rows-shorter-than-k", (12, 12), 4, "causal", 1.0),
    ("Nq5-Nk30-k1-banded", (5, 30), 1, "band", 3.0),
    ("Nq4-Nk7-k7-everything", (4, 7), 7, None, 1.0),
    ("Nq3-Nk8-k20-k-above-Nk", (3, 8), 20, None, 1.0),
]


def _mask(kind, N_q, N_k):
    if kind is None:
        return None
    q = torch.arange(N_q)[:, None]
    j = torch.arange(N_k)[None, :]
    if kind == "causal":
        return j <= q
    return (j >= 5 * q) & (j < 5 * q + 8)  # each row sees its own 8 keys


@pytest.mark.ex11_1
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,shape,k,kind,scale", MASS_CASES, ids=[c[0] for c in MASS_CASES])
def test_attention_mass_topk(nb, name, shape, k, kind, scale, dtype_name):
    dtype = DTYPES[dtype_name]
    scores = randn(*shape, dtype=dtype, seed=len(name), scale=scale)
    mask = _mask(kind, *shape[-2:])
    call = call_text("attention_mass_topk", scores, k, mask=mask)
    got = nb.attention_mass_topk(scores, k, mask=mask)
    assert_close(got, ref.attention_mass_topk(scores, k, mask), call, atol=1e-12, rtol=1e-12, dtype=torch.float64,
                 what="the mass (computed in float64)")


@pytest.mark.ex11_1
def test_attention_mass_topk_ignores_masked_keys_even_when_large(nb):
    scores = torch.tensor([[50.0, 1.0, 0.0, -1.0], [0.0, 0.0, 50.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[False, True, True, True], [True, True, False, True]])
    call = call_text("attention_mass_topk", scores, 1, mask=mask) + " (a large score behind the mask)"
    assert_close(nb.attention_mass_topk(scores, 1, mask=mask), ref.attention_mass_topk(scores, 1, mask), call,
                 atol=1e-12, dtype=torch.float64)


@pytest.mark.ex11_1
@pytest.mark.parametrize("case,exc,names", [
    ("scores-int", TypeError, "scores"), ("scores-1d", ValueError, "scores"), ("k-zero", ValueError, "k"),
    ("k-float", TypeError, "k"), ("mask-float", TypeError, "mask"), ("mask-shape", ValueError, "mask"),
    ("mask-empty-row", ValueError, "mask"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_attention_mass_topk_rejects_bad_input(nb, case, exc, names):
    scores, k, mask = torch.zeros(3, 4), 2, None
    scores, k, mask = {
        "scores-int": (torch.zeros(3, 4, dtype=torch.int64), k, mask), "scores-1d": (torch.zeros(4), k, mask),
        "k-zero": (scores, 0, mask), "k-float": (scores, 2.0, mask),
        "mask-float": (scores, k, torch.ones(3, 4)), "mask-shape": (scores, k, torch.ones(4, 3, dtype=torch.bool)),
        "mask-empty-row": (scores, k, torch.tensor([[True] * 4, [False] * 4, [True] * 4])),
    }[case]
    assert_raises(nb.attention_mass_topk, scores, k, mask=mask, exc=exc, names=names,
                  call=f"attention_mass_topk({case})")


# -- Exercise 11.2 ----------------------------------------------------------------------
H2O_CASES = [
    # id, B, H, H_kv, N, d, block_size, scale
    ("B1-H1-N7-d4-block3", 1, 1, 1, 7, 4, 3, 1.0),
    ("B2-H4-Hkv2-N33-d8-block8", 2, 4, 2, 33, 8, 8, 1.0),
    ("B1-H6-Hkv2-N40-d16-block64", 1, 6, 2, 40, 16, 64, 2.0),
    ("B1-H2-Hkv1-N25-d8-block1", 1, 2, 1, 25, 8, 1, 1.0),
    ("B1-H3-Hkv3-N50-d8-block7-large-logits", 1, 3, 3, 50, 8, 7, 3.0),
]


@pytest.mark.ex11_2
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H,H_kv,N,d,block,scale", H2O_CASES, ids=[c[0] for c in H2O_CASES])
def test_h2o_scores(nb, name, B, H, H_kv, N, d, block, scale, dtype_name):
    dtype = DTYPES[dtype_name]
    q = randn(B, H, N, d, seed=N, scale=scale)
    k = randn(B, H_kv, N, d, seed=N + 1, scale=scale)
    lse = ref.causal_lse(q, k)
    q, k, lse = q.to(dtype), k.to(dtype), lse.to(dtype)
    expected = ref.h2o_scores(q, k, lse)
    call = call_text("h2o_scores", q, k, lse, block_size=block)
    got = nb.h2o_scores(q, k, lse, block_size=block)
    assert_close(got, expected, call, atol=ATOL[dtype] * 4, rtol=RTOL[dtype] * 4, dtype=dtype,
                 alternatives=grouped_modulo(ref.h2o_scores, (q, k, lse), H, H_kv, {0: 1, 2: 1}, 1,
                                             ("h2o", name, dtype_name)))


@pytest.mark.ex11_2
def test_h2o_scores_uses_the_given_lse(nb):
    """The scores are probabilities under the lse the caller gives (here the true one plus
    log 2, so every score is halved): a kernel that renormalises on its own is wrong."""
    q, k = randn(1, 2, 12, 8, seed=3), randn(1, 1, 12, 8, seed=4)
    lse = ref.causal_lse(q, k) + math.log(2.0)
    call = call_text("h2o_scores", q, k, lse, block_size=4) + " (lse + log 2)"
    assert_close(nb.h2o_scores(q, k, lse, block_size=4), ref.h2o_scores(q, k, lse), call, atol=1e-12, rtol=1e-12,
                 dtype=torch.float64)


@pytest.mark.ex11_2
@pytest.mark.parametrize("case,exc,names", [
    ("q-int", TypeError, "q"), ("q-3d", ValueError, "q"), ("k-dtype", TypeError, "k"), ("k-length", ValueError, "k"),
    ("k-heads", ValueError, "k"), ("lse-shape", ValueError, "lse"), ("lse-int", TypeError, "lse"),
    ("block-zero", ValueError, "block_size"), ("block-float", TypeError, "block_size"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_h2o_scores_rejects_bad_input(nb, case, exc, names):
    q, k, lse, block = torch.zeros(1, 4, 6, 8), torch.zeros(1, 2, 6, 8), torch.zeros(1, 4, 6), 2
    q, k, lse, block = {
        "q-int": (q.long(), k, lse, block), "q-3d": (q[0], k, lse, block), "k-dtype": (q, k.double(), lse, block),
        "k-length": (q, torch.zeros(1, 2, 5, 8), lse, block), "k-heads": (q, torch.zeros(1, 3, 6, 8), lse, block),
        "lse-shape": (q, k, torch.zeros(1, 4, 5), block), "lse-int": (q, k, lse.long(), block),
        "block-zero": (q, k, lse, 0), "block-float": (q, k, lse, 2.0),
    }[case]
    assert_raises(nb.h2o_scores, q, k, lse, block_size=block, exc=exc, names=names, call=f"h2o_scores({case})")


# -- Exercise 11.3 ----------------------------------------------------------------------
SNAP_CASES = [
    # id, B, H, H_kv, N, w, d, budget, kernel, scale
    ("B1-H1-N20-w4-budget8-kernel1", 1, 1, 1, 20, 4, 8, 8, 1, 2.0),
    ("B1-H4-Hkv2-N48-w8-budget16-kernel5", 1, 4, 2, 48, 8, 16, 16, 5, 2.0),
    ("B2-H6-Hkv3-N64-w6-budget20-kernel3", 2, 6, 3, 64, 6, 8, 20, 3, 1.5),
    ("B1-H9-Hkv3-N40-w5-budget9-kernel7", 1, 9, 3, 40, 5, 16, 9, 7, 2.0),
    ("B1-H2-Hkv1-N30-w30-budget31-everything", 1, 2, 1, 30, 29, 8, 31, 5, 1.0),
]


def snap_inputs(B, H, H_kv, N, w, d, scale, seed):
    """Queries that look like some keys, so that the votes have clear winners."""
    k = randn(B, H_kv, N, d, seed=seed, scale=1.0)
    base = randn(B, H, w, d, seed=seed + 1, scale=0.3)
    G = H // H_kv
    targets = torch.randint(0, N, (B, H, w), generator=torch.Generator().manual_seed(seed + 2))
    for b in range(B):
        for h in range(H):
            for r in range(w):
                base[b, h, r] += scale * k[b, h // G, int(targets[b, h, r])]
    return base, k


@pytest.mark.ex11_3
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H,H_kv,N,w,d,budget,kernel,scale", SNAP_CASES, ids=[c[0] for c in SNAP_CASES])
def test_snapkv_select(nb, name, B, H, H_kv, N, w, d, budget, kernel, scale, dtype_name):
    dtype = DTYPES[dtype_name]
    q_obs, k = snap_inputs(B, H, H_kv, N, w, d, scale, seed=N + w)
    q_obs, k = q_obs.to(dtype), k.to(dtype)
    call = call_text("snapkv_select", q_obs, k, budget, kernel_size=kernel)
    check_index(nb.snapkv_select(q_obs, k, budget, kernel_size=kernel), ref.snapkv_select(q_obs, k, budget, kernel),
                call,
                alternatives=grouped_modulo(ref.snapkv_select, (q_obs, k, budget, kernel), H, H_kv, {0: 1}, None,
                                            ("snapkv", name, dtype_name)))


# Plain random queries, as a real prompt gives: no query points at one key, so the votes
# are spread and the budget's edge is close. Each seed was chosen so that the kept set
# is decided, in float32 and float64 inputs alike, by a margin above 1e-4 of the votes
# (a correct float64 vote is exact to about 1e-15) or by an exact tie that the pooling
# makes (one vote copied to its neighbours; the lower position wins), and so that the
# mistakes the didactic cases cannot see change it: the grouped heads' rows given the
# positions in the wrong order, the window's own votes pooled into the last candidates,
# and each query placed one position early (unable to see its own key).
SNAP_RANDOM_CASES = [
    # id, B, H, H_kv, N, w, d, budget, kernel, scale, seed
    ("B1-H6-Hkv2-N48-w8-d16-budget20-kernel3-tie-at-the-edge", 1, 6, 2, 48, 8, 16, 20, 3, 1.5, 16),
    ("B1-H4-Hkv2-N40-w6-d8-budget14-kernel5-tie-at-the-edge", 1, 4, 2, 40, 6, 8, 14, 5, 1.0, 23),
    ("B2-H4-Hkv1-N32-w5-d8-budget12-kernel7", 2, 4, 1, 32, 5, 8, 12, 7, 2.0, 13),
]


@pytest.mark.ex11_3
@pytest.mark.points(2)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H,H_kv,N,w,d,budget,kernel,scale,seed", SNAP_RANDOM_CASES,
                         ids=[c[0] for c in SNAP_RANDOM_CASES])
def test_snapkv_select_random_queries(nb, name, B, H, H_kv, N, w, d, budget, kernel, scale, seed, dtype_name):
    dtype = DTYPES[dtype_name]
    q_obs = randn(B, H, w, d, dtype=dtype, seed=seed, scale=scale)
    k = randn(B, H_kv, N, d, dtype=dtype, seed=seed + 1)
    call = call_text("snapkv_select", q_obs, k, budget, kernel_size=kernel) + " (random queries)"
    check_index(nb.snapkv_select(q_obs, k, budget, kernel_size=kernel), ref.snapkv_select(q_obs, k, budget, kernel),
                call,
                alternatives=grouped_modulo(ref.snapkv_select, (q_obs, k, budget, kernel), H, H_kv, {0: 1}, None,
                                            ("snapkv-random", name, dtype_name)))


@pytest.mark.ex11_3
@pytest.mark.points(2)
def test_snapkv_select_breaks_ties_by_position(nb):
    """Zero queries: every visible key gets the same probability, so every candidate has
    the same vote, exactly; the lowest positions must win."""
    q_obs, k = torch.zeros(1, 2, 4, 8, dtype=torch.float64), randn(1, 1, 24, 8, seed=5)
    call = call_text("snapkv_select", q_obs, k, 10, kernel_size=3) + " (every vote equal)"
    check_index(nb.snapkv_select(q_obs, k, 10, kernel_size=3), ref.snapkv_select(q_obs, k, 10, 3), call)


@pytest.mark.ex11_3
def test_snapkv_select_window_queries_see_their_own_keys(nb):
    """Query N - w + r sees key N - w + r, its own. Unit keys, so each score is chosen:
    query 10 puts almost all its mass on its own key 10 and a little on candidate 2;
    query 11 gives candidate 5 about a third of its mass. Candidate 5 has the larger
    vote (0.29 to 0.08) and takes the one place. A query that cannot see its own key
    (each placed one position early) gives candidate 2 almost half of its mass instead,
    and candidate 2 wins (0.52 to 0.37)."""
    N, w, d = 12, 2, 16
    k = torch.eye(d, dtype=torch.float64)[:N][None, None]  # (1, 1, 12, 16): key j is the unit vector e_j
    scores = torch.zeros(1, 1, w, d, dtype=torch.float64)  # the score each query gives each key
    scores[0, 0, 0, 10], scores[0, 0, 0, 2] = 6.0, 2.0  # query 10: its own key, and a little of candidate 2
    scores[0, 0, 1, 5] = 1.5  # query 11: candidate 5
    q_obs = scores * math.sqrt(d)
    call = call_text("snapkv_select", q_obs, k, 3, kernel_size=1) + " (query 10 looks mostly at its own key)"
    check_index(nb.snapkv_select(q_obs, k, 3, kernel_size=1), ref.snapkv_select(q_obs, k, 3, 1), call)


@pytest.mark.ex11_3
@pytest.mark.points(2)
def test_snapkv_select_is_one_choice_per_kv_head(nb):
    """Two query heads of one KV head that want different keys: the group votes together."""
    k = randn(1, 1, 32, 16, seed=6)
    q_obs = torch.stack([k[0, 0, [3, 3, 3]] * 4, k[0, 0, [17, 17, 17]] * 4])[None]  # (1, 2, 3, 16)
    q_obs = q_obs + randn(1, 2, 3, 16, seed=7, scale=0.1)
    call = call_text("snapkv_select", q_obs, k, 7, kernel_size=1) + " (two heads of one group, each after one key)"
    check_index(nb.snapkv_select(q_obs, k, 7, kernel_size=1), ref.snapkv_select(q_obs, k, 7, 1), call)


@pytest.mark.ex11_3
@pytest.mark.parametrize("case,exc,names", [
    ("q-int", TypeError, "q_obs"), ("q-3d", ValueError, "q_obs"), ("k-dtype", TypeError, "k"),
    ("k-heads", ValueError, "k"), ("window-longer", ValueError, "q_obs"), ("budget-at-window", ValueError, "budget"),
    ("budget-float", TypeError, "budget"), ("kernel-even", ValueError, "kernel_size"),
    ("kernel-zero", ValueError, "kernel_size"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_snapkv_select_rejects_bad_input(nb, case, exc, names):
    q, k, budget, kernel = torch.zeros(1, 4, 3, 8), torch.zeros(1, 2, 10, 8), 6, 3
    q, k, budget, kernel = {
        "q-int": (q.long(), k, budget, kernel), "q-3d": (q[0], k, budget, kernel),
        "k-dtype": (q, k.double(), budget, kernel), "k-heads": (q, torch.zeros(1, 3, 10, 8), budget, kernel),
        "window-longer": (torch.zeros(1, 4, 11, 8), k, 12, kernel), "budget-at-window": (q, k, 3, kernel),
        "budget-float": (q, k, 6.0, kernel), "kernel-even": (q, k, budget, 4), "kernel-zero": (q, k, budget, 0),
    }[case]
    assert_raises(nb.snapkv_select, q, k, budget, kernel_size=kernel, exc=exc, names=names,
                  call=f"snapkv_select({case})")


# -- Exercise 11.4 ----------------------------------------------------------------------
PAGE_CASES = [
    # id, B, H_kv, N, d, page_size
    ("B1-Hkv1-N16-d4-page4", 1, 1, 16, 4, 4),
    ("B2-Hkv2-N37-d8-page8-partial", 2, 2, 37, 8, 8),
    ("B1-Hkv3-N5-d16-page16-one-partial-page", 1, 3, 5, 16, 16),
    ("B1-Hkv1-N9-d2-page1", 1, 1, 9, 2, 1),
]


@pytest.mark.ex11_4
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H_kv,N,d,page", PAGE_CASES, ids=[c[0] for c in PAGE_CASES])
def test_page_bounds(nb, name, B, H_kv, N, d, page, dtype_name):
    dtype = DTYPES[dtype_name]
    keys = randn(B, H_kv, N, d, dtype=dtype, seed=N)
    call = call_text("page_bounds", keys, page)
    got = nb.page_bounds(keys, page)
    if not isinstance(got, tuple) or len(got) != 2:
        raise GradingFailure(f"{call} returned {type(got).__name__}; expected the tuple (page_min, page_max)")
    lo, hi = ref.page_bounds(keys, page)
    assert_close(got[0], lo, call, atol=0.0, dtype=dtype, what="page_min")
    assert_close(got[1], hi, call, atol=0.0, dtype=dtype, what="page_max")


BOUND_CASES = [
    # id, B, H, H_kv, P, d, query sign
    ("B1-H1-P4-d4", 1, 1, 1, 4, 4, "mixed"),
    ("B2-H4-Hkv2-P6-d8-negative-q", 2, 4, 2, 6, 8, "negative"),
    ("B1-H6-Hkv3-P5-d16-mixed", 1, 6, 3, 5, 16, "mixed"),
]


@pytest.mark.ex11_4
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H,H_kv,P,d,sign", BOUND_CASES, ids=[c[0] for c in BOUND_CASES])
def test_quest_upper_bound(nb, name, B, H, H_kv, P, d, sign, dtype_name):
    dtype = DTYPES[dtype_name]
    a, b = randn(B, H_kv, P, d, seed=P), randn(B, H_kv, P, d, seed=P + 1)
    lo, hi = torch.minimum(a, b).to(dtype), torch.maximum(a, b).to(dtype)
    q = randn(B, H, d, seed=d)
    q = (-q.abs() if sign == "negative" else q).to(dtype)
    call = call_text("quest_upper_bound", q, lo, hi)
    assert_close(nb.quest_upper_bound(q, lo, hi), ref.quest_upper_bound(q, lo, hi), call, atol=1e-12, rtol=1e-12,
                 dtype=torch.float64, what="the bounds (float64)",
                 alternatives=grouped_modulo(ref.quest_upper_bound, (q, lo, hi), H, H_kv, {0: 1}, 1,
                                             ("quest-bound", name, dtype_name)))


@pytest.mark.ex11_4
@pytest.mark.points(2)
def test_quest_bound_is_never_below_a_key(nb):
    """The bound's promise, on real pages: for negative, positive and mixed queries."""
    keys = randn(1, 2, 45, 8, seed=11, scale=2.0)
    lo, hi = ref.page_bounds(keys, 8)
    for seed, sign in [(1, -1.0), (2, 1.0), (3, 0.0)]:
        q = randn(1, 4, 8, seed=seed)
        q = q.abs() * sign if sign else q
        call = call_text("quest_upper_bound", q, lo, hi)
        got = nb.quest_upper_bound(q, lo, hi)
        if not isinstance(got, torch.Tensor) or got.shape != (1, 4, 6):
            raise GradingFailure(f"{call} returned {getattr(got, 'shape', type(got).__name__)}; expected (1, 4, 6)")
        for h in range(4):
            for j in range(45):
                dot = float(q[0, h] @ keys[0, h // 2, j])
                if dot > float(got[0, h, j // 8]) + 1e-12:
                    raise GradingFailure(f"{call}: head {h}, key {j}: q . k = {dot:.6g} exceeds its page's bound "
                                         f"{float(got[0, h, j // 8]):.6g}")


@pytest.mark.ex11_4
@pytest.mark.parametrize("case,exc,names", [
    ("keys-int", TypeError, "keys"), ("keys-3d", ValueError, "keys"), ("keys-empty", ValueError, "keys"),
    ("page-zero", ValueError, "page_size"), ("page-float", TypeError, "page_size"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_page_bounds_rejects_bad_input(nb, case, exc, names):
    keys, page = {
        "keys-int": (torch.zeros(1, 1, 4, 2, dtype=torch.int64), 2), "keys-3d": (torch.zeros(1, 4, 2), 2),
        "keys-empty": (torch.zeros(1, 1, 0, 2), 2), "page-zero": (torch.zeros(1, 1, 4, 2), 0),
        "page-float": (torch.zeros(1, 1, 4, 2), 2.0),
    }[case]
    assert_raises(nb.page_bounds, keys, page, exc=exc, names=names, call=f"page_bounds({case})")


@pytest.mark.ex11_4
@pytest.mark.parametrize("case,exc,names", [
    ("q-int", TypeError, "q"), ("q-4d", ValueError, "q"), ("min-int", TypeError, "page_min"),
    ("max-shape", ValueError, "page_max"), ("heads", ValueError, "page_min"), ("head-dim", ValueError, "page_min"),
    ("max-below-min", ValueError, "page_max"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_quest_upper_bound_rejects_bad_input(nb, case, exc, names):
    q, lo, hi = torch.zeros(1, 4, 8), torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8)
    q, lo, hi = {
        "q-int": (q.long(), lo, hi), "q-4d": (q[None], lo, hi), "min-int": (q, lo.long(), hi),
        "max-shape": (q, lo, torch.zeros(1, 2, 4, 8)), "heads": (q, torch.zeros(1, 3, 3, 8), torch.zeros(1, 3, 3, 8)),
        "head-dim": (q, torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4)),
        "max-below-min": (q, lo, hi.index_fill(2, torch.tensor([1]), -1.0)),  # page 1's max under its min
    }[case]
    assert_raises(nb.quest_upper_bound, q, lo, hi, exc=exc, names=names, call=f"quest_upper_bound({case})")


# -- Exercise 11.5 ----------------------------------------------------------------------
SELECT_CASES = [
    # id, B, H, H_kv, N, d, page_size, budget
    ("B1-H1-N64-page8-budget3", 1, 1, 1, 64, 8, 8, 3),
    ("B2-H4-Hkv2-N100-page16-budget4-partial-last", 2, 4, 2, 100, 8, 16, 4),
    ("B1-H6-Hkv3-N80-page4-budget1-last-only", 1, 6, 3, 80, 8, 4, 1),
    ("B1-H2-Hkv1-N40-page8-budget9-everything", 1, 2, 1, 40, 8, 8, 9),
]


@pytest.mark.ex11_5
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H,H_kv,N,d,page,budget", SELECT_CASES, ids=[c[0] for c in SELECT_CASES])
def test_quest_select(nb, name, B, H, H_kv, N, d, page, budget, dtype_name):
    dtype = DTYPES[dtype_name]
    keys = randn(B, H_kv, N, d, seed=N, scale=2.0)
    lo, hi = (t.to(dtype) for t in ref.page_bounds(keys, page))
    q = randn(B, H, d, seed=N + 1).to(dtype)
    call = call_text("quest_select", q, lo, hi, budget)
    check_index(nb.quest_select(q, lo, hi, budget), ref.quest_select(q, lo, hi, budget), call, "the pages",
                ("batch", "head"), "pages",
                grouped_modulo(ref.quest_select, (q, lo, hi, budget), H, H_kv, {0: 1}, 1, ("quest", name, dtype_name)))


@pytest.mark.ex11_5
@pytest.mark.points(2)
def test_quest_select_keeps_the_last_page_and_breaks_ties_by_page(nb):
    """Pages 1 and 3 and 5 have the same bound, the largest; the last page (6) has the lowest."""
    lo = torch.zeros(1, 1, 7, 2, dtype=torch.float64)
    hi = torch.tensor([[[[1.0, 0.0], [3.0, 0.0], [2.0, 0.0], [3.0, 0.0], [0.5, 0.0], [3.0, 0.0], [0.0, 0.0]]]],
                      dtype=torch.float64)
    q = torch.tensor([[[1.0, 1.0]]], dtype=torch.float64)
    call = call_text("quest_select", q, lo, hi, 3) + " (three pages tie for the largest bound)"
    check_index(nb.quest_select(q, lo, hi, 3), torch.tensor([[[1, 3, 6]]]), call, "the pages", ("batch", "head"),
                "pages")


@pytest.mark.ex11_5
@pytest.mark.parametrize("case,exc,names", [
    ("budget-zero", ValueError, "budget"), ("budget-float", TypeError, "budget"), ("q-int", TypeError, "q"),
    ("max-shape", ValueError, "page_max"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_quest_select_rejects_bad_input(nb, case, exc, names):
    q, lo, hi, budget = torch.zeros(1, 2, 4), torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4), 2
    q, lo, hi, budget = {
        "budget-zero": (q, lo, hi, 0), "budget-float": (q, lo, hi, 2.0), "q-int": (q.long(), lo, hi, budget),
        "max-shape": (q, lo, torch.zeros(1, 1, 2, 4), budget),
    }[case]
    assert_raises(nb.quest_select, q, lo, hi, budget, exc=exc, names=names, call=f"quest_select({case})")


# -- Exercise 11.6 ----------------------------------------------------------------------
DECODE_CASES = [
    # id, B, H, H_kv, d, page_size, num_pages, seq_lens, pages per head
    ("B1-H1-d4-page4-len10-pages-0-2", 1, 1, 1, 4, 4, 6, [10], 2),
    ("B2-H4-Hkv2-d8-page4-lens-13-7", 2, 4, 2, 8, 4, 12, [13, 7], 2),
    ("B1-H6-Hkv3-d16-page8-len50-3-pages", 1, 6, 3, 16, 8, 10, [50], 3),
    ("B3-H2-Hkv1-d8-page2-lens-1-5-9-one-page", 3, 2, 1, 8, 2, 16, [1, 5, 9], 1),
]


def decode_inputs(B, H, H_kv, d, page, num_pages, lens, S, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    k_pool = randn(num_pages, page, H_kv, d, seed=seed).to(dtype)
    v_pool = randn(num_pages, page, H_kv, d, seed=seed + 1).to(dtype)
    q = randn(B, H, d, seed=seed + 2).to(dtype)
    max_pages = max(-(-n // page) for n in lens) + 1
    perm = torch.randperm(num_pages, generator=g)
    table = torch.full((B, max_pages), -1, dtype=torch.long)
    used = 0
    for b, n in enumerate(lens):
        count = -(-n // page)
        table[b, :count] = perm[used: used + count]
        used += count
    pages = torch.zeros(B, H, S, dtype=torch.long)
    for b, n in enumerate(lens):
        count = -(-n // page)
        for h in range(H):
            chosen = torch.randperm(count, generator=g)[:S]
            chosen = torch.cat([chosen, chosen[:1].repeat(S - len(chosen))])  # repeats where a sequence is short
            pages[b, h] = chosen.sort().values
    return q, k_pool, v_pool, table, torch.tensor(lens), pages


@pytest.mark.ex11_6
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H,H_kv,d,page,num_pages,lens,S", DECODE_CASES, ids=[c[0] for c in DECODE_CASES])
def test_sparse_paged_decode(nb, name, B, H, H_kv, d, page, num_pages, lens, S, dtype_name):
    dtype = DTYPES[dtype_name]
    args = decode_inputs(B, H, H_kv, d, page, num_pages, lens, S, dtype, seed=len(name))
    call = call_text("sparse_paged_decode", *args)
    assert_close(nb.sparse_paged_decode(*args), ref.sparse_paged_decode(*args), call, atol=ATOL[dtype],
                 rtol=RTOL[dtype],
                 dtype=dtype, alternatives=grouped_modulo(ref.sparse_paged_decode, args, H, H_kv, {0: 1, 5: 1}, 1,
                                                          ("decode", name, dtype_name)))


@pytest.mark.ex11_6
@pytest.mark.points(2)
def test_sparse_paged_decode_of_every_page_is_dense_attention(nb):
    """All pages selected: decode attention over the whole sequence, garbage beyond seq_len ignored."""
    q, k_pool, v_pool, table, lens, _ = decode_inputs(1, 4, 2, 8, 4, 8, [14], 1, torch.float64, seed=9)
    k_pool[table[0, 3], 2:] = 1e4  # the unused slots of the last page: never read
    pages = torch.arange(4).repeat(1, 4, 1)  # (1, 4, 4)
    call = (call_text("sparse_paged_decode", q, k_pool, v_pool, table, lens, pages)
            + " (every page; garbage after token 13)")
    assert_close(nb.sparse_paged_decode(q, k_pool, v_pool, table, lens, pages),
                 ref.sparse_paged_decode(q, k_pool, v_pool, table, lens, pages), call, atol=1e-12, rtol=1e-12,
                 dtype=torch.float64)


DUPLICATE_CASES = [
    # id, B, H, H_kv, d, page_size, num_pages, seq_lens, pages: logical pages, one list per (b, h)
    ("B1-H2-Hkv1-d8-page4-len14-pages-0-0-2-and-1-3-3", 1, 2, 1, 8, 4, 6, [14], [[[0, 0, 2], [1, 3, 3]]]),
    ("B1-H1-d4-page4-len10-pages-2-0-2-unsorted", 1, 1, 1, 4, 4, 5, [10], [[[2, 0, 2]]]),
    ("B1-H1-d4-page4-len10-page-1-four-times", 1, 1, 1, 4, 4, 5, [10], [[[1, 1, 1, 1]]]),
    ("B2-H4-Hkv2-d8-page2-lens-9-4-repeats-in-some-heads", 2, 4, 2, 8, 2, 12, [9, 4],
     [[[0, 4, 4], [2, 2, 2], [1, 3, 4], [4, 0, 0]], [[0, 1, 1], [1, 0, 1], [0, 1, 0], [1, 1, 1]]]),
]


@pytest.mark.ex11_6
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H,H_kv,d,page,num_pages,lens,pages", DUPLICATE_CASES,
                         ids=[c[0] for c in DUPLICATE_CASES])
def test_sparse_paged_decode_reads_a_page_listed_twice_once(nb, name, B, H, H_kv, d, page, num_pages, lens, pages,
                                                             dtype_name):
    """The statement: a page listed twice is read once, its tokens weighed once in the softmax."""
    dtype = DTYPES[dtype_name]
    q, k_pool, v_pool, table, seq_lens, _ = decode_inputs(B, H, H_kv, d, page, num_pages, lens, 1, dtype,
                                                          seed=len(name))
    args = (q, k_pool, v_pool, table, seq_lens, torch.tensor(pages))
    call = call_text("sparse_paged_decode", *args) + f" (pages {pages})"
    assert_close(nb.sparse_paged_decode(*args), ref.sparse_paged_decode(*args), call, atol=ATOL[dtype],
                 rtol=RTOL[dtype],
                 dtype=dtype)


@pytest.mark.ex11_6
@pytest.mark.parametrize("case,exc,names", [
    ("q-int", TypeError, "q"), ("q-4d", ValueError, "q"), ("pool-dtype", TypeError, "k_pool"),
    ("pool-heads", ValueError, "k_pool"), ("v-shape", ValueError, "v_pool"), ("table-float", TypeError, "block_table"),
    ("table-rows", ValueError, "block_table"), ("table-entry", ValueError, "block_table"),
    ("lens-zero", ValueError, "seq_lens"), ("lens-too-long", ValueError, "seq_lens"),
    ("lens-float", TypeError, "seq_lens"),
    ("pages-out-of-range", ValueError, "pages"), ("pages-shape", ValueError, "pages"),
    ("pages-float", TypeError, "pages"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_sparse_paged_decode_rejects_bad_input(nb, case, exc, names):
    q, kp, vp = torch.zeros(1, 2, 4), torch.zeros(5, 4, 1, 4), torch.zeros(5, 4, 1, 4)
    table, lens, pages = torch.tensor([[3, 1, 0]]), torch.tensor([10]), torch.tensor([[[0, 2], [1, 2]]])
    bad = {
        "q-int": dict(q=q.long()), "q-4d": dict(q=q[None]), "pool-dtype": dict(kp=kp.double(), vp=vp.double()),
        "pool-heads": dict(kp=torch.zeros(5, 4, 3, 4), vp=torch.zeros(5, 4, 3, 4)),
        "v-shape": dict(vp=torch.zeros(5, 2, 1, 4)),
        "table-float": dict(table=table.float()), "table-rows": dict(table=torch.tensor([[3, 1, 0], [2, 4, 0]])),
        "table-entry": dict(table=torch.tensor([[3, 9, 0]])), "lens-zero": dict(lens=torch.tensor([0])),
        "lens-too-long": dict(lens=torch.tensor([13])), "lens-float": dict(lens=torch.tensor([10.0])),
        "pages-out-of-range": dict(pages=torch.tensor([[[0, 3], [1, 2]]])),
        "pages-shape": dict(pages=torch.tensor([[0, 2]])),
        "pages-float": dict(pages=pages.float()),
    }[case]
    q, kp, vp = bad.get("q", q), bad.get("kp", kp), bad.get("vp", vp)
    table, lens, pages = bad.get("table", table), bad.get("lens", lens), bad.get("pages", pages)
    assert_raises(nb.sparse_paged_decode, q, kp, vp, table, lens, pages, exc=exc, names=names,
                  call=f"sparse_paged_decode({case})")


# -- Exercise 11.7 ----------------------------------------------------------------------
MOBA_CASES = [
    # id, B, H, H_kv, N, d, block_size, top_k
    ("B1-H1-N12-d4-block3-top2", 1, 1, 1, 12, 4, 3, 2),
    ("B2-H4-Hkv2-N30-d8-block4-top3-partial", 2, 4, 2, 30, 8, 4, 3),
    ("B1-H6-Hkv3-N40-d8-block8-top1-own-only", 1, 6, 3, 40, 8, 8, 1),
    ("B1-H2-Hkv1-N20-d8-block2-top20-everything-past", 1, 2, 1, 20, 8, 2, 20),
]


@pytest.mark.ex11_7
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H,H_kv,N,d,block,top_k", MOBA_CASES, ids=[c[0] for c in MOBA_CASES])
def test_moba_gate(nb, name, B, H, H_kv, N, d, block, top_k, dtype_name):
    dtype = DTYPES[dtype_name]
    q = randn(B, H, N, d, seed=N, scale=2.0).to(dtype)
    k = randn(B, H_kv, N, d, seed=N + 1, scale=2.0).to(dtype)
    call = call_text("moba_gate", q, k, block, top_k)
    check_index(nb.moba_gate(q, k, block, top_k), ref.moba_gate(q, k, block, top_k), call, "the gate entries",
                ("batch", "head", "query"), "blocks",
                grouped_modulo(ref.moba_gate, (q, k, block, top_k), H, H_kv, {0: 1}, 1, ("moba", name, dtype_name)))


@pytest.mark.ex11_7
def test_moba_gate_breaks_ties_by_block(nb):
    """Identical keys everywhere: every past block has the same mean, so the lowest win."""
    q = randn(1, 1, 16, 4, seed=1)
    k = torch.ones(1, 1, 16, 4, dtype=torch.float64)
    call = call_text("moba_gate", q, k, 2, 3) + " (every block mean equal)"
    check_index(nb.moba_gate(q, k, 2, 3), ref.moba_gate(q, k, 2, 3), call, "the gate entries",
                ("batch", "head", "query"), "blocks")


@pytest.mark.ex11_7
@pytest.mark.parametrize("case,exc,names", [
    ("q-int", TypeError, "q"), ("q-3d", ValueError, "q"), ("k-dtype", TypeError, "k"), ("k-length", ValueError, "k"),
    ("k-heads", ValueError, "k"), ("block-zero", ValueError, "block_size"), ("top-zero", ValueError, "top_k"),
    ("top-float", TypeError, "top_k"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_moba_gate_rejects_bad_input(nb, case, exc, names):
    q, k, block, top = torch.zeros(1, 4, 8, 4), torch.zeros(1, 2, 8, 4), 2, 2
    q, k, block, top = {
        "q-int": (q.long(), k, block, top), "q-3d": (q[0], k, block, top), "k-dtype": (q, k.double(), block, top),
        "k-length": (q, torch.zeros(1, 2, 7, 4), block, top), "k-heads": (q, torch.zeros(1, 3, 8, 4), block, top),
        "block-zero": (q, k, 0, top), "top-zero": (q, k, block, 0), "top-float": (q, k, block, 2.0),
    }[case]
    assert_raises(nb.moba_gate, q, k, block, top, exc=exc, names=names, call=f"moba_gate({case})")


# -- Exercise 11.8 ----------------------------------------------------------------------
NSA_CASES = [
    # id, seq_len, selected blocks, sizes (compress_block, compress_stride, select_block, window)
    ("paper-64K-blocks-outside-window", 65536, list(range(16)), (32, 16, 64, 512)),
    ("paper-64K-blocks-overlapping-window", 65536, list(range(1016, 1024)) + list(range(8)), (32, 16, 64, 512)),
    ("paper-8K", 8192, [0, 3, 5, 9, 11, 40, 60, 100, 101, 102, 120, 125, 126, 127, 7, 8], (32, 16, 64, 512)),
    ("short-300-partial-last-block", 300, [0, 4], (32, 16, 64, 512)),
    ("shorter-than-a-compression-block", 20, [0], (32, 16, 64, 512)),
    # N < l - s: (N - l) // s + 1 is negative there; the statement's "else 0" holds
    ("N1-one-token", 1, [0], (32, 16, 64, 512)),
    ("N10-shorter-than-block-minus-stride", 10, [], (32, 16, 64, 512)),
    ("N15-one-below-block-minus-stride", 15, [0], (32, 16, 64, 512)),
    ("N3-block8-stride2", 3, [0], (8, 2, 10, 25)),
    ("N32-exactly-one-compression-block", 32, [0], (32, 16, 64, 512)),
    ("small-sizes-overlap", 100, [6, 7, 9], (8, 4, 10, 25)),
    ("no-selection", 1000, [], (16, 16, 32, 64)),
]


@pytest.mark.ex11_8
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,seq_len,blocks,sizes", NSA_CASES, ids=[c[0] for c in NSA_CASES])
def test_nsa_tokens_read(nb, name, seq_len, blocks, sizes):
    cb, cs, sb, w = sizes
    call = call_text("nsa_tokens_read", seq_len, blocks, compress_block=cb, compress_stride=cs, select_block=sb,
                     window=w)
    got = nb.nsa_tokens_read(seq_len, blocks, compress_block=cb, compress_stride=cs, select_block=sb, window=w)
    assert_equal(got, ref.nsa_tokens_read(seq_len, blocks, cb, cs, sb, w), call)


@pytest.mark.ex11_8
def test_nsa_tokens_read_defaults_are_the_papers(nb):
    call = call_text("nsa_tokens_read", 65536, list(range(16)))
    assert_equal(nb.nsa_tokens_read(65536, list(range(16))), ref.nsa_tokens_read(65536, list(range(16))), call)


@pytest.mark.ex11_8
@pytest.mark.parametrize("args,kwargs,exc,names", [
    ((0, [0]), {}, ValueError, "seq_len"), ((64.0, [0]), {}, TypeError, "seq_len"),
    ((640, [10]), {}, ValueError, "selected_blocks"), ((640, [1, 1]), {}, ValueError, "selected_blocks"),
    ((640, [-1]), {}, ValueError, "selected_blocks"), ((640, "0"), {}, TypeError, "selected_blocks"),
    ((640, [0]), {"window": 0}, ValueError, "window"),
    ((640, [0]), {"compress_stride": 1.5}, TypeError, "compress_stride"),
    ((640, [0]), {"select_block": 0}, ValueError, "select_block"),
], ids=["len-0", "len-float", "block-past-end", "block-twice", "block-negative", "blocks-string", "window-0",
        "stride-float", "select-block-0"])
def test_nsa_tokens_read_rejects_bad_input(nb, args, kwargs, exc, names):
    assert_raises(nb.nsa_tokens_read, *args, exc=exc, names=names, **kwargs)


# -- Exercise 11.9 ----------------------------------------------------------------------
INDEXER_CASES = [
    # id, B, H_I, T, N, d, top_k: T = N is a prefill, T = 1 a decode step, 1 < T < N a chunk
    ("B1-H2-T8-N8-d4-top3-prefill", 1, 2, 8, 8, 4, 3),
    ("B2-H4-T1-N60-d8-top10-decode", 2, 4, 1, 60, 8, 10),
    ("B1-H4-T6-N40-d8-top8-chunk-at-the-end", 1, 4, 6, 40, 8, 8),
    ("B1-H3-T10-N10-d4-top20-top-above-N", 1, 3, 10, 10, 4, 20),
    ("B2-H8-T5-N100-d16-top16", 2, 8, 5, 100, 16, 16),
]


def indexer_inputs(B, H, T, N, d, seed):
    """Queries, keys and weights of both signs, so ReLU and the weights' sign both matter."""
    q = randn(B, H, T, d, seed=seed)
    k = randn(B, N, d, seed=seed + 1)
    weights = randn(B, H, T, seed=seed + 2)
    return q, k, weights


@pytest.mark.ex11_9
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name,B,H,T,N,d,top_k", INDEXER_CASES, ids=[c[0] for c in INDEXER_CASES])
def test_indexer_topk(nb, name, B, H, T, N, d, top_k, dtype_name):
    dtype = DTYPES[dtype_name]
    q, k, weights = (t.to(dtype) for t in indexer_inputs(B, H, T, N, d, seed=N + T))
    call = call_text("indexer_topk", q, k, weights, top_k)
    check_index(nb.indexer_topk(q, k, weights, top_k), ref.indexer_topk(q, k, weights, top_k), call,
                rows=("batch", "query"))


@pytest.mark.ex11_9
@pytest.mark.points(2)
def test_indexer_topk_breaks_ties_by_position(nb):
    """Small integers, so every score is exact: keys repeat every 4 positions (equal
    scores), and every key that no head's query points at scores exactly 0 (ReLU)."""
    g = torch.Generator().manual_seed(5)
    base = torch.randint(-3, 4, (4, 6), generator=g).double()  # (4, d): four distinct keys
    k = base.repeat(5, 1)[None]  # (1, 20, d): key j equals key j + 4
    q = torch.randint(-3, 4, (1, 3, 4, 6), generator=g).double()  # (B, H_I, T, d)
    q[0, :, 1] = -base[0].sign() * 2  # query 1 points away from key 0's channels in every head
    weights = torch.tensor([[[1.0, 2.0, 1.0, -1.0], [1.0, 1.0, 0.5, 2.0], [-0.5, 1.0, 1.0, 1.0]]],
                           dtype=torch.float64)  # (B, H_I, T)
    call = call_text("indexer_topk", q, k, weights, 7) + " (keys repeat every 4 positions)"
    check_index(nb.indexer_topk(q, k, weights, 7), ref.indexer_topk(q, k, weights, 7), call, rows=("batch", "query"))


@pytest.mark.ex11_9
@pytest.mark.parametrize("case,exc,names", [
    ("q-int", TypeError, "q"), ("q-3d", ValueError, "q"), ("k-dtype", TypeError, "k"), ("k-4d", ValueError, "k"),
    ("k-shorter-than-T", ValueError, "k"), ("k-head-dim", ValueError, "k"), ("k-batch", ValueError, "k"),
    ("weights-dtype", TypeError, "weights"), ("weights-shape", ValueError, "weights"),
    ("top-zero", ValueError, "top_k"), ("top-float", TypeError, "top_k"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_indexer_topk_rejects_bad_input(nb, case, exc, names):
    q, k, w, top = torch.zeros(1, 2, 3, 4), torch.zeros(1, 8, 4), torch.zeros(1, 2, 3), 2
    q, k, w, top = {
        "q-int": (q.long(), k, w, top), "q-3d": (q[0], k, w, top), "k-dtype": (q, k.double(), w, top),
        "k-4d": (q, k[:, None], w, top), "k-shorter-than-T": (q, torch.zeros(1, 2, 4), w, top),
        "k-head-dim": (q, torch.zeros(1, 8, 5), w, top), "k-batch": (q, torch.zeros(2, 8, 4), w, top),
        "weights-dtype": (q, k, w.double(), top), "weights-shape": (q, k, torch.zeros(1, 3, 2), top),
        "top-zero": (q, k, w, 0), "top-float": (q, k, w, 2.0),
    }[case]
    assert_raises(nb.indexer_topk, q, k, w, top, exc=exc, names=names, call=f"indexer_topk({case})")
