"""Perplexity of the model over a long text, with any cache.

``perplexity = exp(mean over t of -log p(x_t | x_<t))``, every token after the first
predicted from what the cache lets it see. The text goes through the model in chunks
of ``chunk_size`` tokens (one forward pass each): with a full cache this is the same
as one long forward pass; with a window cache the mask makes it the same as feeding
one token at a time (see :mod:`modellab.caches`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from modellab.attention import dense_attention


@dataclass
class PerplexityResult:
    perplexity: float
    nll: torch.Tensor  # (N - 1,) float64: -log p of each predicted token, in order
    cache_bytes: int | None  # what the cache held at the end (None if it cannot say)


def perplexity(model, token_ids, cache, chunk_size: int = 64, attention=dense_attention) -> PerplexityResult:
    """Run ``token_ids`` (N,) through ``model`` with ``cache`` (fresh) and score every next token."""
    if not isinstance(token_ids, torch.Tensor) or token_ids.dim() != 1 or len(token_ids) < 2:
        raise ValueError("token_ids must be a 1-D tensor of at least 2 token ids")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if cache.seen != 0:
        raise ValueError("cache must be fresh (seen == 0)")
    nll = []
    for start in range(0, len(token_ids) - 1, chunk_size):
        chunk = token_ids[start:start + chunk_size]  # (c,)
        targets = token_ids[start + 1:start + 1 + len(chunk)]  # the next token of each, (c',)
        logits = model.forward(chunk[None], cache, attention)[0, : len(targets)]  # (c', V)
        # The library's cross entropy, in fp64, one value per token. (Exercise 8.2 writes
        # this quantity out from its definition; the lab only needs the number.)
        nll.append(F.cross_entropy(logits.double(), targets, reduction="none"))  # (c',)
    nll = torch.cat(nll)
    try:
        nbytes = cache.nbytes()
    except AttributeError:
        nbytes = None
    return PerplexityResult(math.exp(float(nll.mean())), nll, nbytes)
