"""``make bench`` records of Chapter 12: the serving trace of the chapter, costed on a
modelled H100 SXM, and the snapshot resume of a hybrid model's recurrent state.

Nothing here is timed: the trace runs the scheduler of Exercise 12.5 (the chapter's
solutions, ``benchmarks.solutions``) on a clock whose steps are costed with Chapter 1's
time model, so every record is deterministic. The trace is the chapter's: 32 questions
on one 32K-token document, Llama 3.1 8B in bf16, pages of 16 tokens. The loop is the
chapter's ``serve`` (chapters/12_serving.md), repeated here because the chapter is a page,
not a module; keep the two alike.

The records of issue 39 that need the real model (``serve.smollm2_*``) are not measured
yet: the chapter does not drive SmolLM2 with its scheduler.
"""

from __future__ import annotations

import math
import random

import torch

from benchmarks.records import Record
from benchmarks.solutions import load_solutions

BANDWIDTH, PEAK_FLOPS = 3.35e12, 989e12  # H100 SXM: HBM bytes/s, dense BF16 FLOP/s
DEVICE_BYTES = 81_559 * 2**20  # what an H100 80GB reports
LAYERS, HEADS, KV_HEADS, HEAD_DIM, PARAMS = 32, 32, 8, 128, 8_030_000_000  # Llama 3.1 8B
WEIGHT_BYTES, RESERVE, PAGE = 2 * PARAMS, 8 * 2**30, 16
DOC_LEN, NUM_REQ, OUTPUT, MEAN_GAP = 32768, 32, 96, 1.5
CHUNKED = 512  # the token budget the chapter recommends


def trace():
    """The chapter's arrivals (seconds) and question lengths, from the same seed."""
    rng = random.Random(1)
    arrivals, t = [], 0.0
    for _ in range(NUM_REQ):
        t += rng.expovariate(1 / MEAN_GAP)
        arrivals.append(round(t, 3))
    return arrivals, [rng.randrange(64, 256) for _ in range(NUM_REQ)]


def serve(sol, kv_per_token, num_pages, token_budget, prefix_cache):
    """The chapter's clocked loop: token steps, step seconds and tokens computed."""
    arrivals, questions = trace()
    doc_cached = (DOC_LEN // PAGE) * PAGE

    def step_seconds(batch):
        bytes_moved = WEIGHT_BYTES + sum(kv_per_token * (c + n) for c, n in batch)
        flops = sum(2 * PARAMS * n + 4 * LAYERS * HEADS * HEAD_DIM * n * (c + (n + 1) / 2) for c, n in batch)
        return max(bytes_moved / BANDWIDTH, flops / PEAK_FLOPS)

    req = [{"id": i, "arrival": i, "num_tokens": DOC_LEN + questions[i], "computed": 0} for i in range(NUM_REQ)]
    running, waiting, free, clock, doc_ready = [], [], num_pages, 0.0, False
    seconds, token_steps, computed, arrived = [], {i: [] for i in range(NUM_REQ)}, 0, 0
    while any(len(s) < OUTPUT for s in token_steps.values()):
        while arrived < NUM_REQ and arrivals[arrived] <= clock:
            waiting.append(req[arrived])
            arrived += 1
        if prefix_cache and doc_ready:
            for r in waiting:
                r["computed"] = max(r["computed"], doc_cached)
        if not running and not waiting:
            seconds.append(arrivals[arrived] - clock)
            clock = arrivals[arrived]
            continue
        result = sol.schedule_step(running, waiting, free, PAGE, token_budget)
        free = result["free_pages"]
        for rid in result["preempted"]:
            running.remove(req[rid])
            req[rid]["computed"] = 0
            waiting.append(req[rid])
        seconds.append(step_seconds([(req[rid]["computed"], n) for rid, n in result["scheduled"]]))
        clock += seconds[-1]
        for rid, n in result["scheduled"]:
            r = req[rid]
            if r in waiting:
                waiting.remove(r)
                running.append(r)
            r["computed"] += n
            computed += n
            doc_ready = doc_ready or r["computed"] >= doc_cached
            if r["computed"] == r["num_tokens"]:
                token_steps[rid].append(len(seconds) - 1)
                r["num_tokens"] += 1
                if len(token_steps[rid]) == OUTPUT:
                    running.remove(r)
                    free += math.ceil(r["computed"] / PAGE)
    p99 = sol.latency_percentiles(token_steps, dict(enumerate(arrivals)), seconds, 99)
    return p99, computed, sum(questions) + NUM_REQ * DOC_LEN


def snapshot_error(sol):
    """Largest |resumed - recomputed| over every block boundary of 200 tokens, float64."""
    g = torch.Generator().manual_seed(0)
    T, d_k, d_v, block = 200, 16, 8, 16
    k = torch.nn.functional.normalize(torch.randn(T, d_k, generator=g, dtype=torch.float64), dim=-1)  # (T, d_k)
    v = torch.randn(T, d_v, generator=g, dtype=torch.float64)  # (T, d_v)
    beta = torch.rand(T, generator=g, dtype=torch.float64)  # (T,)
    S, snapshots = torch.zeros(d_v, d_k, dtype=torch.float64), {}  # (d_v, d_k)
    for t in range(T):
        S = sol.delta_update(S, k[t], v[t], beta[t])
        if (t + 1) % (4 * block) == 0:
            snapshots[t + 1] = S.clone()
    worst = 0.0
    for match in range(0, T + 1, block):
        _, resumed = sol.resume_state(snapshots, match, k, v, beta)
        _, recomputed = sol.resume_state({}, match, k, v, beta)
        worst = max(worst, (resumed - recomputed).abs().max().item())
    return worst


def run() -> list[Record]:
    sol = load_solutions("12_serving")
    ch1 = load_solutions("01_kv_memory")
    kv_per_token = ch1.kv_bytes_per_token(LAYERS, KV_HEADS, HEAD_DIM, "bf16")
    num_pages = ch1.max_tokens(DEVICE_BYTES, WEIGHT_BYTES, kv_per_token, RESERVE, PAGE) // PAGE
    whole, _, prompt_tokens = serve(sol, kv_per_token, num_pages, None, False)
    chunked, computed_chunked, _ = serve(sol, kv_per_token, num_pages, CHUNKED, False)
    _, computed_cached, _ = serve(sol, kv_per_token, num_pages, CHUNKED, True)
    note = f"the chapter's trace, Llama 3.1 8B bf16 on a modelled H100 SXM, budget {CHUNKED} vs whole prompts"
    return [
        Record("serve.prefix_hit_rate_shared_prompt", (computed_chunked - computed_cached) / prompt_tokens, "ratio",
               note="prompt tokens found in the prefix cache, 32 questions on one 32K-token document"),
        Record("serve.prefill_tokens_saved", computed_chunked - computed_cached, "tokens",
               note="tokens the trace no longer computes with prefix caching"),
        Record("serve.ttft_p99_chunked_over_unchunked", chunked["ttft"] / whole["ttft"], "x", note=note),
        Record("serve.itl_p99_chunked_over_unchunked", chunked["itl"] / whole["itl"], "x", note=note),
        Record("serve.hybrid_snapshot_resume_max_abs_err", snapshot_error(sol), "abs", "<= 1e-10",
               note="delta rule, float64, snapshots every 4 blocks of 16, every block boundary of 200 tokens"),
    ]
