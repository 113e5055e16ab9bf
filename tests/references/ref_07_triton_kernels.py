"""Independent references for Chapter 7, in fp64 and written the obvious way: an
element-wise sum, a softmax from its definition, dense attention with an explicit
mask and an explicit repeat of the KV heads, and decode attention that gathers every
token through the block table one at a time. Never imported from a notebook.

``SUBSTITUTES`` (grading.judge.substitute): while one exercise is graded, the notebook's
functions of the exercises it calls are references. The kernel references are
``@triton.jit`` functions in ref_07_triton_jit.py, named by string so that Triton is
imported only where the swap is applied (see that module)."""

import math

import torch

from grading.contestant.swap import calling


def vector_add(x, y):
    return x.double() + y.double()


def softmax_rows(x):
    """softmax(x)_j = exp(x_j - max x) / sum_k exp(x_k - max x), row by row."""
    x = x.double()
    shifted = x - x.max(dim=-1, keepdim=True).values
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)


def expand_kv_heads(t, num_heads):
    """(B, H_kv, N, d) -> (B, H, N, d): query head h reads KV head h // (H // H_kv)."""
    B, H_kv, N, d = t.shape
    group = num_heads // H_kv
    heads = [t[:, h // group] for h in range(num_heads)]
    return torch.stack(heads, dim=1)


def attention(q, k, v, causal=False):
    """Dense attention in fp64. q (B, H, N, d), k and v (B, H_kv, N, d).

    Returns (out (B, H, N, d), lse (B, H, N)) with s = q k^T / sqrt(d), s_ij = -inf for
    j > i when causal, out = softmax(s) v and lse = log sum_j exp(s_ij) (natural log)."""
    q, k, v = q.double(), k.double(), v.double()
    H, N, d = q.shape[1], q.shape[2], q.shape[3]
    k, v = expand_kv_heads(k, H), expand_kv_heads(v, H)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)  # (B, H, N, N)
    if causal:
        future = torch.arange(N)[None, :] > torch.arange(N)[:, None]
        s = s.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (B, H, N)
    out = torch.exp(s - lse[..., None]) @ v
    return out, lse


def paged_decode(q, k_pages, v_pages, block_tables, seq_lens):
    """Decode attention in fp64, one sequence and one token at a time.

    q (B, H, d); k_pages, v_pages (num_pages, page_size, H_kv, d); token t of sequence b
    is slot t % page_size of page block_tables[b, t // page_size]. Returns (B, H, d)."""
    B, H, d = q.shape
    page_size, H_kv = k_pages.shape[1], k_pages.shape[2]
    group = H // H_kv
    out = torch.zeros(B, H, d, dtype=torch.float64)
    for b in range(B):
        n = int(seq_lens[b])
        keys, values = [], []
        for t in range(n):
            page = int(block_tables[b, t // page_size])
            keys.append(k_pages[page, t % page_size].double())  # (H_kv, d)
            values.append(v_pages[page, t % page_size].double())
        K = torch.stack(keys)  # (n, H_kv, d)
        V = torch.stack(values)
        for h in range(H):
            scores = K[:, h // group] @ q[b, h].double() / math.sqrt(d)  # (n,)
            w = torch.softmax(scores, dim=0)
            out[b, h] = w @ V[:, h // group]
    return out


# -- Exercises 7.6 and 7.7: what the compiler's numbers allow on one SM ---------------------------
# The CUDA occupancy calculator's limits for compute capability 8.0 (A100) and 9.0 (H100)
# (cuda_occupancy.h; NVIDIA's Ampere and Hopper tuning guides), written out again here.
SM = {
    "sm_80": {"shared": 164 * 1024},
    "sm_90": {"shared": 228 * 1024},
}
SM_REGISTERS, SM_SUB_PARTITIONS, REGISTER_UNIT = 65536, 4, 256
SM_WARP_SLOTS, SM_BLOCK_SLOTS, SHARED_RESERVED, SHARED_UNIT = 64, 32, 1024, 128


def _round_up(x, unit):
    return unit * math.ceil(x / unit)


def occupancy(registers_per_thread, shared_bytes_per_block, threads_per_block, arch="sm_90"):
    """Fill one SM with programs, one at a time, until the next does not fit.

    The SM has four register pools of 16384 (a warp takes all its registers, rounded up
    to 256, from one pool), 64 warp slots, 32 block slots and its shared memory, from
    which each program takes its bytes plus 1 KiB, rounded up to 128. Returns
    {"blocks", "warps", "limiter"}; the limiter is the first resource, in the order
    registers, shared memory, warps, blocks, that would refuse one more program."""
    warps = math.ceil(threads_per_block / 32)
    per_warp = _round_up(registers_per_thread * 32, REGISTER_UNIT)
    per_block_shared = _round_up(shared_bytes_per_block + SHARED_RESERVED, SHARED_UNIT)

    def refuses(pools, shared_left, warp_slots, block_slots):
        """Which resource refuses one more program (None: it fits), and the state after it."""
        pools = list(pools)
        for _ in range(warps):  # each warp into the pool with the most registers left
            best = max(range(SM_SUB_PARTITIONS), key=lambda i: pools[i])
            if pools[best] < per_warp:
                return "registers", None
            pools[best] -= per_warp
        if shared_left < per_block_shared:
            return "shared memory", None
        if warp_slots < warps:
            return "warps", None
        if block_slots < 1:
            return "blocks", None
        return None, (pools, shared_left - per_block_shared, warp_slots - warps, block_slots - 1)

    state = ([SM_REGISTERS // SM_SUB_PARTITIONS] * SM_SUB_PARTITIONS, SM[arch]["shared"], SM_WARP_SLOTS,
             SM_BLOCK_SLOTS)
    blocks = 0
    while True:
        limiter, after = refuses(*state)
        if limiter is not None:
            break
        state, blocks = after, blocks + 1
    return {"blocks": blocks, "warps": blocks * warps, "limiter": limiter}


def ptxas_numbers(log):
    """(registers, spill bytes) read from a ptxas -v log, line by line."""
    registers, spilled = None, 0
    for line in log.splitlines():
        words = line.replace(",", " ").split()
        for i, word in enumerate(words):
            if word == "Used" and i + 2 < len(words) and words[i + 2] == "registers" and registers is None:
                registers = int(words[i + 1])
            if word == "spill" and i >= 2 and words[i - 1] == "bytes":
                spilled += int(words[i - 2])
    return registers, spilled


def choose_block_config(reports, programs_per_sm):
    """The fitting configuration with the largest BLOCK_M * BLOCK_N, then larger BLOCK_M,
    fewer warps, more stages; None if none fits. Fits: no spill bytes, and programs_per_sm
    programs of it fit in the four register pools (warps placed one by one, as in
    :func:`occupancy`)."""
    best = None
    for (block_m, block_n, num_warps, num_stages), log in reports.items():
        registers, spilled = ptxas_numbers(log)
        if spilled:
            continue
        by_registers = _register_programs(registers, num_warps)
        if by_registers < programs_per_sm:
            continue
        rank = (block_m * block_n, block_m, -num_warps, num_stages)
        if best is None or rank > best[0]:
            best = (rank, (block_m, block_n, num_warps, num_stages))
    return None if best is None else best[1]


def _register_programs(registers, num_warps):
    """Programs whose warps the four register pools hold, placing warp by warp."""
    per_warp = _round_up(registers * 32, REGISTER_UNIT)
    pools = [SM_REGISTERS // SM_SUB_PARTITIONS] * SM_SUB_PARTITIONS
    programs = 0
    while True:
        for _ in range(num_warps):
            best = max(range(SM_SUB_PARTITIONS), key=lambda i: pools[i])
            if pools[best] < per_warp:
                return programs
            pools[best] -= per_warp
        programs += 1


_JIT = "tests.references.ref_07_triton_jit"
SUBSTITUTES = {
    # 7.3's kernel calls these two inside the kernel.
    "causal_loop_end": f"{_JIT}:causal_loop_end",
    "causal_mask": f"{_JIT}:causal_mask",
    # 7.4 is graded inside these, re-made to call the notebook's helpers (the student's
    # while 7.4 is graded); 7.6 and 7.7 read the compiler's report on this kernel.
    "flash_fwd_kernel": calling(f"{_JIT}:flash_fwd_kernel", "causal_loop_end", "causal_mask"),
    "flash_attention": calling(f"{_JIT}:flash_attention", "flash_fwd_kernel"),
    # 7.7's statement counts registers "as in Exercise 7.6": a student may call it.
    "occupancy": occupancy,
}
