"""Greedy self-speculative decoding on SmolLM2: the model drafts for itself from a small cache.

Chapter 14's lab. One model plays both parts:

- the **target** is the model on its full dense cache (:class:`modellab.caches.DenseCache`);
- the **draft** is the same weights on a sink-and-window cache that can roll back
  (Exercise 14.8's ``DraftWindowCache``, one per layer), filled from the target's prompt
  cache, as MagicDec's StreamingLLM draft is: the draft reads a few hundred tokens where
  the target reads them all; or the same weights on the target's own cache, each query
  head reading only the pages Chapter 11's Quest selects (:func:`selected_attention`), a
  selection by score as TriForce's retrieval cache is.

One round drafts ``gamma`` tokens one at a time on the draft's cache, runs the target once
on the pending token and the ``gamma`` drafts (``gamma + 1`` query tokens), keeps the
longest prefix of drafts that equal the target's own greedy choices plus the target's next
token (Exercise 14.3's ``verify_greedy``), truncates the target's cache to what was
accepted and rolls the draft's cache back. The tokens are those of plain greedy decoding,
whatever the draft proposes: every emitted token is the target's argmax after the tokens
before it.

The verification, the draft's cache and Quest's selection are exercises of Chapters 14
and 11, so this module holds none of them: the caller passes them (the chapter loads them
from the solution notebooks, :func:`chapter14` for Chapter 14's). State that both halves
continue from is a :class:`Prefilled` prompt, so that several runs share one prefill.

Equal tokens are exact up to one caveat, the one Chapter 12 names for batching: the
verification computes ``gamma + 1`` positions in one forward pass where plain decoding
computes one, so the sums inside the matrix products run in another order, and a token
could differ where the target's top two logits tie within fp32 rounding.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch

from modellab.attention import dense_attention
from modellab.caches import ModelCache
from modellab.decode import Llama

STEM = "14_speculative_decoding"
NAMES = ("verify_greedy", "DraftWindowCache")


def chapter14():
    """Chapter 14's solution notebook as a module (``verify_greedy``, ``DraftWindowCache``),
    or None when it is missing or lacks either."""
    from modellab.adapters import chapter

    return chapter(STEM, NAMES)


@dataclass(frozen=True)
class Prefilled:
    """A prompt the target has read: its dense cache and the logits (V,) at its last token."""

    cache: ModelCache
    last_logits: torch.Tensor


@dataclass(frozen=True)
class SpecRun:
    """What one speculative generation did.

    ``tokens``: the emitted token ids; ``drafted``: draft tokens proposed; ``accepted``:
    those the target kept; ``rejections``: rounds that ended on a rejected draft;
    ``verifications``: target forward passes after the prompt; ``draft_forwards``: the
    draft's forward passes."""

    tokens: list[int]
    drafted: int
    accepted: int
    rejections: int
    verifications: int
    draft_forwards: int

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens over drafted ones (0.0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def per_token_acceptance(self) -> float:
        """The estimate of the chance ``alpha`` that a draft is accepted, given the ones before
        it were: accepted drafts over drafts the target judged (the accepted and the one
        rejection of each round that had one). Drafts after a rejection are never judged,
        which is why accepted over drafted is lower than ``alpha``."""
        judged = self.accepted + self.rejections
        return self.accepted / judged if judged else 0.0

    @property
    def tokens_per_verify(self) -> float:
        """Emitted tokens per target verification (the first token comes from the prompt's pass)."""
        return (len(self.tokens) - 1) / self.verifications if self.verifications else 0.0


class DraftLayer:
    """One layer's ``DraftWindowCache`` seen as a modellab layer cache (a batch of one).

    The exercise's cache speaks ``(H_kv, T, d)``; the decode loop ``(1, H_kv, T, d)``, and
    it asks for the kept tokens' positions after their keys and values."""

    def __init__(self, cache):
        self.cache = cache
        self._positions = None

    def append(self, k, v):
        if k.shape[0] != 1:
            raise ValueError(f"k: the draft holds one sequence, got batch {k.shape[0]}")
        self.cache.append(k[0], v[0])  # (H_kv, T, d)
        self._positions = None

    def keys_values(self):
        k, v, self._positions = self.cache.keys_values()  # (H_kv, S, d), (H_kv, S, d), (S,)
        return k[None], v[None]

    def positions(self):
        if self._positions is None:
            self.keys_values()
        return self._positions

    def rollback(self, n):
        self.cache.rollback(n)
        self._positions = None


def _check_int(name, value, minimum):
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def prefill(model: Llama, prompt_ids: torch.Tensor) -> Prefilled:
    """The target reads ``prompt_ids`` (1, T) int64 into a fresh dense cache."""
    if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1:
        raise ValueError(f"prompt_ids must be a (1, T) tensor, got {getattr(prompt_ids, 'shape', prompt_ids)!r}")
    cache = model.new_cache()
    logits = model.forward(prompt_ids, cache)  # (1, T, V)
    return Prefilled(cache, logits[0, -1])


def plain_greedy(model: Llama, start: Prefilled, max_new_tokens: int) -> list[int]:
    """Plain greedy decoding from a prefilled prompt, one token a step: ``Llama.generate``'s
    loop after its prefill (``start`` is not modified)."""
    _check_int("max_new_tokens", max_new_tokens, 1)
    cache = copy.deepcopy(start.cache)
    tokens = [int(start.last_logits.argmax())]
    while len(tokens) < max_new_tokens:
        logits = model.forward(torch.tensor([[tokens[-1]]]), cache)  # (1, 1, V)
        tokens.append(int(logits[0, -1].argmax()))
    return tokens


def draft_cache(model: Llama, start: Prefilled, make_cache: Callable[[], object]) -> ModelCache:
    """The draft's model cache: one ``make_cache()`` (a ``DraftWindowCache``) per layer,
    given the prompt's keys and values from the target's cache, of which it keeps its sinks
    and its window. The draft's mask is causal only: what it may see is what its cache kept."""
    cache = ModelCache.from_layers(DraftLayer(make_cache()) for _ in range(model.config.num_layers))
    for i in range(len(cache.layers)):
        cache.append(i, *start.cache.keys_values(i))  # (1, H_kv, T, d) each
    return cache


def _draft(model, cache, pending, gamma):
    """Propose ``gamma`` tokens greedily after ``pending`` on the draft's cache: (tokens, forwards)."""
    proposed, forwards, feed = [], 0, pending
    while len(proposed) < gamma:
        logits = model.forward(torch.tensor([feed]), cache)  # (1, len(feed), V)
        forwards += 1
        proposed.append(int(logits[0, -1].argmax()))
        feed = proposed[-1:]
    return proposed, forwards


class _WindowDraft:
    """The draft on a cache of its own, one ``DraftWindowCache`` per layer, rolled back after
    each verification. ``pending``: emitted tokens its cache has not read yet."""

    def __init__(self, model, start, make_cache, first):
        self.model, self.cache, self.pending = model, draft_cache(model, start, make_cache), [first]

    def propose(self, g):
        return _draft(self.model, self.cache, self.pending, g)

    def settle(self, proposed, emitted):
        g, n = len(proposed), len(emitted) - 1
        if g and n < g:
            # it read pending and proposed[:g - 1]; it keeps pending and proposed[:n]
            self.cache.rollback(g - 1 - n)
            self.pending = emitted[-1:]
        else:
            # every draft was accepted (or none made): the last one was never fed to it
            self.pending = (proposed[-1:] if g else self.pending) + emitted[-1:]


class _SelectedDraft:
    """The draft on the target's own cache, read through ``attention`` (a page selection):
    it appends its guesses to the target's cache and truncates them before the verification."""

    def __init__(self, model, target, attention, first):
        self.model, self.target, self.attention, self.last = model, target, attention, first

    def propose(self, g):
        before, proposed = self.target.seen, []
        while len(proposed) < g:
            feed = torch.tensor([[self.last if not proposed else proposed[-1]]])  # (1, 1)
            logits = self.model.forward(feed, self.target, self.attention)  # (1, 1, V)
            proposed.append(int(logits[0, -1].argmax()))
        self.target.rollback(self.target.seen - before)
        return proposed, len(proposed)

    def settle(self, proposed, emitted):
        self.last = emitted[-1]


def selected_attention(page_bounds: Callable, quest_select: Callable, page_size: int, budget: int) -> Callable:
    """An attention ``(q, k, v, mask) -> out`` in which each query head reads only the pages of
    the cache that Chapter 11's Quest selects for it: ``budget`` pages of ``page_size``
    tokens, the last page always among them (``page_bounds(keys, page_size)`` and
    ``quest_select(q, page_min, page_max, budget)`` are Exercises 11.4 and 11.5's). Shapes
    as in :mod:`modellab.attention`: q (B, H, T_q, d), k, v (B, H_kv, T_k, d), mask (T_q, T_k)."""
    _check_int("page_size", page_size, 1)
    _check_int("budget", budget, 1)

    def attention(q, k, v, mask):
        B, H, T, _ = q.shape  # q: (B, H, T_q, d)
        page_min, page_max = page_bounds(k, page_size)  # (B, H_kv, P, d)
        page_of = torch.arange(k.shape[2]) // page_size  # (T_k,)
        visible = torch.zeros(B, H, T, k.shape[2], dtype=torch.bool)
        for t in range(T):
            pages = quest_select(q[:, :, t], page_min, page_max, budget)  # (B, H, S)
            chosen = torch.zeros(B, H, page_min.shape[2], dtype=torch.bool).scatter_(2, pages, True)
            visible[:, :, t] = chosen[:, :, page_of]  # (B, H, T_k)
        return dense_attention(q, k, v, visible & mask)  # visible: (B, H, T_q, T_k), selected and causal

    return attention


def speculative_greedy(model: Llama, start: Prefilled, max_new_tokens: int, gamma: int,
                       make_draft_cache: Callable[[], object] | None, verify_greedy: Callable, *,
                       draft_attention: Callable | None = None) -> SpecRun:
    """Greedy self-speculative decoding of ``max_new_tokens`` tokens after a prefilled prompt.

    The draft is the model on a cache of its own, ``make_draft_cache()`` per layer (a
    ``DraftWindowCache(num_sink, window, max_rollback)`` with ``max_rollback >= gamma``), or,
    with ``draft_attention`` given (and ``make_draft_cache`` None), the model on the target's
    own cache read through that attention (:func:`selected_attention`).
    ``verify_greedy(target_logits (1, g + 1, V), draft_tokens (1, g) int64) -> [[int, ...]]``
    is Exercise 14.3's. Each round drafts ``g = min(gamma, tokens still to emit - 1)`` tokens,
    so the run emits exactly ``max_new_tokens``. ``start`` is not modified. Raises
    TypeError/ValueError for a non-int or too small ``max_new_tokens`` (>= 1) or ``gamma``
    (>= 0), and ValueError unless exactly one of ``make_draft_cache`` and
    ``draft_attention`` is given."""
    _check_int("max_new_tokens", max_new_tokens, 1)
    _check_int("gamma", gamma, 0)
    if (make_draft_cache is None) == (draft_attention is None):
        raise ValueError("make_draft_cache, draft_attention: give exactly one of them")
    target = copy.deepcopy(start.cache)
    tokens = [int(start.last_logits.argmax())]
    if draft_attention is None:
        draft = _WindowDraft(model, start, make_draft_cache, tokens[0])
    else:
        draft = _SelectedDraft(model, target, draft_attention, tokens[0])
    drafted = accepted = rejections = verifications = draft_forwards = 0
    while len(tokens) < max_new_tokens:
        g = min(gamma, max_new_tokens - len(tokens) - 1)
        proposed, forwards = draft.propose(g) if g else ([], 0)
        draft_forwards += forwards
        before = target.seen
        logits = model.forward(torch.tensor([[tokens[-1], *proposed]]), target)  # (1, g + 1, V)
        verifications += 1
        emitted = verify_greedy(logits, torch.tensor([proposed], dtype=torch.long).view(1, g))[0]
        n = len(emitted) - 1  # drafts accepted
        drafted, accepted, rejections = drafted + g, accepted + n, rejections + (n < g)
        tokens += emitted
        target.rollback(target.seen - (before + 1 + n))
        draft.settle(proposed, emitted)
    return SpecRun(tokens, drafted, accepted, rejections, verifications, draft_forwards)
