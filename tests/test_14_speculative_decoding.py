"""Graders for Chapter 14 (exercises/14_speculative_decoding.ipynb) against tests/references.

14.1 and 14.2 are compared with float64 loops token by token, and composed: the first
emitted token's distribution, computed exactly (no sampling) from the answers, must be
the target's p. 14.3 and 14.4 are compared exactly with the references' token ids (the
uniforms of 14.4 are chosen away from every threshold, so that no rounding decides a
token); 14.5 and 14.6 with exact sums and fractions rounded once; 14.7 exactly; 14.8's
cache after every operation of scripts of appends and rollbacks with a cache that keeps
the whole sequence, and its memory from outside the notebook's process
(``grading.judge.measure``).
"""

import math
import random

import pytest
import torch

from grading.compare import (
    GradingFailure,
    assert_close,
    assert_equal,
    assert_raises,
    assert_trace,
    call_text,
    observed_tensor,
)
from grading.judge import Unmeasurable, peak_memory
from tests.references import ref_14_speculative_decoding as ref

# 14.1: min(1, p / q) is one division, correctly rounded in any float64 code; 1e-14
# relative admits p * (1 / q) (two roundings). 14.2: the normalising sum of up to 64
# terms in another order than fsum, relative error below 64 * 2**-53 = 7e-15. The
# solution's error on every case below is 0 for both (Intel Xeon, torch 2.13 CPU).
ACCEPT_RTOL, RESIDUAL_RTOL, PROB_ATOL = 1e-14, 1e-12, 1e-15
# The chapter's theorem: the first emitted token is distributed as p. A correct float64
# composition errs by a few units of 2**-53 per token: the solution's worst total
# variation over PAIR_CASES is 6.4e-17.
TV_BOUND = 1e-12
# 14.4's uniforms stay this far from every acceptance threshold and every running sum of
# the distribution sampled, so that a token never depends on the order of a sum.
UNIFORM_MARGIN = 1e-9
# 14.5 and 14.6: a closed form or a product of a few float64 roundings against an exact
# sum rounded once; the solution errs by 2.2e-16 relative at most. Near alpha = 1,
# 1 - alpha**(gamma + 1) cancels: the statement's formula, computed as written, loses up
# to 2e-9 relative on NEAR_ONE_CASES (the solution, with expm1, 2.2e-16).
TIME_RTOL, NEAR_ONE_RTOL = 1e-12, 1e-6


def probs(V, seed, zeros=(), scale=1.0, dtype=torch.float64):
    """A random probability vector of V tokens (a softmax of normal logits), with the
    tokens ``zeros`` given no mass; rows of it for a tuple V = (rows, V)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(V, generator=g, dtype=torch.float64) * scale
    logits[..., list(zeros)] = -math.inf
    return torch.softmax(logits, dim=-1).to(dtype)


def one_hot(V, index):
    p = torch.zeros(V, dtype=torch.float64)
    p[index] = 1.0
    return p


def text(t):
    return "[" + ", ".join(f"{x:.3g}" for x in t.tolist()) + "]"


# (name, p, q): random, q with zeros where p has mass, p with zeros where q has mass,
# q == p, one-hot q, one token, disjoint supports, a peaked p
PAIR_CASES = [
    ("V8-random", probs(8, 1), probs(8, 2)),
    ("V64-peaked", probs(64, 3, scale=3.0), probs(64, 4, scale=3.0)),
    ("V16-q-zeros-where-p-has-mass", probs(16, 5), probs(16, 6, zeros=(0, 3, 4, 15))),
    ("V16-p-zeros-where-q-has-mass", probs(16, 7, zeros=(1, 2, 9)), probs(16, 8)),
    ("V12-q-equals-p", probs(12, 9), probs(12, 9)),
    ("V10-one-hot-q", probs(10, 10), one_hot(10, 6)),
    ("V1", one_hot(1, 0), one_hot(1, 0)),
    ("V6-disjoint-supports", probs(6, 11, zeros=(0, 1, 2)), probs(6, 12, zeros=(3, 4, 5))),
    ("V9-one-hot-p", one_hot(9, 2), probs(9, 13, zeros=(5,))),
]
CASE_IDS = [c[0] for c in PAIR_CASES]


def prob_bad_inputs():
    """(p, q, exc, names, id): the conventions' errors, on either argument."""
    p, q = probs(5, 20), probs(5, 21)
    return [
        (p.tolist(), q, TypeError, "p", "list-p"),
        (p, (q * 1000).long(), TypeError, "q", "integer-q"),
        (p.reshape(1, 5), q.reshape(1, 5), ValueError, "p", "2d-p"),
        (p, probs(6, 22), ValueError, "q", "q-longer-than-p"),
        (torch.tensor([1.2, -0.2, 0.0]), probs(3, 23), ValueError, "p", "negative-p"),
        (p, torch.tensor([0.5, 0.5, float("nan"), 0.0, 0.0], dtype=torch.float64), ValueError, "q", "nan-q"),
        (p * 0.9, q, ValueError, "p", "p-sums-to-0.9"),
        (p, q * 1.01, ValueError, "q", "q-sums-to-1.01"),
    ]


def first_token(q, accept, residual):
    """The distribution of the first emitted token from 14.1's and 14.2's answers: the
    draft proposes x with q[x], accepted with accept[x]; a rejection samples the residual."""
    qq, aa, rr = q.double().tolist(), accept.double().tolist(), residual.double().tolist()
    rejected = 1.0 - math.fsum(a * b for a, b in zip(qq, aa))
    return torch.tensor([a * b + rejected * r for a, b, r in zip(qq, aa, rr)], dtype=torch.float64)


def check_first_token(nb, p, q):
    """TV(first token, p) <= TV_BOUND, with the notebook's 14.1 and 14.2 (a test graded
    per exercise gets the other one's reference answer)."""
    call = f"acceptance_probs then residual_distribution on p={text(p)}, q={text(q)}"
    accept, residual = nb.acceptance_probs(p, q), nb.residual_distribution(p, q)
    for name, got in (("acceptance_probs", accept), ("residual_distribution", residual)):
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(p.shape):
            raise GradingFailure(f"{call}: {name} returned {getattr(got, 'shape', type(got).__name__)}; "
                                 f"expected a ({p.numel()},) tensor")
    first = first_token(q, accept, residual)
    tv = 0.5 * math.fsum(abs(a - b) for a, b in zip(first.tolist(), p.double().tolist()))
    if not tv <= TV_BOUND:
        raise GradingFailure(
            f"{call}: the first emitted token is not distributed as p: total variation {tv:.3g} (bound {TV_BOUND:g})"
            f"\n  q * accept + P(reject) * residual = {text(first)}\n  p = {text(p)}",
            observed_tensor(first, call, atol=TV_BOUND, rtol=0.0, what="the first token's distribution"))


# -- Exercise 14.1 -------------------------------------------------------------------------
@pytest.mark.ex14_1
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("name,p,q", PAIR_CASES, ids=CASE_IDS)
def test_acceptance_probs(nb, name, p, q):
    got = nb.acceptance_probs(p.clone(), q.clone())
    assert_close(got, ref.acceptance_probs(p, q), call_text("acceptance_probs", p, q), atol=PROB_ATOL,
                 rtol=ACCEPT_RTOL, dtype=torch.float64)


@pytest.mark.ex14_1
@pytest.mark.points(2)
@pytest.mark.parametrize("name,p,q", PAIR_CASES, ids=CASE_IDS)
def test_acceptance_probs_make_the_first_token_exact(nb, name, p, q):
    check_first_token(nb, p, q)


@pytest.mark.ex14_1
def test_acceptance_probs_of_fp32_inputs_are_float64(nb):
    p, q = probs(7, 30, dtype=torch.float32), probs(7, 31, zeros=(2,), dtype=torch.float32)
    # the reference divides the fp32 values in float64, as the statement asks
    assert_close(nb.acceptance_probs(p, q), ref.acceptance_probs(p, q), call_text("acceptance_probs", p, q),
                 atol=PROB_ATOL, rtol=ACCEPT_RTOL, dtype=torch.float64)


@pytest.mark.ex14_1
@pytest.mark.parametrize("index", range(len(prob_bad_inputs())), ids=[c[-1] for c in prob_bad_inputs()])
def test_acceptance_probs_rejects_bad_input(nb, index):
    p, q, exc, names, _ = prob_bad_inputs()[index]
    assert_raises(nb.acceptance_probs, p, q, exc=exc, names=names)


# -- Exercise 14.2 -------------------------------------------------------------------------
@pytest.mark.ex14_2
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("name,p,q", PAIR_CASES, ids=CASE_IDS)
def test_residual_distribution(nb, name, p, q):
    got = nb.residual_distribution(p.clone(), q.clone())
    assert_close(got, ref.residual_distribution(p, q), call_text("residual_distribution", p, q), atol=PROB_ATOL,
                 rtol=RESIDUAL_RTOL, dtype=torch.float64)


@pytest.mark.ex14_2
@pytest.mark.points(2)
@pytest.mark.parametrize("name,p,q", PAIR_CASES, ids=CASE_IDS)
def test_residual_distribution_makes_the_first_token_exact(nb, name, p, q):
    check_first_token(nb, p, q)


@pytest.mark.ex14_2
def test_residual_distribution_of_fp32_inputs_is_float64(nb):
    p, q = probs(7, 32, dtype=torch.float32), probs(7, 33, dtype=torch.float32)
    assert_close(nb.residual_distribution(p, q), ref.residual_distribution(p, q),
                 call_text("residual_distribution", p, q), atol=PROB_ATOL, rtol=RESIDUAL_RTOL, dtype=torch.float64)


@pytest.mark.ex14_2
@pytest.mark.parametrize("index", range(len(prob_bad_inputs())), ids=[c[-1] for c in prob_bad_inputs()])
def test_residual_distribution_rejects_bad_input(nb, index):
    p, q, exc, names, _ = prob_bad_inputs()[index]
    assert_raises(nb.residual_distribution, p, q, exc=exc, names=names)


# -- Exercise 14.3 -------------------------------------------------------------------------
def lowest_argmax(row):
    return min(t for t, x in enumerate(row) if x == max(row))


def greedy_inputs(B, gamma, V, accepted, seed, dtype=torch.float64, ties=False):
    """Logits (B, gamma + 1, V) and drafts (B, gamma) whose longest matching prefix of
    sequence b is accepted[b]; after the first mismatch the drafts match again, so that
    only the first mismatch may stop the count. ``ties``: logits rounded to a few values,
    so that rows hold ties, and the mismatch is the highest index of a tie."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, gamma + 1, V, generator=g, dtype=torch.float64)
    if ties:
        logits = (logits * 1.5).round().clamp(-2, 1)  # every row holds its maximum more than once
    best = [[lowest_argmax(row) for row in seq] for seq in logits.tolist()]
    drafts = torch.zeros(B, gamma, dtype=torch.int64)
    for b in range(B):
        for i in range(gamma):
            drafts[b, i] = best[b][i]
        if accepted[b] < gamma:
            i = accepted[b]
            row = logits[b, i].tolist()
            tied = [t for t in range(V) if row[t] == max(row) and t != best[b][i]]
            drafts[b, i] = tied[-1] if ties and tied else (best[b][i] + 1 + seed % (V - 1)) % V
    return logits.to(dtype), drafts


# (name, B, gamma, V, accepted per sequence, dtype, ties)
GREEDY_CASES = [
    ("B3-g4-V10-first-rejected-mid-all-accepted", 3, 4, 10, [0, 2, 4], torch.float64, False),
    ("B1-g0-V7-no-draft", 1, 0, 7, [0], torch.float64, False),
    ("B2-g0-V5-no-draft", 2, 0, 5, [0, 0], torch.float64, False),
    ("B4-g5-V32-fp32", 4, 5, 32, [5, 1, 3, 0], torch.float32, False),
    ("B3-g3-V6-ties", 3, 3, 6, [1, 3, 0], torch.float64, True),
    ("B2-g6-V4-ties-fp32", 2, 6, 4, [6, 2], torch.float32, True),
    ("B1-g1-V2-all-accepted", 1, 1, 2, [1], torch.float64, False),
]


@pytest.mark.ex14_3
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("case", GREEDY_CASES, ids=[c[0] for c in GREEDY_CASES])
def test_verify_greedy(nb, case):
    name, B, gamma, V, accepted, dtype, ties = case
    logits, drafts = greedy_inputs(B, gamma, V, accepted, seed=len(name), dtype=dtype, ties=ties)
    got = nb.verify_greedy(logits.clone(), drafts.clone())
    assert_equal(got, ref.verify_greedy(logits, drafts), call_text("verify_greedy", logits, drafts.tolist()))


@pytest.mark.ex14_3
def test_verify_greedy_ties_go_to_the_lowest_index(nb):
    """Every row's largest logit sits at tokens 1 and 3; a draft of 3 is rejected."""
    logits = torch.tensor([[[0.0, 2.0, -1.0, 2.0], [0.5, 2.0, 2.0, 0.0]]], dtype=torch.float64)
    for drafted in (1, 3):
        drafts = torch.tensor([[drafted]])
        assert_equal(nb.verify_greedy(logits, drafts), ref.verify_greedy(logits, drafts),
                     call_text("verify_greedy", logits, drafts.tolist()))


def greedy_bad_inputs():
    logits, drafts = greedy_inputs(2, 3, 5, [1, 3], seed=40)
    return [
        (logits[:, :3], drafts, ValueError, "target_logits", "gamma-rows"),
        (logits, drafts[:1], ValueError, "draft_tokens", "batch-mismatch"),
        (logits[:1], drafts, ValueError, "target_logits", "batch-mismatch-other-way"),
        (logits, torch.tensor([[0, 1, 5], [0, 1, 2]]), ValueError, "draft_tokens", "id-equal-to-V"),
        (logits, torch.tensor([[0, -1, 2], [0, 1, 2]]), ValueError, "draft_tokens", "negative-id"),
        (logits, drafts.double(), TypeError, "draft_tokens", "floating-ids"),
        (logits[0], drafts, ValueError, "target_logits", "2d-logits"),
        (logits, drafts[0], ValueError, "draft_tokens", "1d-drafts"),
        (logits.tolist(), drafts, TypeError, "target_logits", "list-logits"),
        (logits.long(), drafts, TypeError, "target_logits", "integer-logits"),
        (torch.where(logits > 1.5, float("nan"), logits), drafts, ValueError, "target_logits", "nan-logits"),
        (logits[..., :0], drafts, ValueError, "target_logits", "no-vocabulary"),
    ]


@pytest.mark.ex14_3
@pytest.mark.parametrize("index", range(len(greedy_bad_inputs())), ids=[c[-1] for c in greedy_bad_inputs()])
def test_verify_greedy_rejects_bad_input(nb, index):
    logits, drafts, exc, names, _ = greedy_bad_inputs()[index]
    assert_raises(nb.verify_greedy, logits, drafts, exc=exc, names=names)


# -- Exercise 14.4 -------------------------------------------------------------------------
def inside(bins, target):
    """A uniform in the middle of ``target``'s interval of the running sums ``bins``."""
    low = bins[target - 1] if target else 0.0
    u = (low + bins[target]) / 2
    assert bins[target] - low > 2 * UNIFORM_MARGIN, "a bin too narrow to aim at"
    return u


def sampled_inputs(gamma, V, seed, reject_at, pick, q_zeros=()):
    """p (gamma + 1, V), q (gamma, V), drafts, accept uniforms and the sample uniform for
    a verification that rejects at ``reject_at`` (None: all accepted), aiming the sample
    at the ``pick``-th token (of those with mass, wrapped) of the distribution sampled.
    Every uniform is at least UNIFORM_MARGIN from every threshold and running sum."""
    rng = random.Random(seed)
    p = torch.stack([probs(V, seed * 100 + i) for i in range(gamma + 1)])
    q = torch.stack([probs(V, seed * 100 + 50 + i, zeros=q_zeros) for i in range(gamma)]) if gamma else \
        torch.zeros(0, V, dtype=torch.float64)
    drafts, uniforms = [], []
    for i in range(gamma):
        if i == reject_at:  # a token the target likes less than the draft: it can be rejected
            x = rng.choice([t for t in range(V) if q[i, t] > p[i, t]])
        else:
            x = rng.choice([t for t in range(V) if q[i, t] > 0])
        drafts.append(x)
    drafts = torch.tensor(drafts, dtype=torch.int64)
    thresholds = ref.acceptance_thresholds(p, q, drafts)
    for i, a in enumerate(thresholds):
        uniforms.append((a + 1) / 2 if i == reject_at else a * rng.uniform(0.1, 0.9))
        assert abs(uniforms[-1] - a) > UNIFORM_MARGIN
    stop = gamma if reject_at is None else reject_at
    sampled = p[gamma] if reject_at is None else ref.residual_distribution(p[stop], q[stop])
    bins = ref.cumsum_boundaries(sampled)
    support = [t for t in range(V) if sampled[t] > 0]
    sample = inside(bins, support[pick % len(support)])
    return p, q, drafts, torch.tensor(uniforms, dtype=torch.float64), sample


# (name, gamma, V, reject_at, pick, q_zeros)
SAMPLED_CASES = [
    ("g4-V8-all-accepted-bonus", 4, 8, None, 3, ()),
    ("g4-V8-rejected-at-0", 4, 8, 0, 1, ()),
    ("g4-V8-rejected-at-1", 4, 8, 1, 0, ()),
    ("g4-V8-rejected-at-2", 4, 8, 2, 5, ()),
    ("g4-V8-rejected-at-3", 4, 8, 3, -1, ()),
    ("g0-V6-bonus-only", 0, 6, None, 2, ()),
    ("g3-V12-q-zeros-rejected-at-1", 3, 12, 1, 2, (0, 4, 7)),
    ("g2-V12-q-zeros-all-accepted", 2, 12, None, 7, (3, 5)),
    ("g1-V2-rejected-at-0", 1, 2, 0, 0, ()),
    ("g6-V20-rejected-at-5", 6, 20, 5, 4, ()),
]


@pytest.mark.ex14_4
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("case", SAMPLED_CASES, ids=[c[0] for c in SAMPLED_CASES])
def test_verify_sampled(nb, case):
    name, gamma, V, reject_at, pick, q_zeros = case
    args = sampled_inputs(gamma, V, len(name) + gamma, reject_at, pick, q_zeros)
    got = nb.verify_sampled(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    assert_equal(got, ref.verify_sampled(*args), call_text("verify_sampled", *args))


@pytest.mark.ex14_4
def test_verify_sampled_never_emits_what_the_target_excludes(nb):
    """The target gives the drafted token no mass (threshold exactly 0) and the uniform is
    exactly 0: it is rejected (0 < 0 is false), and the residual's first tokens have no
    mass either, so a uniform of 0 samples the first token that has some. Both are exact
    in any arithmetic: a zero is a zero whatever the order of the sums."""
    p = torch.stack([probs(6, 60, zeros=(0, 1, 2)), probs(6, 61)])
    q = probs(6, 62, zeros=(4,)).reshape(1, 6)
    drafts, uniforms = torch.tensor([1]), torch.tensor([0.0], dtype=torch.float64)
    args = (p, q, drafts, uniforms, 0.0)
    assert_equal(nb.verify_sampled(*args), ref.verify_sampled(*args), call_text("verify_sampled", *args))


@pytest.mark.ex14_4
def test_verify_sampled_past_the_rounded_total(nb):
    """p[gamma] sums to 1 - 5e-7 (a probability vector within the statement's 1e-6) and
    the uniform lies above that total by far more than any rounding: the bonus token is the
    last one with mass, not the last index."""
    bonus = torch.tensor([0.3, 0.0, 0.45, 0.25 - 5e-7, 0.0, 0.0], dtype=torch.float64)
    p = torch.stack([probs(6, 63), bonus])
    q = probs(6, 64).reshape(1, 6)
    drafts = torch.tensor([int(torch.argmax(p[0] / q[0]))])  # p >= q there: always accepted
    args = (p, q, drafts, torch.tensor([0.5], dtype=torch.float64), 1 - 2e-7)
    assert_equal(nb.verify_sampled(*args), ref.verify_sampled(*args), call_text("verify_sampled", *args))


def sampled_bad_inputs():
    p, q, drafts, uniforms, sample = sampled_inputs(3, 6, 70, None, 0)
    zero_q = q.clone()
    zero_q[1] = probs(6, 71, zeros=(int(drafts[1]),))
    return [
        ((p, zero_q, drafts, uniforms, sample), ValueError, "draft_tokens", "draft-with-q-zero"),
        ((p[:3], q, drafts, uniforms, sample), ValueError, "p", "p-rows-not-gamma-plus-1"),
        ((p, q[:2], drafts, uniforms, sample), ValueError, "q", "q-rows-not-gamma"),
        ((p, torch.cat([q, torch.zeros(3, 1, dtype=q.dtype)], 1), drafts, uniforms, sample), ValueError, "q",
         "q-with-another-vocabulary"),
        ((p, q, drafts, uniforms[:2], sample), ValueError, "accept_uniforms", "two-uniforms-for-three-drafts"),
        ((p, q, drafts, (uniforms * 100).long(), sample), TypeError, "accept_uniforms", "integer-uniforms"),
        ((p, q, drafts, torch.tensor([0.5, float("nan"), 0.2], dtype=torch.float64), sample), ValueError,
         "accept_uniforms", "nan-uniform"),
        ((p, q, drafts, uniforms, "0.5"), TypeError, "sample_uniform", "string-sample-uniform"),
        ((p, q, drafts, torch.tensor([0.5, 1.0, 0.2], dtype=torch.float64), sample), ValueError, "accept_uniforms",
         "uniform-equal-to-1"),
        ((p, q, drafts, torch.tensor([0.5, -0.1, 0.2], dtype=torch.float64), sample), ValueError, "accept_uniforms",
         "negative-uniform"),
        ((p, q, drafts, uniforms, 1.0), ValueError, "sample_uniform", "sample-uniform-equal-to-1"),
        ((p, q, drafts.double(), uniforms, sample), TypeError, "draft_tokens", "floating-ids"),
        ((p, q, torch.tensor([0, 6, 1]), uniforms, sample), ValueError, "draft_tokens", "id-equal-to-V"),
        ((p, q * 2, drafts, uniforms, sample), ValueError, "q", "q-sums-to-2"),
    ]


@pytest.mark.ex14_4
@pytest.mark.parametrize("index", range(len(sampled_bad_inputs())), ids=[c[-1] for c in sampled_bad_inputs()])
def test_verify_sampled_rejects_bad_input(nb, index):
    args, exc, names, _ = sampled_bad_inputs()[index]
    assert_raises(nb.verify_sampled, *args, exc=exc, names=names)


# -- Exercise 14.5 -------------------------------------------------------------------------
# (alpha, gamma)
TOKEN_CASES = [(0.8, 4), (0.5, 3), (0.6, 1), (0.9, 7), (0.99, 2), (0.3, 16), (0.0, 0), (0, 5), (0.7, 0), (1.0, 4),
               (1, 0), (1, 9), (0.25, 64)]
NEAR_ONE_CASES = [(1 - 1e-9, 4), (1 - 1e-6, 3), (1 - 1e-12, 1)]


def check_tokens(nb, alpha, gamma, rtol):
    call = call_text("expected_tokens", alpha, gamma)
    got = nb.expected_tokens(alpha, gamma)
    if type(got) is not float:
        raise GradingFailure(f"{call} returned {type(got).__name__} ({got!r}); expected a Python float")
    assert_close(got, ref.expected_tokens(alpha, gamma), call, atol=0.0, rtol=rtol)


@pytest.mark.ex14_5
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("alpha,gamma", TOKEN_CASES, ids=[f"alpha{a}-g{g}" for a, g in TOKEN_CASES])
def test_expected_tokens(nb, alpha, gamma):
    check_tokens(nb, alpha, gamma, TIME_RTOL)


@pytest.mark.ex14_5
@pytest.mark.parametrize("alpha,gamma", NEAR_ONE_CASES, ids=[f"alpha1-minus-{1 - a:.0e}-g{g}"
                                                                 for a, g in NEAR_ONE_CASES])
def test_expected_tokens_near_one(nb, alpha, gamma):
    check_tokens(nb, alpha, gamma, NEAR_ONE_RTOL)


@pytest.mark.ex14_5
@pytest.mark.parametrize("args,exc,names", [
    ((-0.1, 3), ValueError, "alpha"), ((1.5, 3), ValueError, "alpha"), ((float("nan"), 3), ValueError, "alpha"),
    (("0.5", 3), TypeError, "alpha"), ((True, 3), TypeError, "alpha"), ((None, 3), TypeError, "alpha"),
    ((0.5, -1), ValueError, "gamma"), ((0.5, 2.0), TypeError, "gamma"), ((0.5, True), TypeError, "gamma"),
], ids=["negative-alpha", "alpha-above-1", "nan-alpha", "string-alpha", "bool-alpha", "none-alpha",
        "negative-gamma", "float-gamma", "bool-gamma"])
def test_expected_tokens_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.expected_tokens, *args, exc=exc, names=names)


# -- Exercise 14.6 -------------------------------------------------------------------------
LLAMA_8B = {"num_layers": 32, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "num_params": 8_030_261_248,
            "dtype_bytes": 2}
# every size different, so that each term of the model is seen apart from the others
TINY = {"num_layers": 2, "num_heads": 3, "num_kv_heads": 1, "head_dim": 5, "num_params": 7000, "dtype_bytes": 4}
H100_BANDWIDTH, H100_FLOPS = 3.35e12, 989e12

# (name, config, batch_size, context_len, gamma, draft_budget, alpha, bandwidth, peak_flops)
SPEEDUP_CASES = [
    ("llama8b-B1-N4096-g4-budget512", LLAMA_8B, 1, 4096, 4, 512, 0.8, H100_BANDWIDTH, H100_FLOPS),
    ("llama8b-B32-N32768-g3-budget2048", LLAMA_8B, 32, 32768, 3, 2048, 0.7, H100_BANDWIDTH, H100_FLOPS),
    ("llama8b-B256-N131072-g4-budget4096", LLAMA_8B, 256, 131072, 4, 4096, 0.8, H100_BANDWIDTH, H100_FLOPS),
    ("llama8b-B64-N32768-g0", LLAMA_8B, 64, 32768, 0, 1024, 0.9, H100_BANDWIDTH, H100_FLOPS),
    ("llama8b-B8-N1000-budget-above-context", LLAMA_8B, 8, 1000, 2, 4096, 0.6, H100_BANDWIDTH, H100_FLOPS),
    ("llama8b-B512-N1024-g15-verify-compute-bound", LLAMA_8B, 512, 1024, 15, 256, 0.9, H100_BANDWIDTH, H100_FLOPS),
    ("tiny-B1-N1-g1-budget1-alpha1", TINY, 1, 1, 1, 1, 1, 1000, 5000),
    ("tiny-B3-N50-g5-budget7-verify-compute-bound", TINY, 3, 50, 5, 7, 0.5, 10**6, 2 * 10**6),
    ("tiny-B2-N9-g3-alpha0", TINY, 2, 9, 3, 4, 0, 100.0, 10**9),
]
SPEEDUP_KEYS = ("plain_step", "draft_step", "verify_step", "tokens_per_verify", "speedup")


@pytest.mark.ex14_6
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("case", SPEEDUP_CASES, ids=[c[0] for c in SPEEDUP_CASES])
def test_speculative_speedup(nb, case):
    _name, config, *args = case
    call = call_text("speculative_speedup", config, *args)
    got = nb.speculative_speedup(dict(config), *args)
    expected = ref.speculative_speedup(config, *args)
    if not isinstance(got, dict) or sorted(got) != sorted(SPEEDUP_KEYS):
        raise GradingFailure(f"{call} returned {got!r}; expected a dict with the keys {', '.join(SPEEDUP_KEYS)}")
    for key in SPEEDUP_KEYS:
        if type(got[key]) is not float:
            raise GradingFailure(f"{call}[{key!r}] is {type(got[key]).__name__} ({got[key]!r}); expected a Python "
                                 "float")
        assert_close(got[key], expected[key], f"{call}[{key!r}]", atol=0.0, rtol=TIME_RTOL)


@pytest.mark.ex14_6
@pytest.mark.parametrize("batch_size", [1, 16, 256])
def test_speculative_speedup_without_drafts_is_one(nb, batch_size):
    call = call_text("speculative_speedup", LLAMA_8B, batch_size, 65536, 0, 2048, 0.8, H100_BANDWIDTH, H100_FLOPS)
    got = nb.speculative_speedup(dict(LLAMA_8B), batch_size, 65536, 0, 2048, 0.8, H100_BANDWIDTH, H100_FLOPS)
    assert_close(got["speedup"] if isinstance(got, dict) and "speedup" in got else got, 1.0, f"{call}['speedup']",
                 atol=0.0, rtol=TIME_RTOL)


def speedup_args(**change):
    args = {"config": dict(TINY), "batch_size": 2, "context_len": 30, "gamma": 2, "draft_budget": 8, "alpha": 0.5,
            "bandwidth": 1e6, "peak_flops": 1e7}
    args.update(change)
    return args


@pytest.mark.ex14_6
@pytest.mark.parametrize("change,exc,names", [
    ({"config": {k: v for k, v in TINY.items() if k != "head_dim"}}, ValueError, "config"),
    ({"config": {**TINY, "num_params": 7000.0}}, TypeError, "config"),
    ({"config": {**TINY, "num_kv_heads": 0}}, ValueError, "config"),
    ({"config": list(TINY.values())}, TypeError, "config"),
    ({"batch_size": 0}, ValueError, "batch_size"), ({"context_len": 0}, ValueError, "context_len"),
    ({"gamma": -1}, ValueError, "gamma"), ({"gamma": 2.0}, TypeError, "gamma"),
    ({"draft_budget": 0}, ValueError, "draft_budget"), ({"alpha": 1.5}, ValueError, "alpha"),
    ({"bandwidth": 0}, ValueError, "bandwidth"), ({"peak_flops": -1e9}, ValueError, "peak_flops"),
    ({"bandwidth": "fast"}, TypeError, "bandwidth"), ({"peak_flops": math.inf}, ValueError, "peak_flops"),
], ids=["missing-head_dim", "float-num_params", "zero-num_kv_heads", "list-config", "zero-batch", "zero-context",
        "negative-gamma", "float-gamma", "zero-budget", "alpha-above-1", "zero-bandwidth", "negative-peak",
        "string-bandwidth", "infinite-peak"])
def test_speculative_speedup_rejects_bad_input(nb, change, exc, names):
    kwargs = speedup_args(**change)
    assert_raises(nb.speculative_speedup, *kwargs.values(), exc=exc, names=names,
                  call=call_text("speculative_speedup", **kwargs))


# -- Exercise 14.7 -------------------------------------------------------------------------
# (name, block_table, refcounts, seq_len, new_len, page_size)
ROLLBACK_CASES = [
    ("P4-N15-to-9-mid-page", [3, 0, 5, 2], [1, 0, 1, 1, 0, 1], 15, 9, 4),
    ("P4-N16-to-8-page-boundary", [4, 1, 6, 2], [0, 1, 1, 0, 1, 0, 1], 16, 8, 4),
    ("P4-N14-to-0", [2, 5, 0, 3], [1, 0, 1, 2, 0, 3], 14, 0, 4),
    ("P4-N13-to-13-nothing", [1, 2, 0, 3], [1, 1, 1, 1], 13, 13, 4),
    ("P4-N15-to-13-same-pages", [1, 2, 0, 3], [1, 1, 1, 1], 15, 13, 4),
    ("P4-N20-to-5-shared-tail", [7, 2, 9, 4, 0], [2, 0, 1, 0, 3, 0, 0, 1, 0, 1], 20, 5, 4),
    ("P4-N20-to-6-every-tail-page-shared", [7, 2, 9, 4, 0], [2, 0, 2, 0, 3, 0, 0, 1, 0, 2], 20, 6, 4),
    ("P1-N5-to-2", [4, 3, 2, 1, 0], [1, 1, 1, 1, 1], 5, 2, 1),
    ("P16-N33-to-17", [0, 2, 1], [1, 1, 1], 33, 17, 16),
    ("P8-N0-to-0-empty", [], [0, 0], 0, 0, 8),
    ("P3-N9-to-3-freed-in-table-order", [8, 6, 1], [0, 1, 0, 0, 0, 0, 1, 0, 1], 9, 3, 3),
]


@pytest.mark.ex14_7
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("case", ROLLBACK_CASES, ids=[c[0] for c in ROLLBACK_CASES])
def test_rollback_pages(nb, case):
    _name, table, counts, seq_len, new_len, page_size = case
    call = call_text("rollback_pages", table, counts, seq_len, new_len, page_size)
    got = nb.rollback_pages(list(table), list(counts), seq_len, new_len, page_size)
    assert_equal(got, ref.rollback_pages(table, counts, seq_len, new_len, page_size), call)


@pytest.mark.ex14_7
@pytest.mark.parametrize("case", ROLLBACK_CASES[:7], ids=[c[0] for c in ROLLBACK_CASES[:7]])
def test_rollback_pages_leaves_its_arguments_alone(nb, case):
    _name, table, counts, seq_len, new_len, page_size = case
    table_arg, counts_arg = list(table), list(counts)
    nb.rollback_pages(table_arg, counts_arg, seq_len, new_len, page_size)
    call = call_text("rollback_pages", table, counts, seq_len, new_len, page_size)
    assert_equal(table_arg, table, f"block_table after {call} (new lists are returned; the arguments stay)")
    assert_equal(counts_arg, counts, f"refcounts after {call} (new lists are returned; the arguments stay)")


@pytest.mark.ex14_7
@pytest.mark.parametrize("args,exc,names", [
    (([3, 0, 5], [1, 1, 1, 1, 1, 1], 15, 9, 4), ValueError, "block_table"),
    (([3, 0, 5, 2], [1, 1, 1, 1, 1, 1], 15, 16, 4), ValueError, "new_len"),
    (([3, 0, 5, 2], [1, 1, 1, 1, 1, 1], 15, -1, 4), ValueError, "new_len"),
    (([3, 0, 5, 6], [1, 1, 1, 1, 1, 1], 15, 9, 4), ValueError, "refcounts"),
    (([3, 0, 5, 2], [1, 1, 0, 1, 1, 1], 15, 9, 4), ValueError, "refcounts"),
    (([3, 0, 5, 3], [1, 1, 1, 1, 1, 1], 15, 9, 4), ValueError, "block_table"),
    (([3, 0, 5, 2], [1, 1, 1, 1, 1, 1], 15, 9, 0), ValueError, "page_size"),
    (([3, 0, 5, 2], [1, 1, 1, 1, 1, 1], 15.0, 9, 4), TypeError, "seq_len"),
    (((3, 0, 5, 2), [1, 1, 1, 1, 1, 1], 15, 9, 4), TypeError, "block_table"),
    (([3, 0, 5, 2], [1, 1, 1, 1, 1.0, 1], 15, 9, 4), TypeError, "refcounts"),
    (([3, 0, 5, 2], [1, 1, 1, 1, -1, 1], 15, 9, 4), ValueError, "refcounts"),
], ids=["table-shorter-than-seq_len", "new_len-above-seq_len", "negative-new_len", "page-outside-refcounts",
        "held-page-with-count-0", "page-twice", "zero-page_size", "float-seq_len", "tuple-block_table",
        "float-refcount", "negative-refcount"])
def test_rollback_pages_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.rollback_pages, *args, exc=exc, names=names)


# -- Exercise 14.8 -------------------------------------------------------------------------
HKV, D = 2, 3


def tokens_kv(start, n, dtype=torch.float64):
    """Keys and values (H_kv, n, d) of positions start .. start + n - 1, each entry
    naming its position (so a wrong position is seen in the values too)."""
    pos = torch.arange(start, start + n, dtype=torch.float64).reshape(1, n, 1)
    head = torch.arange(HKV, dtype=torch.float64).reshape(HKV, 1, 1)
    channel = torch.arange(D, dtype=torch.float64).reshape(1, 1, D)
    k = pos + 0.25 * head + 0.0625 * channel
    return k.to(dtype), (-k).to(dtype)


# (name, num_sink, window, max_rollback, ops): ("a", T) appends T new tokens (written
# for the positions the reference's sequence gives them), ("r", n) rolls back n
CACHE_SCRIPTS = [
    ("S2-W4-R3-appends-and-rollbacks", 2, 4, 3,
     [("a", 3), ("a", 1), ("a", 1), ("a", 1), ("a", 1), ("a", 1), ("r", 2), ("a", 3), ("r", 3), ("a", 1), ("r", 0),
      ("a", 4), ("r", 1)]),
    ("S0-W3-R2-ring-only", 0, 3, 2, [("a", 5), ("r", 2), ("a", 1), ("a", 1), ("r", 2), ("a", 6), ("r", 1), ("a", 2)]),
    ("S4-W2-R4-sinks-partly-rolled-back", 4, 2, 4, [("a", 3), ("r", 2), ("a", 6), ("r", 5), ("a", 2), ("r", 3),
                                                   ("a", 9)]),
    ("S2-W3-R2-chunks-longer-than-the-cache", 2, 3, 2, [("a", 20), ("r", 2), ("a", 7), ("r", 1), ("a", 11), ("r", 2)]),
    ("S2-W4-R1-everything-rolled-back", 2, 4, 1, [("a", 3), ("r", 3), ("a", 2), ("a", 5), ("r", 1), ("a", 1)]),
    ("S1-W1-R3-window-of-one", 1, 1, 3, [("a", 4), ("r", 3), ("a", 2), ("a", 1), ("r", 2), ("r", 1), ("a", 5)]),
    # the tokens past the sinks are long gone, but a sequence within its sinks shows no window
    ("S2-W2-R1-back-into-the-sinks", 2, 2, 1, [("a", 10), ("r", 9), ("a", 4), ("r", 1), ("a", 3)]),
]


def run_script(cache, model, ops, dtype=torch.float64):
    """Apply ``ops`` to the notebook's cache and the reference's; after each, what each
    shows: [{"len", "positions"}] and the keys and values, for the trace. The sequence's
    length is counted here (a recorded reference has no len())."""
    got, expected, tensors, length = [], [], [], 0
    for op, n in ops:
        if op == "a":
            k, v = tokens_kv(length, n, dtype)
            cache.append(k.clone(), v.clone())
            model.append(k, v)
            length += n
        else:
            cache.rollback(n)
            model.rollback(n)
            length -= n
        k, v, positions = cache.keys_values()
        want_k, want_v, want_positions = model.keys_values()
        got.append({"len": len(cache), "positions": positions.tolist() if isinstance(positions, torch.Tensor)
                    else positions})
        expected.append({"len": length, "positions": want_positions.tolist()})
        tensors.append(((k, v, positions), (want_k, want_v)))
    return got, expected, tensors


def op_text(op, n):
    return f"append of {n} token(s)" if op == "a" else f"rollback({n})"


def ops_text(ops, i):
    return "after " + ", ".join(op_text(*o) for o in ops[:i + 1])


def before_op(ops, i):
    """The cache before operation i, and that operation, for assert_trace's message."""
    return f"{ops_text(ops, i - 1) if i else 'a new cache'}; operation {i}: {op_text(*ops[i])}"


def check_script(nb, num_sink, window, max_rollback, ops, dtype=torch.float64):
    label = f"DraftWindowCache({num_sink}, {window}, {max_rollback})"
    cache, model = nb.DraftWindowCache(num_sink, window, max_rollback), ref.DraftWindowCache(num_sink, window,
                                                                                              max_rollback)
    got, expected, tensors = run_script(cache, model, ops, dtype)
    assert_trace(got, expected, f"{label}: len() and keys_values() positions", unit="operation",
                 state=lambda i: before_op(ops, i))
    for i, ((k, v, positions), (want_k, want_v)) in enumerate(tensors):
        where = f"{label} {ops_text(ops, i)}: keys_values()"
        if not isinstance(positions, torch.Tensor) or positions.dtype != torch.int64:
            raise GradingFailure(f"{where} returned positions of {getattr(positions, 'dtype', type(positions))}; "
                                 "expected an int64 tensor")
        assert_close(k, want_k, where, atol=0.0, dtype=dtype, what="the keys, in position order")
        assert_close(v, want_v, where, atol=0.0, dtype=dtype, what="the values, in position order")


@pytest.mark.ex14_8
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("case", CACHE_SCRIPTS, ids=[c[0] for c in CACHE_SCRIPTS])
def test_draft_window_cache(nb, case):
    _name, num_sink, window, max_rollback, ops = case
    check_script(nb, num_sink, window, max_rollback, ops)


@pytest.mark.ex14_8
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_draft_window_cache_keeps_dtype(nb, dtype):
    check_script(nb, 2, 3, 2, [("a", 4), ("a", 3), ("r", 2), ("a", 1)], dtype)


# (name, num_sink, window, max_rollback, ops before, refused rollback)
REFUSED_CASES = [
    ("S1-W2-R0-no-room", 1, 2, 0, [("a", 10)], 1),
    ("S2-W3-R2-past-the-held-tokens", 2, 3, 2, [("a", 12), ("r", 2)], 1),
    ("S2-W3-R2-more-than-len", 2, 3, 2, [("a", 4)], 5),
    ("S0-W4-R2-three-with-room-for-two", 0, 4, 2, [("a", 9)], 3),
]


@pytest.mark.ex14_8
@pytest.mark.points(2)
@pytest.mark.parametrize("case", REFUSED_CASES, ids=[c[0] for c in REFUSED_CASES])
def test_draft_window_cache_refuses_what_it_cannot_roll_back(nb, case):
    """A rollback that needs tokens the cache no longer holds (or more than the sequence
    has) raises ValueError naming n, and leaves the cache as it was."""
    _name, num_sink, window, max_rollback, ops, n = case
    label = f"DraftWindowCache({num_sink}, {window}, {max_rollback}) {ops_text(ops, len(ops) - 1)}"
    cache, model = nb.DraftWindowCache(num_sink, window, max_rollback), ref.DraftWindowCache(num_sink, window,
                                                                                              max_rollback)
    _, expected, _ = run_script(cache, model, ops)
    assert_raises(cache.rollback, n, exc=ValueError, names="n", call=f"{label}: rollback({n})")
    k, v, positions = cache.keys_values()
    want_k, want_v, want_positions = model.keys_values()
    after = f"{label}, then the refused rollback({n}): keys_values()"
    assert_equal(len(cache), expected[-1]["len"], f"{label}, then the refused rollback({n}): len()")
    assert_equal(positions.tolist() if isinstance(positions, torch.Tensor) else positions, want_positions.tolist(),
                 f"{after} positions")
    assert_close(k, want_k, after, atol=0.0, what="the keys")


@pytest.mark.ex14_8
def test_draft_window_cache_rejects_bad_input(nb):
    assert_raises(nb.DraftWindowCache, -1, 4, 2, exc=ValueError, names="num_sink")
    assert_raises(nb.DraftWindowCache, 2, 0, 2, exc=ValueError, names="window")
    assert_raises(nb.DraftWindowCache, 2, 4, -1, exc=ValueError, names="max_rollback")
    assert_raises(nb.DraftWindowCache, 2, 4.0, 2, exc=TypeError, names="window")
    cache = nb.DraftWindowCache(2, 4, 2)
    k, v = tokens_kv(0, 3)
    cache.append(k, v)
    assert_raises(cache.append, k[:1], v[:1], exc=ValueError, names="k", call="append(k with another H_kv)")
    assert_raises(cache.append, k[..., :2], v[..., :2], exc=ValueError, names="k", call="append(k with another d)")
    assert_raises(cache.append, k.float(), v.float(), exc=ValueError, names="k", call="append(k in another dtype)")
    assert_raises(cache.append, k[0], v[0], exc=ValueError, names="k", call="append(2-D k)")
    assert_raises(cache.append, k[None], v[None], exc=ValueError, names="k", call="append(4-D k)")
    assert_raises(cache.append, k[:, :0], v[:, :0], exc=ValueError, names="k", call="append(k with T=0)")
    assert_raises(cache.append, k.long(), v.long(), exc=TypeError, names="k", call="append(integer k)")
    assert_raises(cache.append, k, v[:, :2], exc=ValueError, names="v", call="append(v with another T)")
    assert_raises(cache.rollback, -1, exc=ValueError, names="n", call="rollback(-1)")
    assert_raises(cache.rollback, 1.0, exc=TypeError, names="n", call="rollback(1.0)")
    assert_equal(len(cache), 3, "len() after rejected appends and rollbacks (they must change nothing)")


# Memory, measured by the judge from outside the notebook's process (grading.judge.measure):
# a long stream whose keys and values are 98 MiB in all, while the cache may hold
# num_sink + window + max_rollback = 76 tokens of them (38 KiB) and one chunk on its way in.
MEMORY_STREAM, MEMORY_CHUNK, MEMORY_D = 200_000, 5_000, 64
MEMORY_CACHE = (4, 64, 8)  # num_sink, window, max_rollback
MEMORY_ALLOWED = 48 * 2**20  # held and added during the calls


@pytest.mark.ex14_8
@pytest.mark.points(2)
def test_draft_window_cache_holds_only_its_window(nb):
    """200,000 tokens appended in chunks: the cache keeps the sinks, the window and the
    rollback margin, never the stream (the contestant's whole memory is measured)."""
    num_sink, window, max_rollback = MEMORY_CACHE
    base = torch.randn(1, MEMORY_CHUNK, MEMORY_D, generator=torch.Generator().manual_seed(80))
    call = f"DraftWindowCache{MEMORY_CACHE} after {MEMORY_STREAM:,} tokens of (1, T, {MEMORY_D}) fp32 appended"
    try:
        with peak_memory(nb) as peak:
            cache = nb.DraftWindowCache(num_sink, window, max_rollback)
            for start in range(0, MEMORY_STREAM, MEMORY_CHUNK):
                k = base.clone()
                k[0, :, 0] = torch.arange(start, start + MEMORY_CHUNK, dtype=torch.float32)  # its position
                cache.append(k, -k)
            k, v, positions = cache.keys_values()
    except Unmeasurable as exc:
        pytest.skip(f"memory cannot be measured here: {exc}")
    kept = ref.visible_positions(MEMORY_STREAM, num_sink, window)
    assert_equal(positions.tolist() if isinstance(positions, torch.Tensor) else positions, kept,
                 f"{call}: keys_values() positions")
    expected = base[:, [p % MEMORY_CHUNK for p in kept]].clone()
    expected[0, :, 0] = torch.tensor(kept, dtype=torch.float32)
    assert_close(k, expected, f"{call}: keys_values()", atol=0.0, dtype=torch.float32, what="the keys")
    if peak.bytes > MEMORY_ALLOWED:
        mib = 2**20
        raise GradingFailure(
            f"{call} used {peak.bytes / mib:.0f} MiB ({peak.held / mib:.0f} MiB held when it started, "
            f"{peak.charged / mib:.0f} MiB more at its peak, measured by the {peak.how}); keeping every key and value "
            f"is {2 * MEMORY_STREAM * MEMORY_D * 4 / mib:.0f} MiB, and a cache of "
            f"{num_sink + window + max_rollback} tokens needs no more than {MEMORY_ALLOWED / mib:.0f} MiB",
            # what diagnosis compares: the bound, not the measured MiB, which move from run to run
            {"kind": "message", "text": f"{call} used more than {MEMORY_ALLOWED / mib:.0f} MiB"})
