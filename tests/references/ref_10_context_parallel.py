"""Independent references for Chapter 10: dense attention in fp64 over the whole
sequence, and the ring's schedule, work and traffic counted one pair, one step, one
tensor at a time. Never imported from a notebook.

Conventions (the chapter's): q (B, H, N_q, d), k and v (B, H_kv, N_k, d); query head h
reads KV head h // (H // H_kv); every query and key carries its global position in the
sequence, and under the causal mask query i sees key j iff pos_k[j] <= pos_q[i]; a
query that sees no key has output 0 and lse = -inf; lse is the natural log of
sum_j exp(s_ij), s = q k^T / sqrt(d). Rank r sends to rank (r + 1) % P and receives
from rank (r - 1) % P, so at step t it holds the block of rank (r - t) % P.
"""

import math

import torch


def attention_fp64(q, k, v, q_pos=None, k_pos=None, causal=True):
    """(out, lse) in fp64 with the whole score matrix: out (B, H, N_q, d), lse (B, H, N_q).
    Positions default to 0..N-1 for both (the whole sequence at once)."""
    q, k, v = q.double(), k.double(), v.double()
    B, H, N_q, d = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    G = H // H_kv
    q_pos = torch.arange(N_q) if q_pos is None else q_pos
    k_pos = torch.arange(N_k) if k_pos is None else k_pos
    kv_head = torch.tensor([h // G for h in range(H)], dtype=torch.long)  # query head h reads KV head h // G
    k_full, v_full = k[:, kv_head], v[:, kv_head]  # (B, H, N_k, d)
    s = q @ k_full.transpose(-1, -2) / math.sqrt(d)  # (B, H, N_q, N_k)
    if causal:
        hidden = torch.tensor([[int(kj) > int(qi) for kj in k_pos] for qi in q_pos], dtype=torch.bool)
        s = s.masked_fill(hidden.reshape(N_q, N_k), -math.inf)
    m = s.amax(dim=-1, keepdim=True) if N_k else torch.full((B, H, N_q, 1), -math.inf, dtype=torch.float64)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m_safe)
    total = e.sum(dim=-1, keepdim=True)
    seen = total > 0
    out = (e / torch.where(seen, total, torch.ones_like(total))) @ v_full
    lse = torch.where(seen, m_safe + torch.log(torch.where(seen, total, torch.ones_like(total))),
                      torch.full_like(total, -math.inf))
    return out, lse.squeeze(-1)


def shard_positions(seq_len, world_size, rank, layout):
    """The global positions rank ``rank`` holds, built position by position.
    contiguous: the rank-th of P equal pieces. zigzag: the sequence cut into 2P equal
    chunks; rank r holds chunk r and chunk 2P - 1 - r (the mirror image), in that order."""
    P = world_size
    if layout == "contiguous":
        n = seq_len // P
        return torch.tensor([rank * n + i for i in range(n)], dtype=torch.long)
    c = seq_len // (2 * P)
    chunks = [rank, 2 * P - 1 - rank]
    return torch.tensor([chunk * c + i for chunk in chunks for i in range(c)], dtype=torch.long)


def ring_schedule(world_size):
    """schedule[r][t]: whose block rank r holds at step t, by following the blocks
    around the ring one hop per step."""
    P = world_size
    holder = list(range(P))  # holder[r] = the owner of the block rank r holds now
    table = [[0] * P for _ in range(P)]
    for t in range(P):
        for r in range(P):
            table[r][t] = holder[r]
        holder = [holder[(r - 1) % P] for r in range(P)]  # every block moves to the next rank
    return torch.tensor(table, dtype=torch.long).reshape(P, P)


def causal_work(shards):
    """work[r][t]: visible (query, key) pairs between rank r's positions and the block it
    holds at step t, counted pair by pair."""
    P = len(shards)
    schedule = ring_schedule(P)
    table = [[0] * P for _ in range(P)]
    for r in range(P):
        for t in range(P):
            keys = shards[int(schedule[r, t])].tolist()
            table[r][t] = sum(1 for i in shards[r].tolist() for j in keys if j <= i)
    return torch.tensor(table, dtype=torch.long).reshape(P, P)


def ring_bytes_per_layer(seq_len, world_size, batch_size, num_kv_heads, head_dim, dtype_bytes):
    """Bytes one rank sends in one layer's forward pass, by simulating the ring: at
    every step but the last it forwards the K block and the V block it holds."""
    block_elements = batch_size * num_kv_heads * (seq_len // world_size) * head_dim
    sent = 0
    for step in range(world_size):
        if step < world_size - 1:
            for _tensor in ("k", "v"):
                sent += block_elements * dtype_bytes
    return sent
