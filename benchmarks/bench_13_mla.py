"""Chapter 13's ``make bench`` records: multi-head latent attention.

- ``mla.absorbed_vs_naive_max_abs_err``: the largest difference between the solution's
  absorbed and naive MLA (Exercises 13.2 and 13.1) in fp64, on DeepSeek-V3's head sizes
  with the 16 heads of one rank of tensor parallelism 8, 2,048 cached tokens and 4 query
  tokens.
- ``mla.decode_intensity_absorbed`` and ``mla.decode_intensity_gqa``: FLOPs per byte of
  cache of one decode step (Exercise 13.3) at 32K tokens and one query token, bf16, for
  DeepSeek-V3's MLA layer and Llama-3.1-70B's GQA layer (report).
- ``mla.cpu_decode_speedup_absorbed``: naive decode time over absorbed decode time on the
  CPU (the solution's two functions, one query token, 32K cached tokens, fp32, the 16
  heads of one TP-8 rank), the median of paired rounds (report).
- ``mla.kv_bytes_per_rank_tp8_over_dcp8``: the bytes of MLA cache the fullest rank holds
  under tensor parallelism 8 over those with decode context parallelism 8 as well
  (Exercise 13.5, 128K tokens; report).
"""

from __future__ import annotations

import math

import torch

from benchmarks.records import Record, median_ratio, paired_times
from benchmarks.solutions import load_solutions

DEEPSEEK_V3 = {"num_attention_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "v_head_dim": 128}
LLAMA_70B = {"num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}
MLA_TP = {"attention": "mla", "kv_lora_rank": 512, "qk_rope_head_dim": 64}
HEADS_PER_RANK = 16  # DeepSeek-V3's 128 heads on 8 tensor-parallel ranks
ERR_N, ERR_QUERIES = 2048, 4
TIME_N = 32768
INTENSITY_N = 32768
TP_N = 131072
ROUNDS = 5  # paired rounds of the two decodes (naive: about 140 GFLOP a call)


def mla_inputs(B, H, N_q, N, dtype, seed):
    """q_nope, q_pe, c_kv, k_pe, w_uk, w_uv of DeepSeek-V3's sizes with H heads, scores of order 1."""
    c = DEEPSEEK_V3
    r, d_nope, d_rope, d_v = c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)

    return (randn(B, H, N_q, d_nope), randn(B, H, N_q, d_rope), randn(B, N, r), randn(B, N, d_rope),
            randn(H, d_nope, r, scale=1 / math.sqrt(r)), randn(H, d_v, r, scale=1 / math.sqrt(r)))


def run() -> list[Record]:
    sol = load_solutions("13_mla")
    args = mla_inputs(1, HEADS_PER_RANK, ERR_QUERIES, ERR_N, torch.float64, seed=0)
    err = (sol.mla_attention_absorbed(*args) - sol.mla_attention_naive(*args)).abs().max().item()

    intensity = {}
    for name, config, mode in (("absorbed", DEEPSEEK_V3, "absorbed"), ("gqa", LLAMA_70B, "gqa")):
        flops, nbytes = sol.decode_step_cost(config, INTENSITY_N, mode)
        intensity[name] = flops / nbytes

    args = mla_inputs(1, HEADS_PER_RANK, 1, TIME_N, torch.float32, seed=1)
    naive, absorbed = paired_times([lambda: sol.mla_attention_naive(*args), lambda: sol.mla_attention_absorbed(*args)],
                                   rounds=ROUNDS)
    speedup = median_ratio(naive, absorbed)

    tp8 = max(sol.kv_bytes_per_rank(MLA_TP, 8, TP_N))
    dcp8 = max(sol.kv_bytes_per_rank(MLA_TP, 8, TP_N, dcp_size=8))
    shape = f"d_nope=128 d_rope=64 d_v=128 r=512, H={HEADS_PER_RANK}"
    return [
        Record("mla.absorbed_vs_naive_max_abs_err", err, "abs", "<= 1e-10",
               note=f"fp64, {shape}, N={ERR_N}, {ERR_QUERIES} query tokens"),
        Record("mla.decode_intensity_absorbed", intensity["absorbed"], "FLOP/B",
               note=f"DeepSeek-V3 layer, 128 heads, N={INTENSITY_N}, one query token, bf16 cache"),
        Record("mla.decode_intensity_gqa", intensity["gqa"], "FLOP/B",
               note=f"Llama-3.1-70B layer, 64 heads, 8 KV heads of 128, N={INTENSITY_N}, one query token, bf16"),
        Record("mla.cpu_decode_speedup_absorbed", speedup, "x",
               note=f"naive time / absorbed time, median of {ROUNDS} paired rounds, fp32, {shape}, N={TIME_N}, "
                    f"one query token, {torch.get_num_threads()} threads; best naive {min(naive):.3f} s, "
                    f"best absorbed {min(absorbed):.4f} s"),
        Record("mla.kv_bytes_per_rank_tp8_over_dcp8", tp8 / dcp8, "x",
               note=f"MLA 512 + 64, N={TP_N}: {tp8} bytes per rank and layer at TP 8, {dcp8} with DCP 8"),
    ]
