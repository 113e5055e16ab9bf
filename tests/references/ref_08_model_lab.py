"""Independent references for Chapter 8: a cache is the concatenation of its chunks;
a doubling policy's capacity is a power-of-two multiple; perplexity written as a loop
over positions in fp64."""

import math

import torch


def concatenated(chunks):
    """What a cache must hand back after appending ``chunks`` (each (B, H_kv, T, d)) in order."""
    return torch.cat(chunks, dim=2)


def doubled_capacity(initial, total_tokens):
    capacity = initial
    while capacity < total_tokens:
        capacity *= 2
    return capacity


def next_token_nll(logits, token_ids):
    out = []
    z = logits.double()
    for t in range(len(token_ids) - 1):
        row = z[t]
        top = float(row.max())
        log_sum = top + math.log(float(torch.exp(row - top).sum()))
        out.append(log_sum - float(row[int(token_ids[t + 1])]))
    return torch.tensor(out, dtype=torch.float64)
