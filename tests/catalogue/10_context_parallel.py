"""Wrong implementations of Chapter 10 that the graders must reject.

The first four are the issue's list; the rest are the other mistakes people make when
they write ring attention for the first time. ``tests`` keeps each bug to the graders
that concern it (the distributed ones cost seconds a run), so ``--prove`` stays short.
"""

from grading.notebook.catalogue import Bug

BLOCKING_EXCHANGE = """for op in ops:  # blocking: send K, send V, then receive
                if op.op is dist.isend:
                    dist.send(op.tensor, send_to)
            for op in ops:
                if op.op is dist.irecv:
                    dist.recv(op.tensor, recv_from)
            requests = []"""

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '10.1': 'Merging partial attention with the log-sum-exp',
    '10.2': 'One ring step, and the mask in global positions',
    '10.3': 'The ring',
    '10.4': 'Causal load imbalance, and the zig-zag layout',
    '10.5': 'The bytes on the wire',
    '10.6': 'Running it on real processes',
}

BUGS = [
    # -- the list
    Bug("merge_without_lse", "10.1", "averages the two partial outputs instead of weighting them by their softmax mass",
        old="return w_a * out_a + w_b * out_b, lse", new="return (out_a + out_b) / 2, lse", tests="merge"),
    Bug("merge_lse_overflows", "10.1", "computes log(exp(L_A) + exp(L_B)) as written, which overflows to inf for "
        "large log-sum-exps (and gives -inf for very negative ones): torch.logaddexp subtracts the larger first",
        old="    lse = torch.logaddexp(lse_a, lse_b)  # (..., N); -inf only where both are -inf\n",
        new="    lse = torch.log(torch.exp(lse_a) + torch.exp(lse_b))\n", tests="merge"),
    Bug("causal_mask_local_indices", "10.2",
        "masks with the rank's local indices (j > i) instead of the global positions",
        old="hidden = k_pos[None, :] > q_pos[:, None]",
        new="hidden = torch.arange(N_k)[None, :] > torch.arange(N_q)[:, None]", tests="ring_step"),
    Bug("zigzag_chunks_not_mirrored", "10.4",
        "gives rank r chunks r and P + r (striped without the mirror): unbalanced",
        old="mirror = 2 * world_size - 1 - rank", new="mirror = world_size + rank", tests="shard_positions"),
    Bug("blocking_send_before_recv", "10.6",
        "every rank calls a blocking send before its receive: all wait, a deadlock",
        old="requests = dist.batch_isend_irecv(ops)", new=BLOCKING_EXCHANGE, tests="gloo"),
    # -- more of the same family
    Bug("merge_max_instead_of_logaddexp", "10.1",
        "keeps the larger lse as the merged lse, so the weights do not add to 1",
        old="lse = torch.logaddexp(lse_a, lse_b)", new="lse = torch.maximum(lse_a, lse_b)", tests="merge"),
    Bug("merge_nan_when_both_empty", "10.1", "subtracts lse = -inf from -inf, so a row empty in both halves is NaN",
        old="lse_safe = torch.where(lse == -math.inf, 0.0, lse)", new="lse_safe = lse", tests="merge"),
    Bug("zigzag_mirror_off_by_one", "10.4", "mirrors chunk r onto 2P - r instead of 2P - 1 - r",
        old="mirror = 2 * world_size - 1 - rank", new="mirror = (2 * world_size - rank) % (2 * world_size)",
        tests="shard_positions"),
    Bug("causal_mask_hides_the_diagonal", "10.2", "hides key j = i too (>= instead of >): a token cannot see itself",
        old="hidden = k_pos[None, :] > q_pos[:, None]", new="hidden = k_pos[None, :] >= q_pos[:, None]",
        tests="ring_step"),
    Bug("ring_step_forgets_scale", "10.2", "forgets the 1/sqrt(d) of the scores",
        old="s = q_rows @ k.transpose(-1, -2) / math.sqrt(d)", new="s = q_rows @ k.transpose(-1, -2)",
        tests="ring_step"),
    Bug("ring_step_never_skips", "10.2", "attends to a block that no query can see instead of skipping it: "
        "reads its k and v (NaN in a buffer not yet filled reaches the output)",
        old="if N_k == 0 or N_q == 0 or (causal and k_pos.min() > q_pos.max()):",
        new="if N_k == 0 or N_q == 0:", tests="skips_a_block"),
    Bug("ring_step_gqa_heads_mixed", "10.2", "groups query heads as h % H_kv instead of h // G",
        old="q_rows = q.reshape(B, H_kv, G * N_q, d)",
        new="q_rows = q.reshape(B, G, H_kv, N_q, d).transpose(1, 2).reshape(B, H_kv, G * N_q, d)",
        tests="ring_step"),
    Bug("schedule_turns_the_wrong_way", "10.3", "receives from rank r + 1: the schedule (r + t) mod P",
        old="return (r - t) % world_size", new="return (r + t) % world_size", tests="schedule"),
    Bug("causal_work_strict", "10.3", "counts only keys strictly before the query, not the diagonal",
        old="work[r, t] = (keys[None, :] <= shards[r][:, None]).sum()",
        new="work[r, t] = (keys[None, :] < shards[r][:, None]).sum()", tests="causal_work"),
    Bug("imbalance_min_over_max", "10.3", "divides the smallest total by the largest",
        old="return math.inf if smallest == 0 else int(totals.max()) / smallest",
        new="return 0.0 if smallest == 0 else smallest / int(totals.max())", tests="imbalance"),
    Bug("imbalance_in_float32", "10.3", "divides the int64 totals as tensors, whose quotient is float32, not float64",
        old="return math.inf if smallest == 0 else int(totals.max()) / smallest",
        new="return math.inf if smallest == 0 else (totals.max() / totals.min()).item()", tests="imbalance"),
    Bug("bytes_as_a_float", "10.5", "divides seq_len by P with /, so the byte count is a float, not an int",
        old="return 2 * (world_size - 1) * block",
        new="return 2 * (world_size - 1) * batch_size * num_kv_heads * (seq_len / world_size) * head_dim * dtype_bytes",
        tests="bytes"),
    Bug("bytes_counts_p_steps", "10.5", "counts P exchanges; the last one only brings each block home",
        old="return 2 * (world_size - 1) * block", new="return 2 * world_size * block", tests="bytes"),
    Bug("bytes_forgets_v", "10.5", "counts only the K block", old="return 2 * (world_size - 1) * block",
        new="return (world_size - 1) * block", tests="bytes"),
    Bug("ring_sends_on_the_last_step", "10.6",
        "exchanges at every step, the last too: right answer, one block too many",
        old="last = step == world_size - 1", new="last = False", tests="gloo"),
    Bug("ring_uses_own_positions_for_every_block", "10.6", "masks every received block with its own positions",
        old="k_pos = shard_positions(seq_len, world_size, source, layout)",
        new="k_pos = shard_positions(seq_len, world_size, rank, layout)", tests="gloo"),
    Bug("ring_receives_from_the_next_rank", "10.6",
        "sends to and receives from rank r + 1: fine on 2 ranks, hangs on 4",
        old="send_to, recv_from = (rank + 1) % world_size, (rank - 1) % world_size",
        new="send_to, recv_from = (rank + 1) % world_size, (rank + 1) % world_size", tests="gloo"),
    Bug("ring_sends_fp64_copies", "10.6", "upcasts K and V to fp64 before sending them: twice the bytes in fp32",
        old="k_cur, v_cur = k.contiguous(), v.contiguous()",
        new="k_cur, v_cur = k.double(), v.double()\n    q = q.double()", tests="gloo"),
]
