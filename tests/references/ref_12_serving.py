"""Independent references for Chapter 12: a prefix cache, a scheduler and a trace
replayed one page, one request, one step at a time in plain Python; the recurrent state
recomputed from zero in float64; every offload plan tried in exact fractions. Never
imported from a notebook.

Conventions (the chapter's): a sequence of n tokens fills ceil(n / page_size) pages;
requests are served first come, first served, by (arrival, id).
"""

import math
from fractions import Fraction

import torch

ROOT_HASH = 0
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def _int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}")


def _pages(n, page_size):
    """Pages that hold n tokens: ceil(n / page_size), in integers."""
    return (n + page_size - 1) // page_size


# -- 12.1 ------------------------------------------------------------------------------
def block_hashes(token_ids, page_size):
    if not isinstance(token_ids, (list, tuple)) or any(isinstance(t, bool) or not isinstance(t, int)
                                                        for t in token_ids):
        raise TypeError("token_ids must be a list of ints")
    if any(t < 0 for t in token_ids):
        raise ValueError("token_ids must be >= 0")
    _int("page_size", page_size, 1)
    out = []
    blocks = len(token_ids) // page_size
    for i in range(blocks):
        block = tuple(token_ids[j] for j in range(i * page_size, i * page_size + page_size))
        parent = out[i - 1] if i > 0 else ROOT_HASH
        out.append(hash((parent, block)))
    return out


# -- 12.2 ------------------------------------------------------------------------------
class _Page:
    def __init__(self, pid):
        self.pid, self.refs, self.key, self.block, self.released = pid, 0, None, None, None


def prefix_cache_replay(events, num_pages, page_size):
    """The cache as a list of page records; every choice made by scanning all pages."""
    return _replay(events, num_pages, page_size, later_block_first=True)


def prefix_cache_replay_first_block_first(events, num_pages, page_size):
    """The same cache with the eviction tie read the other way: among pages released at
    one event, the earlier block of its sequence first (a named mistake, not the rule)."""
    return _replay(events, num_pages, page_size, later_block_first=False)


def prefix_cache_states(events, num_pages, page_size):
    """The cache before each event, for a failure's message: {"free": free page ids,
    "referenced": [[page, count], ...], "evictable": cached unreferenced pages in
    eviction order}."""
    states = []
    _replay(events, num_pages, page_size, later_block_first=True, states=states)
    return states


def _replay(events, num_pages, page_size, later_block_first, states=None):
    if not isinstance(events, (list, tuple)):
        raise TypeError("events must be a list")
    _int("num_pages", num_pages, 1)
    _int("page_size", page_size, 1)
    pages = [_Page(p) for p in range(num_pages)]
    owners = {}
    out = []
    for index, event in enumerate(events):
        if states is not None:
            states.append(_cache_state(pages, later_block_first))
        if not isinstance(event, tuple) or len(event) not in (2, 3) or event[0] not in ("alloc", "free") \
                or (event[0] == "alloc") != (len(event) == 3):
            raise ValueError("events: bad event")
        if event[0] == "free":
            if event[1] not in owners:
                raise ValueError("events: free of an unknown id")
            zero = []
            for p in owners.pop(event[1]):
                pages[p].refs -= 1
                if pages[p].refs == 0:
                    zero.append(p)
                    pages[p].released = index
            out.append(sorted(zero))
            continue
        _, req, tokens = event
        hashes = block_hashes(tokens, page_size)
        if not tokens:
            raise ValueError("events: empty prompt")
        if req in owners:
            raise ValueError("events: live id")
        by_key = {pg.key: pg.pid for pg in pages if pg.key is not None}
        hit = []
        limit = (len(tokens) - 1) // page_size
        while len(hit) < limit and hashes[len(hit)] in by_key:
            hit.append(by_key[hashes[len(hit)]])
        need = _pages(len(tokens), page_size) - len(hit)
        candidates = [pg for pg in pages if pg.refs == 0 and pg.pid not in hit]
        if need > len(candidates):
            out.append(None)
            continue
        for p in hit:
            pages[p].refs += 1
        table = list(hit)
        for i in range(len(hit), len(hit) + need):
            free = [pg for pg in pages if pg.refs == 0 and pg.key is None and pg.pid not in table]
            if free:
                pg = free[0]
            else:
                old = [pg for pg in pages if pg.refs == 0 and pg.key is not None and pg.pid not in table]
                old.sort(key=lambda pg: (pg.released, -pg.block if later_block_first else pg.block, pg.pid))
                pg = old[0]
                pg.key = pg.block = None
            pg.refs = 1
            if i < len(hashes) and all(other.key != hashes[i] for other in pages):
                pg.key, pg.block = hashes[i], i
            table.append(pg.pid)
        owners[req] = table
        out.append((len(hit) * page_size, table))
    return out


def _cache_state(pages, later_block_first):
    old = sorted((pg for pg in pages if pg.refs == 0 and pg.key is not None),
                 key=lambda pg: (pg.released, -pg.block if later_block_first else pg.block, pg.pid))
    return {"free": [pg.pid for pg in pages if pg.refs == 0 and pg.key is None],
            "referenced": [[pg.pid, pg.refs] for pg in pages if pg.refs > 0],
            "evictable": [pg.pid for pg in old]}


# -- 12.3 ------------------------------------------------------------------------------
def hybrid_request_bytes(seq_len, page_size, attention_layers, num_kv_heads, head_dim, linear_layers, num_heads,
                         head_dim_k, head_dim_v, snapshot_every=None, kv_dtype="bf16", state_dtype="fp32"):
    _int("seq_len", seq_len, 0)
    for name, value in (("page_size", page_size), ("attention_layers", attention_layers),
                        ("num_kv_heads", num_kv_heads), ("head_dim", head_dim), ("linear_layers", linear_layers),
                        ("num_heads", num_heads), ("head_dim_k", head_dim_k), ("head_dim_v", head_dim_v)):
        _int(name, value, 1)
    if snapshot_every is not None:
        _int("snapshot_every", snapshot_every, 1)
    if kv_dtype not in DTYPE_BYTES:
        raise ValueError("kv_dtype")
    if state_dtype not in DTYPE_BYTES:
        raise ValueError("state_dtype")
    slots = 0
    while slots < seq_len:
        slots += page_size
    kv = 0
    for _ in range(attention_layers):
        kv += slots * 2 * num_kv_heads * head_dim * DTYPE_BYTES[kv_dtype]
    one_state = linear_layers * num_heads * head_dim_k * head_dim_v * DTYPE_BYTES[state_dtype]
    snaps = 0
    if snapshot_every is not None:
        boundary = snapshot_every * page_size
        position = boundary
        while position <= seq_len:
            snaps += 1
            position += boundary
    return kv + one_state * (1 + snaps)


# -- 12.4 ------------------------------------------------------------------------------
def delta_rule_state(k, v, beta, length):
    """The state after tokens 0 .. length - 1, from zero, in float64 loops over entries."""
    k, v, beta = k.double(), v.double(), beta.double()
    d_k, d_v = k.shape[1], v.shape[1]
    S = [[0.0] * d_k for _ in range(d_v)]
    for t in range(length):
        kt = [float(x) for x in k[t]]
        vt = [float(x) for x in v[t]]
        b = float(beta[t])
        err = [vt[i] - math.fsum(S[i][j] * kt[j] for j in range(d_k)) for i in range(d_v)]
        S = [[S[i][j] + b * err[i] * kt[j] for j in range(d_k)] for i in range(d_v)]
    return torch.tensor(S, dtype=torch.float64).reshape(d_v, d_k)


def delta_rule_snapshots(k, v, beta, positions):
    """{p: state after p tokens} for each p in positions."""
    return {p: delta_rule_state(k, v, beta, p) for p in positions}


def resume_start(snapshot_positions, match_len):
    """The latest snapshot position at or before match_len, 0 when none is."""
    best = 0
    for p in snapshot_positions:
        if best < p <= match_len:
            best = p
    return best


# -- 12.5 ------------------------------------------------------------------------------
def _check_group(name, group, keys):
    if not isinstance(group, (list, tuple)) or any(not isinstance(r, dict) for r in group):
        raise TypeError(f"{name} must be a list of dicts")
    for r in group:
        for key in keys:
            if key not in r:
                raise ValueError(f"{name}: missing {key}")
            if isinstance(r[key], bool) or not isinstance(r[key], int):
                raise TypeError(f"{name}: {key} must be an int")
            if r[key] < 0:
                raise ValueError(f"{name}: {key} must be >= 0")


def schedule_step_states(running, waiting, free_pages, page_size, token_budget=None):
    """Before each grant of the step, and after the last: {"budget": tokens left (None:
    no budget), "free_pages": pages free, "preempted": ids preempted so far}."""
    states = []
    _step(running, waiting, free_pages, page_size, token_budget, states)
    return states


def schedule_step(running, waiting, free_pages, page_size, token_budget=None):
    return _step(running, waiting, free_pages, page_size, token_budget, None)


def _step(running, waiting, free_pages, page_size, token_budget, states):
    keys = ("id", "arrival", "num_tokens", "computed")
    _check_group("running", running, keys)
    _check_group("waiting", waiting, keys)
    seen = []
    for name, group in (("running", running), ("waiting", waiting)):
        for r in group:
            if r["id"] in seen or r["computed"] >= r["num_tokens"]:
                raise ValueError(f"{name}: bad request")
            seen.append(r["id"])
    _int("free_pages", free_pages, 0)
    _int("page_size", page_size, 1)
    if token_budget is not None:
        _int("token_budget", token_budget, 1)

    def first_come(group):
        out = list(group)
        # selection sort by (arrival, id): the earliest first
        for i in range(len(out)):
            j = min(range(i, len(out)), key=lambda m: (out[m]["arrival"], out[m]["id"]))
            out[i], out[j] = out[j], out[i]
        return out

    left_budget = token_budget
    granted, victims = [], []

    def tokens_for(r):
        left = r["num_tokens"] - r["computed"]
        return left if left_budget is None else min(left, left_budget)

    queue = first_come(running)
    order = [r for r in queue if r["num_tokens"] - r["computed"] == 1] + \
            [r for r in queue if r["num_tokens"] - r["computed"] > 1]
    for r in order:
        if r["id"] in victims:
            continue
        n = tokens_for(r)
        if n == 0:
            continue
        need = _pages(r["computed"] + n, page_size) - _pages(r["computed"], page_size)
        while free_pages < need:
            busy = [g for g, _ in granted]
            candidates = [x for x in queue if x["id"] not in busy and x["id"] not in victims]
            victim = candidates[-1]
            victims.append(victim["id"])
            free_pages += _pages(victim["computed"], page_size)
            if victim["id"] == r["id"]:
                break
        if r["id"] in victims:
            continue
        if states is not None:
            states.append({"budget": left_budget, "free_pages": free_pages, "preempted": list(victims)})
        free_pages -= need
        granted.append((r["id"], n))
        if left_budget is not None:
            left_budget -= n
    for r in first_come(waiting):
        n = tokens_for(r)
        need = _pages(r["computed"] + n, page_size)
        if n == 0 or need > free_pages:
            break
        if states is not None:
            states.append({"budget": left_budget, "free_pages": free_pages, "preempted": list(victims)})
        free_pages -= need
        granted.append((r["id"], n))
        if left_budget is not None:
            left_budget -= n
    if states is not None:
        states.append({"budget": left_budget, "free_pages": free_pages, "preempted": list(victims)})
    return {"scheduled": granted, "preempted": victims, "free_pages": free_pages}


# -- 12.6 ------------------------------------------------------------------------------
def run_trace_states(requests, num_pages, page_size, token_budget=None):
    """Each step's state once its arrivals have joined, before it is scheduled:
    {"free_pages": int, "running": [[id, computed, num_tokens], ...], "waiting": [...]},
    both in first-come-first-served order."""
    states = []
    run_trace(requests, num_pages, page_size, token_budget, states=states)
    return states


def run_trace(requests, num_pages, page_size, token_budget=None, states=None):
    _check_group("requests", requests, ("id", "arrival", "prompt_len", "max_output"))
    _int("num_pages", num_pages, 1)
    _int("page_size", page_size, 1)
    if token_budget is not None:
        _int("token_budget", token_budget, 1)
    ids = [r["id"] for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError("requests: duplicate id")
    for r in requests:
        c = r.get("cached", 0)
        if r["prompt_len"] < 1 or r["max_output"] < 1 or isinstance(c, bool) or not isinstance(c, int) \
                or c < 0 or c % page_size or c >= r["prompt_len"] \
                or _pages(r["prompt_len"] + r["max_output"] - 1, page_size) > num_pages:
            raise ValueError("requests: bad request")
    info = {r["id"]: dict(r) for r in requests}
    where = {}  # id -> "running" / "waiting" / "done"
    known = {rid: info[rid]["prompt_len"] for rid in info}
    computed = {}
    tokens = {rid: [] for rid in info}
    free = num_pages
    steps, preempted = [], []
    step = 0
    while any(where.get(rid) != "done" for rid in info):
        for rid in info:
            if info[rid]["arrival"] == step:
                where[rid] = "waiting"
                computed[rid] = info[rid].get("cached", 0)

        def group(kind):
            members = [rid for rid in info if where.get(rid) == kind]
            members.sort(key=lambda rid: (info[rid]["arrival"], rid))
            return [{"id": rid, "arrival": info[rid]["arrival"], "num_tokens": known[rid],
                     "computed": computed[rid]} for rid in members]

        if states is not None:
            states.append({"free_pages": free, **{kind: [[r["id"], r["computed"], r["num_tokens"]] for r in group(kind)]
                                                  for kind in ("running", "waiting")}})
        result = schedule_step(group("running"), group("waiting"), free, page_size, token_budget)
        free = result["free_pages"]
        for rid in result["preempted"]:
            where[rid] = "waiting"
            computed[rid] = info[rid].get("cached", 0)
            preempted.append((step, rid))
        for rid, n in result["scheduled"]:
            where[rid] = "running"
            computed[rid] += n
            if computed[rid] == known[rid]:
                tokens[rid].append(step)
                known[rid] += 1
                if len(tokens[rid]) == info[rid]["max_output"]:
                    where[rid] = "done"
                    free += _pages(computed[rid], page_size)
        steps.append(list(result["scheduled"]))
        step += 1
    return {"steps": steps, "token_steps": tokens, "preempted": preempted}


# -- 12.7 ------------------------------------------------------------------------------
def latency_percentiles(token_steps, arrivals, step_seconds, percentile):
    if not isinstance(token_steps, dict):
        raise TypeError("token_steps")
    if not isinstance(arrivals, dict):
        raise TypeError("arrivals")
    if not isinstance(step_seconds, (list, tuple)):
        raise TypeError("step_seconds")
    _int("percentile", percentile, 1)
    if percentile > 100:
        raise ValueError("percentile")

    def end(s):
        return math.fsum(step_seconds[: s + 1])

    ttft, itl = [], []
    for rid in token_steps:
        steps = token_steps[rid]
        ttft.append(end(steps[0]) - arrivals[rid])
        for j in range(1, len(steps)):
            itl.append(end(steps[j]) - end(steps[j - 1]))

    def rank(values):
        n = len(values)
        k = 1
        while k * 100 < percentile * n:  # the smallest k with k / n >= p / 100
            k += 1
        return sorted(values)[k - 1]

    return {"ttft": rank(ttft), "itl": rank(itl) if itl else None}


def latency_percentiles_interpolated(token_steps, arrivals, step_seconds, percentile):
    """The same latencies with NumPy's default percentile, interpolated linearly between
    the sorted values around rank (n - 1) p / 100 (a named mistake, not the rule)."""
    nearest = latency_percentiles(token_steps, arrivals, step_seconds, percentile)  # validates

    def end(s):
        return math.fsum(step_seconds[: s + 1])

    ttft, itl = [], []
    for rid, steps in token_steps.items():
        ttft.append(end(steps[0]) - arrivals[rid])
        itl += [end(steps[j]) - end(steps[j - 1]) for j in range(1, len(steps))]

    def interpolated(values):
        values = sorted(values)
        h = Fraction(percentile * (len(values) - 1), 100)
        lo = int(h)
        if lo + 1 >= len(values):
            return values[lo]
        return float(values[lo] + (h - lo) * (Fraction(values[lo + 1]) - Fraction(values[lo])))

    return {"ttft": interpolated(ttft), "itl": interpolated(itl) if nearest["itl"] is not None else None}


# -- 12.8 ------------------------------------------------------------------------------
def offload_plan(gpu_blocks, host_blocks, page_size, kv_bytes_per_token, state_bytes, flops_per_token,
                 attn_flops_per_pair, link_bandwidth, peak_flops, weight_bytes, memory_bandwidth):
    for name, value in (("gpu_blocks", gpu_blocks), ("host_blocks", host_blocks),
                        ("kv_bytes_per_token", kv_bytes_per_token), ("state_bytes", state_bytes),
                        ("flops_per_token", flops_per_token), ("attn_flops_per_pair", attn_flops_per_pair),
                        ("weight_bytes", weight_bytes)):
        _int(name, value, 0)
    for name, value in (("page_size", page_size), ("link_bandwidth", link_bandwidth), ("peak_flops", peak_flops),
                        ("memory_bandwidth", memory_bandwidth)):
        _int(name, value, 1)
    P = page_size
    # block j as the last block of a reloaded prefix: its keys and values, and the
    # recurrent state at its end
    last_block = P * kv_bytes_per_token + state_bytes

    def work(j):
        """FLOPs to recompute block j, one position at a time."""
        total = 0
        for p in range(j * P, (j + 1) * P):
            total += flops_per_token + attn_flops_per_pair * (p + 1)
        return total

    def recompute(flops):
        """Seconds of one forward pass over a span: Chapter 1's roofline, its FLOPs at the
        peak or the weights read once at the memory bandwidth, whichever is slower."""
        return max(Fraction(flops, peak_flops), Fraction(weight_bytes, memory_bandwidth))

    def reload_wins(j):
        return Fraction(last_block, link_bandwidth) < recompute(work(j))

    # the first block where reloading wins: recompute cost never falls with j, so double
    # an upper bound, then bisect; with no attention term the cost is the same at every j
    # (and the weights' side of the roofline is the same at every j too)
    if reload_wins(0):
        first = 0
    elif attn_flops_per_pair == 0:
        first = None
    else:
        lo, hi = 0, 1  # reload_wins(lo) is False
        while not reload_wins(hi):
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if reload_wins(mid):
                hi = mid
            else:
                lo = mid
        first = hi

    host = list(range(gpu_blocks, gpu_blocks + host_blocks))
    costs = [work(j) for j in host]
    times = []
    for m in range(host_blocks + 1):
        reloaded = host[host_blocks - m:]
        # keys and values for each reloaded block; the recurrent state once, at the end of
        # the prefix, if anything is reloaded (recomputation carries it up to the reload)
        moved = sum(P * kv_bytes_per_token for _ in reloaded) + (state_bytes if reloaded else 0)
        link = Fraction(moved, link_bandwidth)
        gpu = recompute(sum(costs[: host_blocks - m])) if m < host_blocks else Fraction(0)
        times.append(link if link > gpu else gpu)
    best = min(times)
    m = times.index(best)  # the first, so the smallest m among equal times
    return {"break_even_block": first, "reload_blocks": m, "seconds": float(best)}


SUBSTITUTES = {
    "block_hashes": block_hashes,
    "schedule_step": schedule_step,
}
