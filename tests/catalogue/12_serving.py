"""Wrong implementations of Chapter 12 that the graders must reject: the mistakes people
make when they first write a prefix cache, snapshot resumption, a scheduler step and
latency percentiles, and an offload plan."""

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '12.1': 'Prefix caching: hash-chained blocks',
    '12.2': 'Prefix caching: hash-chained blocks',
    '12.3': 'Hybrid models: pages and a state',
    '12.4': 'Hybrid models: pages and a state',
    '12.5': 'The scheduler',
    '12.6': 'The scheduler',
    '12.7': 'Time: TTFT and ITL on an H100',
    '12.8': 'Time: TTFT and ITL on an H100',
}

BUGS = [
    # 12.1: block hashes
    Bug("hash_not_chained", "12.1",
        "hashes each block's tokens alone, so equal blocks after different prefixes get equal hashes",
        old="parent = hash((parent, tuple(token_ids[start:start + page_size])))",
        new="parent = hash((ROOT_HASH, tuple(token_ids[start:start + page_size])))"),
    Bug("hash_partial_last_block", "12.1",
        "hashes the last block even when it is not full, though its tokens are still being written",
        old="range(0, len(token_ids) - page_size + 1, page_size)", new="range(0, len(token_ids), page_size)"),
    Bug("hash_chains_previous_block_only", "12.1",
        "chains each block to the tokens of the block before it instead of to that block's hash, so a hash "
        "covers two blocks, not the whole prefix",
        code="""
_check_token_ids("token_ids", token_ids)
_check_int("page_size", page_size, 1)
hashes, previous = [], None
for start in range(0, len(token_ids) - page_size + 1, page_size):
    block = tuple(token_ids[start:start + page_size])
    parent = ROOT_HASH if previous is None else hash((ROOT_HASH, previous))
    hashes.append(hash((parent, block)))
    previous = block
return hashes"""),
    # 12.2: the prefix cache
    Bug("cache_free_keeps_references", "12.2",
        "drops a freed request's block table without decrementing its pages' reference counts, so its pages "
        "are never released",
        old="""            for p in tables.pop(req):
                refs[p] -= 1""",
        new="""            for p in tables.pop(req):
                pass"""),
    Bug("cache_hit_stays_evictable", "12.2",
        "leaves a hit page on the eviction list when a new request references it, so a page in use can be "
        "evicted",
        old="released.pop(p, None)", new="pass"),
    Bug("cache_evicts_most_recent", "12.2",
        "evicts the most recently released page first (MRU) instead of the least recently released",
        old="p = min(released, key=lambda q: (released[q], -page_hash[q][1], q))",
        new="p = max(released, key=lambda q: (released[q], page_hash[q][1], -q))"),
    Bug("cache_hit_covers_whole_prompt", "12.2",
        "lets the hit cover every full block, so a prompt that is all cached leaves no token to compute its "
        "logits",
        old="for h in hashes[: (len(tokens) - 1) // page_size]:", new="for h in hashes:"),
    Bug("cache_evicts_first_block_first", "12.2",
        "among pages released together, evicts the first block of a sequence before its last, breaking the "
        "chain's shared head first",
        old="-page_hash[q][1], q))", new="page_hash[q][1], q))", kind="eviction_tie_first_block"),
    Bug("cache_references_hits_before_failing", "12.2",
        "takes references on the hit pages before checking that the new pages fit, so a failed allocation "
        "still holds them",
        old="""            if new > len(free) + len(evictable):
                outcomes.append(None)
                continue
            for p in hit:
                refs[p] += 1
                released.pop(p, None)""",
        new="""            for p in hit:
                refs[p] += 1
                released.pop(p, None)
            if new > len(free) + len(evictable):
                outcomes.append(None)
                continue"""),
    # 12.3: hybrid memory
    Bug("hybrid_kv_not_in_pages", "12.3", "counts the KV cache by tokens instead of whole pages",
        old="kv = pages_needed(seq_len, page_size) * page_size * kv_per_token", new="kv = seq_len * kv_per_token"),
    Bug("hybrid_no_live_state", "12.3", "counts the snapshots but not the live state the request decodes with",
        old="return kv + (1 + snapshots) * state", new="return kv + snapshots * state"),
    Bug("hybrid_snapshot_at_partial_span", "12.3",
        "counts a snapshot for the partial span at the end of the sequence, which has no block boundary",
        old="seq_len // (snapshot_every * page_size)", new="pages_needed(seq_len, snapshot_every * page_size)"),
    Bug("hybrid_kv_forgets_values", "12.3",
        "counts the keys of the attention layers but not their values (no factor 2)",
        old="kv_per_token = attention_layers * 2 * num_kv_heads", new="kv_per_token = attention_layers * num_kv_heads"),
    # 12.4: snapshot resume
    Bug("resume_from_snapshot_after", "12.4",
        "resumes from the first snapshot at or after the match, a state that has already seen tokens past it",
        old="start = max([p for p in snapshots if p <= match_len] + [0])",
        new="start = min([p for p in snapshots if p >= match_len], default=0)"),
    Bug("resume_strictly_before", "12.4",
        "takes the latest snapshot strictly before the match, recomputing a block when the match ends on a "
        "snapshot",
        old="p <= match_len] + [0])", new="p < match_len] + [0])"),
    Bug("resume_skips_a_token", "12.4",
        "starts the recurrence one token after the snapshot, skipping the first token the snapshot has not "
        "seen",
        old="for t in range(start, match_len):", new="for t in range(start + 1, match_len):"),
    Bug("resume_mutates_snapshot", "12.4",
        "advances the state in place, in the stored snapshot's own tensor, so the cache's snapshot is "
        "overwritten and the next hit resumes from a wrong state",
        old=""".to(k.dtype).clone() if start in snapshots else torch.zeros(d_v, d_k, dtype=k.dtype)
    for t in range(start, match_len):
        S = delta_update(S, k[t], v[t], beta[t])""",
        new=""".to(k.dtype) if start in snapshots else torch.zeros(d_v, d_k, dtype=k.dtype)
    for t in range(start, match_len):
        S.copy_(delta_update(S, k[t], v[t], beta[t]))"""),
    Bug("resume_ignores_snapshots", "12.4", "recomputes the state from zero and ignores the snapshots",
        old="start = max([p for p in snapshots if p <= match_len] + [0])", new="start = 0"),
    # 12.5: one scheduler step
    Bug("step_decodes_outside_budget", "12.5",
        "does not charge one-token grants (the decodes) to the token budget, so a step exceeds it",
        old="        budget -= n\n", new="        budget -= n if n > 1 else 0\n"),
    Bug("step_decodes_not_first", "12.5",
        "serves the running requests in arrival order only, so an older prefill's chunk takes the budget "
        "before the decodes",
        old="for r in decodes + prefills:", new="for r in order:"),
    Bug("step_preempts_oldest", "12.5",
        "preempts the oldest running request instead of the newest, throwing away the most work",
        old="victim = max((x for x in order", new="victim = min((x for x in order"),
    Bug("step_victim_ties_to_lower_id", "12.5",
        "picks the victim by arrival alone, so among requests that arrived together it preempts the first "
        "(the lower id), not the largest (arrival, id)",
        old='victim = max((x for x in order if x["id"] not in done and x["id"] not in preempted), key=fcfs)',
        new='victim = max((x for x in order if x["id"] not in done and x["id"] not in preempted), '
            'key=lambda x: x["arrival"])'),
    Bug("step_preempts_once", "12.5",
        "preempts at most one victim per request and skips the request when its pages still do not fit, "
        "where preemption must repeat until they do",
        old="""        while need > free_pages:
            victim = max((x for x in order if x["id"] not in done and x["id"] not in preempted), key=fcfs)
            preempted.append(victim["id"])
            free_pages += pages_needed(victim["computed"], page_size)
            if victim is r:
                break
        if r["id"] in preempted:
            continue""",
        new="""        if need > free_pages:
            victim = max((x for x in order if x["id"] not in done and x["id"] not in preempted), key=fcfs)
            preempted.append(victim["id"])
            free_pages += pages_needed(victim["computed"], page_size)
        if r["id"] in preempted or need > free_pages:
            continue"""),
    Bug("step_ties_to_higher_id", "12.5", "breaks arrival ties among running requests in favour of the higher id",
        old="order = sorted(running, key=fcfs)", new='order = sorted(running, key=lambda r: (r["arrival"], -r["id"]))'),
    Bug("step_waiting_by_id", "12.5", "orders the waiting queue by id instead of by arrival",
        old="for r in sorted(waiting, key=fcfs):", new='for r in sorted(waiting, key=lambda r: r["id"]):'),
    Bug("step_waiting_overtakes", "12.5",
        "lets a later waiting request overtake one whose pages do not fit, breaking first come, first served",
        old="""        if need > free_pages:
            break""", new="""        if need > free_pages:
            continue"""),
    Bug("step_pages_rounded_down", "12.5",
        "counts a running request's new pages with floor division, so a chunk that starts a page gets none "
        "and the page budget is over-committed",
        old='need = pages_needed(r["computed"] + n, page_size) - pages_needed(r["computed"], page_size)',
        new='need = (r["computed"] + n) // page_size - r["computed"] // page_size'),
    Bug("step_preemption_frees_nothing", "12.5", "preempts a request without returning its pages to the free pool",
        old='free_pages += pages_needed(victim["computed"], page_size)', new="free_pages += 0"),
    Bug("step_preempts_scheduled", "12.5", "may preempt a request already scheduled in this step",
        old='for x in order if x["id"] not in done and x["id"] not in preempted',
        new='for x in order if x["id"] not in preempted'),
    Bug("step_waiting_prefix_free", "12.5", "does not charge a waiting request for the pages of its cached prefix",
        old='need = pages_needed(r["computed"] + n, page_size)\n        if need > free_pages:',
        new='need = pages_needed(r["computed"] + n, page_size) - pages_needed(r["computed"], page_size)\n'
            '        if need > free_pages:'),
    # 12.6: the trace
    Bug("trace_preempted_keeps_progress", "12.6",
        "keeps a preempted request's computed tokens, as if its pages had been swapped out, though the "
        "scheduler freed them",
        old='state[rid]["computed"] = spec[rid].get("cached", 0)', new="pass"),
    Bug("trace_preempted_loses_cached_prefix", "12.6",
        "restarts a preempted request from token 0, as if its prefix-cache hit were lost with its pages",
        old='state[rid]["computed"] = spec[rid].get("cached", 0)', new='state[rid]["computed"] = 0'),
    Bug("trace_token_a_step_late", "12.6",
        "records each generated token at the next step instead of the step that computed it",
        old="token_steps[rid].append(step)", new="token_steps[rid].append(step + 1)"),
    Bug("trace_finished_keeps_pages", "12.6", "does not return a finished request's pages to the free pool",
        old="free_pages += pages_needed(req[\"computed\"], page_size)\n", new="free_pages += 0\n"),
    Bug("trace_arrival_a_step_late", "12.6", "lets a request join the waiting list one step after it arrives",
        old='if r["arrival"] == step]', new='if r["arrival"] == step - 1]'),
    # 12.7: latency percentiles
    Bug("latency_ttft_to_step_start", "12.7",
        "measures the time to first token to the start of the step that generated it instead of its end",
        old="ttfts.append(ends[steps[0]] - arrivals[rid])",
        new="ttfts.append(ends[steps[0]] - step_seconds[steps[0]] - arrivals[rid])"),
    Bug("latency_percentile_index", "12.7",
        "takes the value at index int(p / 100 * n) of the sorted list, one past the nearest rank (the maximum"
        " for p99 of 100 values)",
        old="return values[-(-percentile * len(values) // 100) - 1]",
        new="return values[min(len(values) - 1, int(percentile / 100 * len(values)))]"),
    Bug("latency_float_rank", "12.7",
        "computes the nearest rank in floats, ceil(p / 100 * n), which rounds up past an exact integer "
        "(7 / 100 * 100 is 7.000000000000001) and takes the next value",
        old="return values[-(-percentile * len(values) // 100) - 1]",
        new="return values[math.ceil(percentile / 100 * len(values)) - 1]"),
    Bug("latency_interpolated_percentile", "12.7",
        "interpolates between the two values around the rank, NumPy's default percentile, where the "
        "statement asks for the nearest rank",
        old="""        values = sorted(values)
        return values[-(-percentile * len(values) // 100) - 1]""",
        new="""        return torch.quantile(torch.tensor(values, dtype=torch.float64), percentile / 100).item()""",
        kind="percentile_interpolated"),
    Bug("latency_itl_step_length", "12.7",
        "measures each inter-token latency as the length of the step that made the token, not the gap since "
        "the previous token",
        old="itls += [ends[t] - ends[s] for s, t in zip(steps, steps[1:])]",
        new="itls += [ends[t] - ends[t - 1] for s, t in zip(steps, steps[1:])]"),
    Bug("latency_unsorted", "12.7", "takes the percentile's rank in the values' own order, without sorting them",
        old="values = sorted(values)", new="values = list(values)"),
    # 12.8: the offload tier
    Bug("offload_no_overlap", "12.8",
        "adds the link's time to the GPU's, as if a block could not be reloaded while another is recomputed",
        old="seconds = max(link, gpu)", new="seconds = link + gpu"),
    Bug("offload_attends_p_keys", "12.8",
        "lets position p attend to p keys instead of p + 1, leaving out the token's own key",
        old="pairs = page_size * (page_size + 1) // 2 + j * page_size * page_size",
        new="pairs = page_size * (page_size - 1) // 2 + j * page_size * page_size"),
    Bug("offload_positions_from_host", "12.8",
        "counts the host blocks' positions from 0, as if the blocks still in GPU memory were not before them",
        old="for j in range(gpu_blocks, gpu_blocks + host_blocks):", new="for j in range(host_blocks):"),
    Bug("offload_reloads_first_blocks", "12.8",
        "reloads the first m host blocks and recomputes the last ones, whose keys attend to the longest prefix",
        old="Fraction(recomputed[host_blocks - m], peak_flops),",
        new="Fraction(recomputed[host_blocks] - recomputed[m], peak_flops),"),
    Bug("offload_ties_to_more_reload", "12.8", "breaks a tie between two plans toward the one that reloads more blocks",
        old="if best is None or seconds < best:", new="if best is None or seconds <= best:"),
    Bug("offload_forgets_state", "12.8",
        "reloads only the keys and values of the last blocks, without the recurrent state at the prefix's end",
        old="moved = m * block_bytes + (state_bytes if m else 0)", new="moved = m * block_bytes"),
    Bug("offload_state_per_block", "12.8",
        "moves a recurrent state snapshot with every reloaded block, where only the state at the prefix's end "
        "is needed, once",
        old="moved = m * block_bytes + (state_bytes if m else 0)", new="moved = m * reload_bytes"),
    Bug("offload_state_without_reload", "12.8",
        "moves the recurrent state over the link even when no block is reloaded and the recomputation "
        "already carries it to the prefix's end",
        old="moved = m * block_bytes + (state_bytes if m else 0)", new="moved = m * block_bytes + state_bytes"),
    Bug("offload_break_even_not_strict", "12.8",
        "counts a block whose reload takes exactly as long as its recomputation as a break-even",
        old="""    if excess < 0 or Fraction(reload_bytes, link_bandwidth) < weights_seconds:
        break_even = 0
    elif slope == 0:
        break_even = None
    else:
        break_even = excess // slope + 1""",
        new="""    if excess <= 0 or Fraction(reload_bytes, link_bandwidth) <= weights_seconds:
        break_even = 0
    elif slope == 0:
        break_even = None
    else:
        break_even = -(-excess // slope)"""),
    Bug("offload_float_times", "12.8",
        "compares the plans' times in floats, whose rounding can break an exact tie either way",
        old="""        link = Fraction(moved, link_bandwidth)
        gpu = 0  # no block recomputed: no pass, no weights read
        if m < host_blocks:
            gpu = max(Fraction(recomputed[host_blocks - m], peak_flops), weights_seconds)""",
        new="""        link = m * (block_bytes / link_bandwidth) + (state_bytes if m else 0) / link_bandwidth
        gpu = 0
        if m < host_blocks:
            gpu = max(recomputed[host_blocks - m] / peak_flops, weight_bytes / memory_bandwidth)"""),
    Bug("offload_compute_only", "12.8",
        "costs a recomputation by its FLOPs at the peak alone, without the weights every forward pass reads "
        "from GPU memory, so a short span of a large model looks almost free",
        old="weights_seconds = Fraction(weight_bytes, memory_bandwidth)", new="weights_seconds = 0"),
    Bug("offload_weights_per_block", "12.8",
        "reads the weights once per recomputed block, where one forward pass over the span reads them once",
        old="gpu = max(Fraction(recomputed[host_blocks - m], peak_flops), weights_seconds)",
        new="gpu = max(Fraction(recomputed[host_blocks - m], peak_flops), (host_blocks - m) * weights_seconds)"),
    Bug("offload_weights_without_recompute", "12.8",
        "charges the weights' read even when no block is recomputed and the GPU runs no pass",
        old="""        gpu = 0  # no block recomputed: no pass, no weights read
        if m < host_blocks:
            gpu""", new="""        gpu = 0
        if True:
            gpu"""),
]

# The rules each statement states, and where a student who breaks one is caught. Bugs
# that break a rule no other bug breaks: bad input let through, an input changed in place.
BUGS += [
    Bug("hash_unchecked_token_ids", "12.1", "hashes whatever it is given as token_ids, a string or bools included",
        old='    _check_token_ids("token_ids", token_ids)\n'
            '    _check_int("page_size", page_size, 1)\n    hashes, parent',
        new='    _check_int("page_size", page_size, 1)\n    hashes, parent'),
    Bug("cache_takes_highest_free", "12.2", "takes the highest-numbered free page first instead of the lowest",
        old="p = min(free)", new="p = max(free)"),
    Bug("cache_evicted_hash_stays", "12.2",
        "evicts a page but leaves its hash in the cache, so a later prompt hits a page that now holds other "
        "tokens",
        old="del cached[page_hash.pop(p)[0]]", new="page_hash.pop(p)"),
    Bug("cache_rehashes_a_cached_block", "12.2",
        "caches a new page under its block's hash even when that hash is cached already, moving the hash to "
        "the copy",
        old="if i < len(hashes) and hashes[i] not in cached:", new="if i < len(hashes):"),
    Bug("cache_free_forgets_cached", "12.2",
        "frees a cached page when its count reaches 0 and drops its hash, so no later request can hit it",
        old="""                    if p in page_hash:
                        released[p] = index
                    else:
                        free.append(p)""",
        new="""                    if p in page_hash:
                        del cached[page_hash.pop(p)[0]]
                    free.append(p)"""),
    Bug("cache_accepts_empty_prompt", "12.2", "allocates an empty prompt, which has no token to compute",
        old='            if not tokens:\n'
            '                raise ValueError(f"events[{index}]: an empty prompt")\n', new=""),
    Bug("hybrid_kv_in_state_dtype", "12.3", "sizes the keys and values in the states' dtype",
        old="kv_per_token = attention_layers * 2 * num_kv_heads * head_dim * DTYPE_BYTES[kv_dtype]",
        new="kv_per_token = attention_layers * 2 * num_kv_heads * head_dim * DTYPE_BYTES[state_dtype]"),
    Bug("hybrid_unchecked_snapshot_every", "12.3", "accepts snapshot_every = 0 and divides by it",
        old='    if snapshot_every is not None:\n        _check_int("snapshot_every", snapshot_every, 1)\n', new=""),
    Bug("resume_unchecked_match_len", "12.4", "accepts a match longer than the sequence and reads past its tokens",
        old='    if match_len > T:\n        raise ValueError(f"match_len must be <= T = {T}, got {match_len}")\n',
        new=""),
    Bug("step_advances_inputs", "12.5",
        "advances each granted request's computed in the caller's own dict, changing the running and waiting "
        "lists it was given",
        old='        done.add(r["id"])\n        budget -= n',
        new='        done.add(r["id"])\n        r["computed"] += n\n        budget -= n'),
    Bug("step_accepts_shared_ids", "12.5", "accepts a request that is both running and waiting",
        old='    if {r["id"] for r in running} & {r["id"] for r in waiting}:\n'
            '        raise ValueError("waiting: an id is both running and waiting")\n', new=""),
    Bug("trace_forgets_budget", "12.6", "calls the scheduler without the token budget, so prompts run whole",
        old="free_pages, page_size, token_budget)", new="free_pages, page_size)"),
    Bug("trace_free_pages_not_carried", "12.6",
        "keeps its own count of free pages and ignores the pages each step took and its preemptions freed",
        old='        free_pages = result["free_pages"]\n', new=""),
    Bug("trace_idle_steps_dropped", "12.6", "leaves out the steps where nothing runs, shifting every later step",
        old='        steps.append(result["scheduled"])',
        new='        if result["scheduled"]:\n            steps.append(result["scheduled"])'),
    Bug("trace_accepts_cached_prompt", "12.6", "accepts a cached prefix as long as the whole prompt",
        old='or cached % page_size \\\n                or cached >= r["prompt_len"]:', new="or cached % page_size:"),
    Bug("latency_float32_sums", "12.7", "adds the step times in float32, off by far more than float64's rounding",
        old="""    ends, total = [], 0.0
    for x in step_seconds:
        total += x
        ends.append(total)""",
        new="""    ends = torch.tensor(step_seconds, dtype=torch.float32).cumsum(0).tolist()"""),
    Bug("latency_unchecked_arrival_ids", "12.7", "does not check that arrivals names the ids of token_steps",
        old='    if set(arrivals) != set(token_steps):\n        raise ValueError("arrivals must name the ids of '
            'token_steps")\n', new=""),
    Bug("offload_unchecked_memory_bandwidth", "12.8", "accepts a memory bandwidth of 0 and divides by it",
        old='        ("weight_bytes", weight_bytes, 0), ("memory_bandwidth", memory_bandwidth, 1),',
        new='        ("weight_bytes", weight_bytes, 0),'),
]

# Every graded rule of each statement (its docstring's 'Graded rules:', verbatim) -> the
# bugs that break it; pytest --prove fails on a stated rule with no bug here (grading.notebook.rules).
RULES = {
    "12.1": {
        "block i's hash is hash((h, tuple(block i's tokens))), Python's built-in hash of a tuple, where h is "
        "block i - 1's hash, and ROOT_HASH (0) for block 0":
            ('hash_not_chained', 'hash_chains_previous_block_only'),
        'only full blocks have a hash: a last block shorter than page_size has none, nor has an empty '
        'sequence':
            ('hash_partial_last_block',),
        'raises TypeError naming ``token_ids`` when it is not a list or tuple of ints (a bool is not one) and'
        ' ValueError naming it when an id is negative; TypeError naming ``page_size`` when it is not an int '
        'and ValueError naming it when it is below 1':
            ('hash_unchecked_token_ids',),
    },
    "12.2": {
        "the hit is the longest run of the prompt's leading block hashes (Exercise 12.1) that the cache "
        'holds, capped at (len(token_ids) - 1) // page_size blocks: the last prompt token is always computed':
            ('cache_hit_covers_whole_prompt',),
        "an alloc's outcome is (hit blocks x page_size, the request's page ids in block order), a tuple of an"
        " int and a list of ints; a free's outcome is the sorted list of the pages whose count reached 0":
            ('cache_free_keeps_references',),
        "the request's other pages are new, taken one at a time: the lowest-numbered free page, else an "
        'evicted one':
            ('cache_takes_highest_free',),
        'a page is evictable when it is cached and no request references it; a page with references is never '
        'evicted, and a hit takes a reference on each of its pages':
            ('cache_hit_stays_evictable',),
        'eviction takes the page released earliest (at the lowest event index), ties to the one holding the '
        "later block of its sequence, then to the lower page id; an evicted page's hash leaves the cache":
            ('cache_evicts_most_recent', 'cache_evicts_first_block_first', 'cache_evicted_hash_stays'),
        "a new page that holds a full block is cached under that block's hash, unless the hash is cached "
        'already':
            ('cache_rehashes_a_cached_block',),
        'a freed page whose count reaches 0 stays cached, evictable, when it is cached, and is free otherwise':
            ('cache_free_forgets_cached',),
        "when the free and evictable pages (the hit's excluded) are too few, the alloc changes nothing and "
        'its outcome is None':
            ('cache_references_hits_before_failing',),
        'raises ValueError naming ``events`` for an event of another kind or length, an alloc of an id that '
        'holds pages, an empty prompt, a free of an id that holds none; TypeError naming ``events`` when it '
        'is not a list (or token_ids not a list or tuple of ints); TypeError or ValueError naming '
        '``num_pages`` or ``page_size`` when it is not an int >= 1':
            ('cache_accepts_empty_prompt',),
    },
    "12.3": {
        'the keys and values fill whole pages: pages_needed(seq_len, page_size) x page_size tokens, each with'
        ' a key and a value of num_kv_heads x head_dim numbers in every attention layer':
            ('hybrid_kv_not_in_pages', 'hybrid_kv_forgets_values'),
        'a state is linear_layers x num_heads x head_dim_k x head_dim_v numbers; the request holds its live '
        'state and one snapshot at each position m x snapshot_every x page_size <= seq_len, m >= 1 (none when'
        ' snapshot_every is None)':
            ('hybrid_no_live_state', 'hybrid_snapshot_at_partial_span'),
        'keys and values take DTYPE_BYTES[kv_dtype] bytes a number, states DTYPE_BYTES[state_dtype]':
            ('hybrid_kv_in_state_dtype',),
        'raises TypeError naming the argument (``seq_len``, ``page_size``, ``attention_layers``, '
        '``num_kv_heads``, ``head_dim``, ``linear_layers``, ``num_heads``, ``head_dim_k``, ``head_dim_v`` or '
        '``snapshot_every``) when it is not an int (a bool is not one), and ValueError naming it when '
        '``seq_len`` is negative or another of them is below 1; ValueError naming ``kv_dtype`` or '
        '``state_dtype`` when it is not a key of DTYPE_BYTES':
            ('hybrid_unchecked_snapshot_every',),
    },
    "12.4": {
        'start is the largest position p <= match_len among the keys of ``snapshots``, or 0 when there is '
        'none (the zero state is always known)':
            ('resume_from_snapshot_after', 'resume_strictly_before', 'resume_ignores_snapshots'),
        'the state at position p has seen tokens 0 .. p - 1: S is snapshots[start] (zeros when start is 0 and'
        ' not a key) advanced by delta_update over tokens start .. match_len - 1':
            ('resume_skips_a_token',),
        "S is a new (d_v, d_k) tensor in k's dtype, and ``snapshots`` is never modified":
            ('resume_mutates_snapshot',),
        "raises TypeError naming ``k``, ``v`` or ``beta`` when it is not a float32 or float64 tensor of k's "
        'dtype and ValueError naming it when its shape is wrong; TypeError naming ``match_len`` when it is '
        'not an int and ValueError when it is outside [0, T]; TypeError naming ``snapshots`` when it is not a'
        ' dict and ValueError naming it when a key is not an int in [0, T] or a value not a (d_v, d_k) tensor':
            ('resume_unchecked_match_len',),
    },
    "12.5": {
        'the running requests that decode (one token left) are served first, then the other running requests,'
        ' then the waiting ones; each group first come, first served: by arrival, ties to the lower id':
            ('step_decodes_not_first', 'step_ties_to_higher_id', 'step_waiting_by_id'),
        'a request is granted min(tokens it has left, budget left) tokens (all it has left when token_budget '
        "is None), and every granted token counts against token_budget, a decode's single token included":
            ('step_decodes_outside_budget',),
        'a request that would get 0 tokens is skipped; the first waiting request that would get 0 tokens or '
        'cannot have its pages ends the step: no later waiting request overtakes it':
            ('step_waiting_overtakes',),
        'n tokens need pages_needed(computed + n) - pages_needed(computed) new pages for a running request '
        'and pages_needed(computed + n) for a waiting one, its cached prefix included':
            ('step_pages_rounded_down', 'step_waiting_prefix_free'),
        'when a running request lacks pages, the newest running request not yet scheduled in this step, the '
        'largest (arrival, id), possibly the request itself, is preempted and frees its '
        'pages_needed(computed) pages':
            ('step_preempts_oldest', 'step_victim_ties_to_lower_id', 'step_preemption_frees_nothing',
             'step_preempts_scheduled'),
        'preemption repeats until the pages fit or the request itself is preempted; a preempted request is '
        'not scheduled in this step':
            ('step_preempts_once',),
        '``running``, ``waiting`` and their dicts are not modified':
            ('step_advances_inputs',),
        'raises TypeError naming ``running`` or ``waiting`` when it is not a list of dicts or a value is not '
        'an int, ValueError naming it for a missing key, a negative value, computed >= num_tokens, or an id '
        'seen twice (in either list); TypeError or ValueError naming ``free_pages`` (an int >= 0), '
        '``page_size`` (>= 1) or ``token_budget`` (None or >= 1)':
            ('step_accepts_shared_ids',),
    },
    "12.6": {
        'a request arriving at step s joins the waiting requests at the start of step s, with num_tokens = '
        'prompt_len and computed = cached (default 0: prompt tokens the prefix cache already holds)':
            ('trace_arrival_a_step_late',),
        'every step calls schedule_step on the running and the waiting requests, each in '
        'first-come-first-served order, with the free pages the previous step left (num_pages at step 0) and '
        'token_budget':
            ('trace_forgets_budget', 'trace_free_pages_not_carried'),
        'a scheduled request computes its tokens; when computed reaches num_tokens it generates a token in '
        'that step (num_tokens grows by 1), and a waiting one becomes running':
            ('trace_token_a_step_late',),
        'at its max_output-th token a request finishes and frees its pages_needed(computed) pages':
            ('trace_finished_keeps_pages',),
        'a preempted request goes back to waiting with computed = cached and num_tokens kept: it keeps its '
        'prefix-cache hit and recomputes the rest, the tokens it generated included':
            ('trace_preempted_keeps_progress', 'trace_preempted_loses_cached_prefix'),
        '"steps" holds one list per step from step 0 to the last token\'s, an idle step\'s empty':
            ('trace_idle_steps_dropped',),
        'raises TypeError naming ``requests`` when it is not a list of dicts of ints and ValueError naming it'
        ' for a missing key, a duplicate id, prompt_len or max_output below 1, a cached that is not a '
        'multiple of page_size below prompt_len, or a request that cannot fit alone (pages_needed(prompt_len '
        '+ max_output - 1) > num_pages); TypeError or ValueError naming ``num_pages`` or ``page_size`` (ints '
        '>= 1) or ``token_budget`` (None or an int >= 1)':
            ('trace_accepts_cached_prompt',),
    },
    "12.7": {
        "step s ends at sum(step_seconds[:s + 1]) seconds; a request's TTFT runs from its arrival to the end "
        'of the step of its first token':
            ('latency_ttft_to_step_start',),
        'its ITLs are the gaps between the ends of the steps of its consecutive tokens, pooled over all '
        'requests; "itl" is None when no request has two tokens':
            ('latency_itl_step_length',),
        'the p-th percentile of n values is the k-th smallest, k = ceil(p * n / 100) computed in integers '
        '(nearest rank, no interpolation)':
            ('latency_percentile_index', 'latency_float_rank', 'latency_interpolated_percentile', 'latency_unsorted'),
        'the values are Python floats (float64) within a relative 1e-12 of the exact sums, the step times '
        'added in any order':
            ('latency_float32_sums',),
        'raises TypeError naming ``token_steps``, ``arrivals`` or ``step_seconds`` when it is not a dict (a '
        'list for step_seconds) and ValueError naming it when a request has no token or its steps do not '
        "increase or lie past step_seconds, the two dicts' ids differ, or a time is negative or not a number;"
        ' TypeError naming ``percentile`` when it is not an int and ValueError when it is outside [1, 100]':
            ('latency_unchecked_arrival_ids',),
    },
    "12.8": {
        'a reloaded block moves P * kv_bytes_per_token bytes over the link, and a plan that reloads at least '
        "one block moves state_bytes once more (the state at the prefix's end), never per block":
            ('offload_forgets_state', 'offload_state_per_block', 'offload_state_without_reload'),
        'recomputing a span of blocks is one forward pass: max(W / peak_flops, weight_bytes / '
        'memory_bandwidth) seconds, W the sum over its positions p of flops_per_token + attn_flops_per_pair *'
        ' (p + 1); recomputing no block takes 0 seconds':
            ('offload_attends_p_keys', 'offload_positions_from_host', 'offload_compute_only',
             'offload_weights_per_block', 'offload_weights_without_recompute'),
        'the plan reloads the last m host blocks while it recomputes the first host_blocks - m, at the same '
        'time: Time(m) is the slower of the two':
            ('offload_no_overlap', 'offload_reloads_first_blocks'),
        '"reload_blocks" is the m in 0 .. host_blocks with the least Time(m), compared exactly (fractions or '
        'integers, never floats), ties to the smaller m; "seconds" is that Time(m) as a Python float '
        '(float64), within a relative 1e-12':
            ('offload_ties_to_more_reload', 'offload_float_times'),
        '"break_even_block" is the smallest j >= 0 (any block, not only a host one) where reloading block j '
        'with the state at its end, P * kv_bytes_per_token + state_bytes bytes, takes strictly less time than'
        ' recomputing block j alone, decided exactly; None when no j qualifies; it can be 10**12':
            ('offload_break_even_not_strict',),
        'raises TypeError naming the argument when one is not an int (a bool is not one); ValueError naming '
        'it when gpu_blocks, host_blocks, kv_bytes_per_token, state_bytes, flops_per_token, '
        'attn_flops_per_pair or weight_bytes is negative, or when page_size, link_bandwidth, peak_flops or '
        'memory_bandwidth is below 1':
            ('offload_unchecked_memory_bandwidth',),
    },
}
