"""Independent references for Chapter 10: dense attention in fp64 over the whole
sequence, and the ring's schedule, work and traffic counted one pair, one step, one
tensor at a time. Never imported from a notebook.

Conventions (the chapter's): q (B, H, N_q, d), k and v (B, H_kv, N_k, d); query head h
reads KV head h // (H // H_kv); every query and key carries its global position in the
sequence, and under the causal mask query i sees key j iff pos_k[j] <= pos_q[i]; a
query that sees no key has output 0 and lse = -inf; lse is the natural log of
sum_j exp(s_ij), s = q k^T / sqrt(d). Rank r sends to rank (r + 1) % P and receives
from rank (r - 1) % P, so at step t it holds the block of rank (r - t) % P.

``SUBSTITUTES`` (grading.judge.substitute): while a test of one exercise runs, the other
exercises' functions in the notebook are these, so that 10.2's ``ring_step`` is graded
over this ``merge_attention`` and 10.6's ``ring_attention`` (in every gloo rank) over
this ``ring_step`` and ``shard_positions``. They take the exercises' arguments, raise
the errors their statements name, and compute in fp64, rounding once to the caller's
dtype at the end.
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


def _require_tensor(name, t, floating=True):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if floating and not t.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating tensor, got {t.dtype}")


def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def merge_attention(out_a, lse_a, out_b, lse_b):
    """Exercise 10.1 by its definition, in fp64: lse = log(exp(lse_a) + exp(lse_b)),
    out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b, written with m = max(lse_a,
    lse_b) so that no exponent is positive; a row where both are -inf is (0, -inf).
    Returns out_a's and lse_a's dtypes."""
    for name, t in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b)):
        _require_tensor(name, t)
    if out_b.dtype != out_a.dtype or lse_b.dtype != lse_a.dtype:
        raise TypeError(f"out_b and lse_b must have the dtypes of out_a and lse_a, got {out_b.dtype}, {lse_b.dtype}")
    if out_b.shape != out_a.shape:
        raise ValueError(f"out_b must have out_a's shape {tuple(out_a.shape)}, got {tuple(out_b.shape)}")
    if lse_a.shape != out_a.shape[:-1]:
        raise ValueError(f"lse_a must have shape {tuple(out_a.shape[:-1])}, got {tuple(lse_a.shape)}")
    if lse_b.shape != lse_a.shape:
        raise ValueError(f"lse_b must have lse_a's shape {tuple(lse_a.shape)}, got {tuple(lse_b.shape)}")
    a, b = lse_a.double(), lse_b.double()
    m = torch.maximum(a, b)
    empty = m == -math.inf  # both sets empty for this row
    m = torch.where(empty, torch.zeros_like(m), m)
    w_a, w_b = torch.exp(a - m), torch.exp(b - m)  # each <= 1; exp(-inf) = 0
    total = w_a + w_b
    safe = torch.where(empty, torch.ones_like(total), total)
    out = (w_a / safe)[..., None] * out_a.double() + (w_b / safe)[..., None] * out_b.double()
    lse = torch.where(empty, torch.full_like(m, -math.inf), m + torch.log(safe))
    return out.to(out_a.dtype), lse.to(lse_a.dtype)


def ring_step(q, k, v, q_pos, k_pos, out, lse, causal=True):
    """Exercise 10.2: dense fp64 attention of q to this block (``attention_fp64``),
    merged into (out, lse) by ``merge_attention``; returned in q's dtype."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _require_tensor(name, t)
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, H, N, d), got shape {tuple(t.shape)}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape[-1] != q.shape[-1] or v.shape != k.shape:
        raise ValueError(f"head_dim: k and v must be (B, H_kv, N_k, {q.shape[-1]}), got {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"num_kv_heads {k.shape[1]} must divide the {q.shape[1]} query heads")
    for name, pos, n in (("q_pos", q_pos, q.shape[2]), ("k_pos", k_pos, k.shape[2])):
        _require_tensor(name, pos, floating=False)
        if pos.dtype != torch.long:
            raise TypeError(f"{name} must hold int64 positions, got {pos.dtype}")
        if tuple(pos.shape) != (n,):
            raise ValueError(f"{name} must have shape ({n},), got {tuple(pos.shape)}")
    _require_tensor("out", out)
    _require_tensor("lse", lse)
    if out.shape != q.shape:
        raise ValueError(f"out must have q's shape {tuple(q.shape)}, got {tuple(out.shape)}")
    if lse.shape != q.shape[:-1]:
        raise ValueError(f"lse must have shape {tuple(q.shape[:-1])}, got {tuple(lse.shape)}")
    block_out, block_lse = attention_fp64(q, k, v, q_pos, k_pos, causal=causal)
    merged_out, merged_lse = merge_attention(out.double(), lse.double(), block_out, block_lse)
    return merged_out.to(q.dtype), merged_lse.to(lse.dtype)


def shard_positions(seq_len, world_size, rank, layout="zigzag"):
    """The global positions rank ``rank`` holds, built position by position.
    contiguous: the rank-th of P equal pieces. zigzag: the sequence cut into 2P equal
    chunks; rank r holds chunk r and chunk 2P - 1 - r (the mirror image), in that order."""
    for name, value, minimum in (("seq_len", seq_len, 1), ("world_size", world_size, 1), ("rank", rank, 0)):
        _require_int(name, value, minimum)
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size {world_size}, got {rank}")
    if layout not in ("contiguous", "zigzag"):
        raise ValueError(f"layout must be 'contiguous' or 'zigzag', got {layout!r}")
    if seq_len % (world_size if layout == "contiguous" else 2 * world_size):
        raise ValueError(f"seq_len {seq_len} does not split evenly for the {layout} layout of {world_size} ranks")
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
    _require_int("world_size", world_size, 1)
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


def load_imbalance(work):
    """Exercise 10.3: the largest rank's total work over the smallest's, summed rank by
    rank; inf when a rank has none."""
    if not isinstance(work, torch.Tensor) or work.dtype.is_floating_point or work.dtype == torch.bool:
        raise TypeError("work must be an integer tensor")
    if work.dim() != 2 or work.shape[0] != work.shape[1]:
        raise ValueError(f"work must be square (P, P), got shape {tuple(work.shape)}")
    totals = [sum(int(x) for x in row) for row in work.tolist()]
    return math.inf if min(totals) == 0 else max(totals) / min(totals)


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


SUBSTITUTES = {
    "merge_attention": merge_attention,
    "ring_step": ring_step,
    "ring_schedule": ring_schedule,
    "causal_work": causal_work,
    "load_imbalance": load_imbalance,
    "shard_positions": shard_positions,
    "ring_bytes_per_layer": ring_bytes_per_layer,
}
