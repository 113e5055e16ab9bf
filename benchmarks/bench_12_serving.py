"""``make bench`` records of Chapter 12: the serving trace of the chapter, costed on a
modelled H100 SXM, and the snapshot resume of a hybrid model's recurrent state.

Nothing here is timed: the trace runs the scheduler of Exercise 12.5 (the chapter's
solutions, ``benchmarks.solutions``) on a clock whose steps are costed with Chapter 1's
time model, so every record is deterministic. The trace is the chapter's: 32 questions
on one 32K-token document, Llama 3.1 8B in bf16, pages of 16 tokens. The time model
(``step_seconds``), the trace and the clocked loop (``serve``) are the chapter's own:
chapters/12_serving.md shows them from this file and runs them, so there is one copy.

The ``serve.smollm2_*`` records are measured: the same scheduler (Exercise 12.6's
``run_trace``) plans a trace of questions after one shared system prompt, and
``modellab.serving`` executes the plan on SmolLM2-135M on the CPU, with and without
prefix hits, in paired rounds. ``make bench`` measures one prompt length; the chapter
reads the sweep over several from ``benchmarks/results/12_serving_smollm2.json``, which
states the date and the machine. Refresh it with

    .venv/bin/python -m benchmarks.bench_12_serving --write
"""

from __future__ import annotations

import datetime
import json
import math
import os
import random
import sys

import torch

from benchmarks.records import Record, median_ratio, paired_times
from benchmarks.results import machine
from benchmarks.solutions import load_solutions
from grading.layout import BENCH_RESULTS, BUILD, ROOT

BANDWIDTH, PEAK_FLOPS = 3.35e12, 989e12  # H100 SXM: HBM bytes/s, dense BF16 FLOP/s
DEVICE_BYTES = 81_559 * 2**20  # what an H100 80GB reports
LAYERS, HEADS, KV_HEADS, HEAD_DIM, PARAMS = 32, 32, 8, 128, 8_030_000_000  # Llama 3.1 8B
WEIGHT_BYTES, RESERVE, PAGE = 2 * PARAMS, 8 * 2**30, 16
DOC_LEN, NUM_REQ, OUTPUT, MEAN_GAP = 32768, 32, 96, 1.5
CHUNKED = 512  # the token budget the chapter recommends


def step_seconds(batch, kv_per_token):
    """Chapter 1's lower bound on one step's seconds: Llama 3.1 8B, bf16, H100 SXM.

    batch: [(cached tokens, new tokens), ...], one pair per request in the step.
    The step reads every weight once and each request's cache, and does 2 FLOPs per
    parameter per new token plus 4 * head_dim per attended key, query head and layer."""
    bytes_moved = WEIGHT_BYTES + sum(kv_per_token * (c + n) for c, n in batch)
    flops = sum(
        2 * PARAMS * n + 4 * LAYERS * HEADS * HEAD_DIM * n * (c + (n + 1) / 2)
        for c, n in batch
    )
    return max(bytes_moved / BANDWIDTH, flops / PEAK_FLOPS)


def trace():
    """The chapter's arrivals (seconds) and question lengths, from the same seed."""
    rng = random.Random(1)
    arrivals, t = [], 0.0
    for _ in range(NUM_REQ):
        t += rng.expovariate(1 / MEAN_GAP)
        arrivals.append(round(t, 3))
    return arrivals, [rng.randrange(64, 256) for _ in range(NUM_REQ)]


def serve(sol, kv_per_token, num_pages, token_budget, prefix_cache):
    """Run the trace on a clock with ``sol.schedule_step`` (Exercise 12.5).

    Returns the steps of each request's tokens, every step's seconds and the tokens
    computed in all."""
    arrivals, questions = trace()
    doc_cached = (DOC_LEN // PAGE) * PAGE  # the document's full blocks
    req = [
        {"id": i, "arrival": i, "num_tokens": DOC_LEN + questions[i], "computed": 0}
        for i in range(NUM_REQ)
    ]
    running, waiting, free, clock, doc_ready = [], [], num_pages, 0.0, False
    seconds, token_steps, computed, arrived = [], {i: [] for i in range(NUM_REQ)}, 0, 0
    while any(len(s) < OUTPUT for s in token_steps.values()):
        # requests that arrived during the last step join before this one
        while arrived < NUM_REQ and arrivals[arrived] <= clock:
            waiting.append(req[arrived])
            arrived += 1
        if prefix_cache and doc_ready:  # the document's blocks are in the cache
            for r in waiting:
                r["computed"] = max(r["computed"], doc_cached)
        if not running and not waiting:  # idle until the next arrival: an empty step
            seconds.append(arrivals[arrived] - clock)
            clock = arrivals[arrived]
            continue
        result = sol.schedule_step(running, waiting, free, PAGE, token_budget)
        free = result["free_pages"]
        for rid in result["preempted"]:  # recomputed later, from the start
            running.remove(req[rid])
            req[rid]["computed"] = 0
            waiting.append(req[rid])
        batch = [(req[rid]["computed"], n) for rid, n in result["scheduled"]]
        seconds.append(step_seconds(batch, kv_per_token))
        clock += seconds[-1]
        for rid, n in result["scheduled"]:
            r = req[rid]
            if r in waiting:
                waiting.remove(r)
                running.append(r)
            r["computed"] += n
            computed += n
            doc_ready = doc_ready or r["computed"] >= doc_cached
            if r["computed"] == r["num_tokens"]:  # it generates a token
                token_steps[rid].append(len(seconds) - 1)
                r["num_tokens"] += 1
                if len(token_steps[rid]) == OUTPUT:
                    running.remove(r)
                    free += math.ceil(r["computed"] / PAGE)
    return token_steps, seconds, computed


def p99(sol, kv_per_token, num_pages, token_budget, prefix_cache):
    """TTFT and ITL p99 of the trace, and the tokens it computed."""
    token_steps, seconds, computed = serve(sol, kv_per_token, num_pages, token_budget, prefix_cache)
    arrivals, _ = trace()
    return sol.latency_percentiles(token_steps, dict(enumerate(arrivals)), seconds, 99), computed


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


# -- SmolLM2-135M on the CPU, planned by the chapter's scheduler ---------------------------
SMOL_RESULTS = BENCH_RESULTS / "12_serving_smollm2.json"
SMOL_BUILD_RESULTS = BUILD / "bench" / "12_serving_smollm2.json"
SMOL_PAGE, SMOL_BUDGET, SMOL_OUTPUT = 16, 64, 8  # tokens per page, per step, answered
SMOL_SYSTEM = 256  # the shared prompt of make bench's records (a whole number of pages)
SMOL_SWEEP = (64, 256, 1024)  # the shared prompts of the committed sweep
SMOL_ROUNDS = 3  # paired rounds (after one warm-up of each)
SMOL_QUESTIONS = (
    "What is a page of the cache?", "Why is the prefill cut into chunks?", "What does a prefix hit save?",
    "When is a request preempted?", "Why does decoding read every weight?", "What is a token budget?",
)


def smollm2_requests(tokenizer, system_len, prefix_cache):
    """One request per question, each the first ``system_len`` tokens of the long text
    (the shared system prompt) followed by the question; with ``prefix_cache``, every
    request after the first finds the system prompt's full pages in the cache."""
    from modellab import long_text_ids
    from modellab.serving import Request

    system = long_text_ids(tokenizer, system_len).tolist()
    requests = []
    for i, question in enumerate(SMOL_QUESTIONS):
        prompt = system + tokenizer(" " + question).input_ids
        hit = min(system_len, (len(prompt) - 1) // SMOL_PAGE * SMOL_PAGE) if prefix_cache and i else 0
        requests.append(Request(i, prompt, SMOL_OUTPUT, hit - hit % SMOL_PAGE))
    return requests


def smollm2_pages(requests) -> int:
    """Pages for every request's whole sequence at once: no preemption."""
    return sum(math.ceil((len(r.prompt) + r.max_output) / SMOL_PAGE) for r in requests)


def smollm2_plan(sol, requests, pages: int) -> dict:
    """Exercise 12.6's ``run_trace`` over ``requests`` in ``pages`` pages: the first at step
    0, the others one a step once its prompt is computed, so that their hits exist.
    Returns its ``steps`` and ``preempted``."""
    from modellab.serving import staggered_trace

    return sol.run_trace(staggered_trace(requests, SMOL_BUDGET), pages, SMOL_PAGE, SMOL_BUDGET)



def machine_text() -> str:
    """This machine in one line: CPU, family and model, vector width, cores and threads."""
    m = machine(torch.get_num_threads())
    width = "AVX-512" if "avx512f" in m["cpu_flags"] else "AVX2" if "avx2" in m["cpu_flags"] else "no AVX2"
    return (f"{m['cpu_model']} (family {m['cpu_family']}, model {m['cpu_model_number']}, {width}), "
            f"{m['logical_cores']} cores, {m['torch_threads']} threads, torch {m['torch']}")


def measure_smollm2(system_lens=SMOL_SWEEP, rounds=SMOL_ROUNDS, log=print) -> dict:
    """For each shared-prompt length: tokens computed, forward passes and seconds of the
    trace without and with prefix hits (paired rounds), and whether every request's
    greedy tokens equal one-request-at-a-time decoding."""
    import modellab
    from modellab.serving import one_at_a_time, run_schedule

    sol = load_solutions("12_serving")
    hf, tok = modellab.load_model()
    model = modellab.Llama(hf)
    out = {"date": datetime.date.today().isoformat(), "machine": machine_text(),
           "machine_detail": machine(torch.get_num_threads()),
           "model": "SmolLM2-135M-Instruct, fp32, our decode loop (modellab)",
           "page_size": SMOL_PAGE, "token_budget": SMOL_BUDGET, "output": SMOL_OUTPUT,
           "questions": len(SMOL_QUESTIONS), "rounds": rounds, "lengths": {}}
    for system_len in system_lens:
        row, runs = {}, {}
        alone = one_at_a_time(model, smollm2_requests(tok, system_len, False))  # hits do not change a prompt
        for cache in (False, True):
            requests = smollm2_requests(tok, system_len, cache)
            steps = smollm2_plan(sol, requests, smollm2_pages(requests))["steps"]  # no preemption
            runs[cache] = (requests, steps)
            result = run_schedule(model, requests, steps, SMOL_PAGE)
            key = "cached" if cache else "uncached"
            row[key] = {"computed": result.computed, "passes": result.passes,
                        "matches": sum(result.tokens[i] == alone[i] for i in alone)}
        times = paired_times([lambda c=c: run_schedule(model, *runs[c], SMOL_PAGE) for c in (False, True)],
                             rounds=rounds)
        row["uncached"]["seconds"], row["cached"]["seconds"] = times
        row["speedup"] = median_ratio(*times)
        out["lengths"][str(system_len)] = row
        log(f"shared prompt {system_len}: computed {row['uncached']['computed']} -> {row['cached']['computed']} "
            f"tokens, speedup {row['speedup']:.2f}x, greedy matches {row['uncached']['matches']}+"
            f"{row['cached']['matches']} of {2 * len(SMOL_QUESTIONS)}")
    return out


def smollm2_records(results: dict, system_len=SMOL_SYSTEM) -> list[Record]:
    row = results["lengths"][str(system_len)]
    n = 2 * results["questions"]
    where = (f"{results['questions']} questions after a {system_len}-token shared prompt, {results['output']} tokens "
             f"each, budget {results['token_budget']}, {results['machine']}")
    return [
        Record("serve.smollm2_greedy_match_batched", (row["uncached"]["matches"] + row["cached"]["matches"]) / n,
               "ratio", "== 1.0", note=f"requests whose greedy tokens equal one-at-a-time decoding, of {n}: {where}"),
        Record("serve.smollm2_prefix_speedup", row["speedup"], "x", ">= 1.5",
               note=f"wall time without / with prefix hits, median of {results['rounds']} paired rounds; tokens "
                    f"computed {row['uncached']['computed']} -> {row['cached']['computed']}: {where}"),
    ]


def run() -> list[Record]:
    sol = load_solutions("12_serving")
    ch1 = load_solutions("01_kv_memory")
    kv_per_token = ch1.kv_bytes_per_token(LAYERS, KV_HEADS, HEAD_DIM, "bf16")
    num_pages = ch1.max_tokens(DEVICE_BYTES, WEIGHT_BYTES, kv_per_token, RESERVE, PAGE) // PAGE
    prompt_tokens = sum(trace()[1]) + NUM_REQ * DOC_LEN
    whole, _ = p99(sol, kv_per_token, num_pages, None, False)
    chunked, computed_chunked = p99(sol, kv_per_token, num_pages, CHUNKED, False)
    _, computed_cached = p99(sol, kv_per_token, num_pages, CHUNKED, True)
    note = f"the chapter's trace, Llama 3.1 8B bf16 on a modelled H100 SXM, budget {CHUNKED} vs whole prompts"
    smollm2 = measure_smollm2((SMOL_SYSTEM,), log=lambda line: print(line, flush=True))
    SMOL_BUILD_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    SMOL_BUILD_RESULTS.write_text(json.dumps(smollm2, indent=1) + "\n")
    return [
        Record("serve.prefix_hit_rate_shared_prompt", (computed_chunked - computed_cached) / prompt_tokens, "ratio",
               note="prompt tokens found in the prefix cache, 32 questions on one 32K-token document"),
        Record("serve.prefill_tokens_saved", computed_chunked - computed_cached, "tokens",
               note="tokens the trace no longer computes with prefix caching"),
        Record("serve.ttft_p99_chunked_over_unchunked", chunked["ttft"] / whole["ttft"], "x", note=note),
        Record("serve.itl_p99_chunked_over_unchunked", chunked["itl"] / whole["itl"], "x", note=note),
        Record("serve.hybrid_snapshot_resume_max_abs_err", snapshot_error(sol), "abs", "<= 1e-10",
               note="delta rule, float64, snapshots every 4 blocks of 16, every block boundary of 200 tokens"),
        *smollm2_records(smollm2, SMOL_SYSTEM),
    ]


if __name__ == "__main__":
    # --write: the sweep, stored in benchmarks/results/ (the file the chapter reads).
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)))
    target = SMOL_RESULTS if "--write" in sys.argv else SMOL_BUILD_RESULTS
    target.parent.mkdir(parents=True, exist_ok=True)
    results = measure_smollm2(log=lambda line: print(line, flush=True))
    target.write_text(json.dumps(results, indent=1) + "\n")
    for r in smollm2_records(results):
        print(f"{r.name}: {r.value:.4g} ({r.note})")
    print(f"wrote {target.relative_to(ROOT)}")
