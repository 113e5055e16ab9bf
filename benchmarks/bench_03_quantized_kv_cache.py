"""Chapter 3 benchmarks: compression and attention-output error of quantized KV caches.

Everything runs on the chapter's stated synthetic outlier model (``synthetic_kv`` in
the solution notebook: N(0, 1) keys and values, 4 key channels per KV head scaled by
10) with N(0, 1) queries, 32 query heads over 8 KV heads of head_dim 128, 4096
cached tokens and 16 decode queries. Memory is measured on the cache objects
(``nbytes()``: codes, fp16 scales and zero-points, residual), not computed from a
formula; the fp16 cache it is compared with holds the same tokens at 2 bytes each."""

from __future__ import annotations

import torch

from benchmarks.records import Record
from benchmarks.solutions import load_solutions
from grading.compare import relative_rms_error

BATCH, HEADS, KV_HEADS, HEAD_DIM, SEQ_LEN, QUERIES = 1, 32, 8, 128, 4096, 16


def run() -> list[Record]:
    sol = load_solutions("03_quantized_kv_cache")
    k, v, _ = sol.synthetic_kv(BATCH, KV_HEADS, SEQ_LEN, HEAD_DIM, seed=0)  # (B, H_kv, T, d) fp32
    q = torch.randn(BATCH, HEADS, QUERIES, HEAD_DIM, generator=torch.Generator().manual_seed(1))
    exact = sol.attention(q, k, v)  # fp32 cache
    fp16_bytes = 2 * k.numel() * torch.finfo(torch.float16).bits // 8

    records = []
    caches = {}
    for bits, group in [(8, 128), (4, 64), (4, 32)]:
        cache = sol.QuantizedKVCache(BATCH, KV_HEADS, HEAD_DIM, bits=bits, group_size=group)
        cache.append(k, v)
        caches[bits, group] = cache
    int8, int4 = caches[8, 128], caches[4, 64]
    records.append(Record("quant.int8_compression", fp16_bytes / int8.nbytes(), "x", ">= 1.9",
                          note="KIVI-style INT8, group 128, fp16 scales and zero-points counted"))
    int8_err = relative_rms_error(sol.attention(q, *int8.keys_values()), exact)
    records.append(Record("quant.int8_attn_rel_err", int8_err, "rel", "<= 0.015",
                          note="keys per channel, values per token, vs attention over the fp32 cache"))
    records.append(Record("quant.int4_g64_compression", fp16_bytes / int4.nbytes(), "x", ">= 3.5",
                          note="two codes per byte, fp16 scale and zero-point per group of 64"))
    for (bits, group), cache in caches.items():
        if bits == 4:
            err = relative_rms_error(sol.attention(q, *cache.keys_values()), exact)
            records.append(Record(f"quant.int4_g{group}_attn_rel_err", err, "rel",
                                  note="context for the INT4 compression figures"))

    # Keys alone, INT4 in groups of 64: per token (groups along head_dim) vs per channel
    # (groups of 64 tokens); values left exact so the ratio isolates the keys.
    per_token = sol.dequantize_asym(*sol.quantize_asym(k, 4, 64), 64)
    per_channel = sol.dequantize_keys_per_channel(*sol.quantize_keys_per_channel(k, 4, 64), 64)
    err_token = relative_rms_error(sol.attention(q, per_token, v), exact)
    err_channel = relative_rms_error(sol.attention(q, per_channel, v), exact)
    records.append(Record("quant.per_channel_key_err_gain", err_token / err_channel, "x", ">= 2",
                          note=f"attention error, per-token INT4 keys {err_token:.4f} / per-channel {err_channel:.4f}"))
    return records
