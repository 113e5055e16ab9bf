"""Kernel references for Chapter 7: what stands in for one exercise's kernel code while
another exercise is graded (``SUBSTITUTES`` in ref_07_triton_kernels.py).

Exercise 7.3's kernel calls 7.4's ``causal_loop_end`` and ``causal_mask`` from inside
the kernel, and 7.4 can only be run inside a flash kernel. So:

- while 7.3 is graded, the notebook's ``causal_loop_end`` and ``causal_mask`` are the
  ones below, and the student's kernel calls them;
- while 7.4 is graded, ``flash_attention`` and ``flash_fwd_kernel`` are the ones below,
  re-made (``grading.contestant.swap.calling``) so that this kernel calls the *student's*
  helpers;
- while 7.6 or 7.7 is graded, the ptxas reports they read come from this kernel.

``triton.jit`` reads a function's source from its file, so these are written in a real
module. It imports Triton, so it is imported only where the swap is applied, after the
notebook has imported Triton (and chosen ``TRITON_INTERPRET``): never at collection.

The kernel is not the chapter's online softmax: it walks the visible keys twice, first
for each row's largest score, then for the exponentials (all <= 1) and their weighted
sum of values, accumulated in fp32. The loop bound and the mask come only from the two
helpers, so a helper that reads too far or masks wrongly shows in the output.
"""

import math

import torch
import triton
import triton.language as tl

NATURAL_LOG_OF_2 = tl.constexpr(math.log(2.0))  # a global a kernel reads must be a constexpr
LOG2_OF_E = 1.0 / math.log(2.0)
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def causal_loop_end(start_m, seq_len, BLOCK_M: tl.constexpr):
    """Exercise 7.4: the keys a causal query block needs end after its last query
    (start_m * BLOCK_M + BLOCK_M - 1), and never run past the sequence."""
    last_query = start_m * BLOCK_M + (BLOCK_M - 1)
    return tl.minimum(last_query + 1, seq_len)


@triton.jit
def causal_mask(s, offs_m, offs_n):
    """Exercise 7.4: -inf wherever the key comes after the query."""
    key_after_query = offs_n[None, :] > offs_m[:, None]  # (BLOCK_M, BLOCK_N)
    return tl.where(key_after_query, float("-inf"), s)


@triton.jit
def flash_fwd_kernel(
    Q, K, V, Out, Lse,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    stride_lb, stride_lh, stride_ln,
    seq_len, num_heads, qk_scale,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    """Exercise 7.3's arguments (scores in base 2: qk_scale = log2(e) / sqrt(d)); two passes over the keys."""
    block = tl.program_id(0)
    batch = tl.program_id(1) // num_heads
    head = tl.program_id(1) % num_heads
    kv_head = head // GROUP
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query positions
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < seq_len
    q = tl.load(Q + batch * stride_qb + head * stride_qh + rows[:, None] * stride_qn + dims[None, :] * stride_qd,
                mask=row_ok[:, None], other=0.0)  # (BLOCK_M, d)
    k_head = K + batch * stride_kb + kv_head * stride_kh
    v_head = V + batch * stride_vb + kv_head * stride_vh
    stop = seq_len
    if CAUSAL:
        stop = causal_loop_end(block, seq_len, BLOCK_M)

    # First pass: each row's largest visible score.
    top = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    for first in range(0, stop, BLOCK_N):
        cols = first + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key positions
        col_ok = cols < seq_len
        k = tl.load(k_head + cols[:, None] * stride_kn + dims[None, :] * stride_kd, mask=col_ok[:, None], other=0.0)
        s = tl.where(col_ok[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))  # (BLOCK_M, BLOCK_N)
        if CAUSAL:
            s = causal_mask(s, rows, cols)
        top = tl.maximum(top, tl.max(s, 1))

    # Second pass: exponentials against that maximum, their sum and their weighted values.
    total = tl.zeros([BLOCK_M], dtype=tl.float32)
    weighted = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for first in range(0, stop, BLOCK_N):
        cols = first + tl.arange(0, BLOCK_N)
        col_ok = cols < seq_len
        k = tl.load(k_head + cols[:, None] * stride_kn + dims[None, :] * stride_kd, mask=col_ok[:, None], other=0.0)
        v = tl.load(v_head + cols[:, None] * stride_vn + dims[None, :] * stride_vd, mask=col_ok[:, None], other=0.0)
        s = tl.where(col_ok[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        if CAUSAL:
            s = causal_mask(s, rows, cols)
        p = tl.math.exp2(s - top[:, None])  # (BLOCK_M, BLOCK_N), each in [0, 1]
        total += tl.sum(p, 1)
        weighted = tl.dot(p.to(v.dtype), v, weighted)  # fp32 accumulation

    out = weighted / total[:, None]
    lse = (top + tl.math.log2(total)) * NATURAL_LOG_OF_2
    tl.store(Out + batch * stride_ob + head * stride_oh + rows[:, None] * stride_on + dims[None, :] * stride_od,
             out.to(Out.dtype.element_ty), mask=row_ok[:, None])
    tl.store(Lse + batch * stride_lb + head * stride_lh + rows * stride_ln, lse, mask=row_ok)


def flash_attention(q, k, v, causal=False, block_m=32, block_n=32, num_warps=4, num_stages=2):
    """Exercise 7.3's wrapper: checks the inputs its statement names and launches the
    ``flash_fwd_kernel`` of this module's globals (one program per query block and head).
    Returns (out (B, H, N, d) in q.dtype, lse (B, H, N) fp32, natural log)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, H, N, d), got shape {tuple(t.shape)}")
        if t.dtype not in FLOAT_DTYPES or t.dtype != q.dtype:
            raise TypeError(f"{name} must be float32, float16 or bfloat16 like q, got {t.dtype}")
    B, H, N, d = q.shape
    if v.shape != k.shape or k.shape[0] != B or k.shape[2] != N or k.shape[3] != d:
        raise ValueError(f"k and v must be (B={B}, H_kv, N={N}, d={d}), got {tuple(k.shape)} and {tuple(v.shape)}")
    if H % k.shape[1]:
        raise ValueError(f"k's {k.shape[1]} heads must divide q's {H}")
    if d < 16 or d & (d - 1):
        raise ValueError(f"head_dim must be a power of two >= 16, got {d}")
    for name, size in (("block_m", block_m), ("block_n", block_n)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 16 or size & (size - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {size}")
    out = torch.empty((B, H, N, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    flash_fwd_kernel[(triton.cdiv(N, block_m), B * H)](
        q, k, v, out, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(), *lse.stride(),
        N, H, LOG2_OF_E / math.sqrt(d),
        GROUP=H // k.shape[1], HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal),
        num_warps=num_warps, num_stages=num_stages,
    )
    return out, lse
