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
