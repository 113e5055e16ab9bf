"""A model runner for Chapter 12's scheduler: a schedule executed on SmolLM2.

A serving engine has two halves. The scheduler (Chapter 12's Exercises 12.5 and 12.6)
decides *when* each request's tokens are computed and writes it down as a schedule: a
list of steps, each a list of ``(request id, n)``, "compute the next n tokens of this
request" (Exercise 12.6's ``"steps"``). The model runner, this module, executes a
schedule on our decode loop's weights (:class:`modellab.decode.Llama`):

- **one forward pass per step** over every chunk the step schedules. The projections and
  the MLP see all the step's tokens as one ``(N, D)`` matrix, so their weights are read
  once per step whatever the batch: that is what continuous batching buys. Attention
  sees each request's own cache and positions (:func:`step_forward`);
- **greedy tokens:** when a chunk reaches the last token a request knows, the argmax of
  its logits is the request's next token;
- **prefix hits:** a request that arrives with ``cached`` prompt tokens starts from the
  blocks other requests computed before it and computes only the rest. Blocks are kept
  by their whole prefix (a tuple of token ids), which is what a chained block hash
  stands for; nothing is evicted, as the traces here are small.

- **preemption by recomputation:** a request the scheduler preempts (Exercise 12.6's
  ``"preempted"``, ``(step, id)`` pairs) loses its cache at the start of that step and
  starts again from its prefix hit; its recomputation reaches the tokens it has
  generated so far, and the chunk that ends there gives its next token.

The runner decides nothing: it checks that the schedule is one it can execute (each
chunk continues where its request stopped, within the tokens it knows) and raises
ValueError naming the step otherwise. The point of the exercise: the schedule changes
*when* work happens, never *what* the model says, so the tokens equal
one-request-at-a-time decoding (:meth:`Llama.generate`); a prefix hit removes work and
a preemption adds some, without changing them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from modellab.attention import dense_attention
from modellab.caches import ModelCache
from modellab.decode import Llama, rms_norm, rope


@dataclass
class Request:
    """A request of a trace: its prompt's token ids, how many tokens it generates, and how
    many leading prompt tokens the prefix cache holds when it arrives (a whole number of
    blocks, fewer than the prompt: the last prompt token is always computed)."""

    id: int
    prompt: list[int]
    max_output: int
    cached: int = 0


@dataclass
class ScheduleRun:
    """What executing a schedule did: each request's greedy tokens, the tokens the model
    computed (recomputations included, prefix hits excluded) and the forward passes (one
    per non-empty step)."""

    tokens: dict[int, list[int]]
    computed: int
    passes: int


@torch.inference_mode()
def step_forward(model: Llama, chunks: list[tuple[ModelCache, torch.Tensor]], attention=dense_attention):
    """Logits (len(chunks), V) at the last token of each chunk, for one step of a batch.

    ``chunks``: ``(cache, ids)`` per request, ``ids`` int64 (n,), the request's next n
    tokens after what its cache holds. The chunks' tokens form one (1, N, D) batch for
    every matrix product; each request's queries attend to its own cache, at its own
    positions, and its keys and values are appended to it."""
    c = model.config
    H, H_kv, d = c.num_heads, c.num_kv_heads, c.head_dim
    lengths = [int(ids.numel()) for _, ids in chunks]
    positions = [torch.arange(cache.seen, cache.seen + n) for (cache, _), n in zip(chunks, lengths)]  # (n,) each
    x = F.embedding(torch.cat([ids for _, ids in chunks])[None], model.embed)  # (1, N, D)
    for i, w in enumerate(model.layers):
        h = rms_norm(x, w.attn_norm, c.rms_norm_eps)
        q_all, k_all, v_all = F.linear(h, w.wq), F.linear(h, w.wk), F.linear(h, w.wv)  # (1, N, H*d), (1, N, H_kv*d)
        outs = []
        for (cache, _), pos, q, k, v in zip(chunks, positions, q_all.split(lengths, 1), k_all.split(lengths, 1),
                                            v_all.split(lengths, 1)):
            n = len(pos)
            q = rope(q.view(1, n, H, d).transpose(1, 2), pos, c.rope_theta, model.inv_freq,
                     model.attention_factor)  # (1, H, n, d)
            k = rope(k.view(1, n, H_kv, d).transpose(1, 2), pos, c.rope_theta, model.inv_freq,
                     model.attention_factor)  # (1, H_kv, n, d)
            cache.append(i, k, v.view(1, n, H_kv, d).transpose(1, 2))
            keys, values = cache.keys_values(i)  # (1, H_kv, T_kept, d)
            out = attention(q, keys, values, cache.mask(i, pos))  # (1, H, n, d)
            outs.append(out.transpose(1, 2).reshape(1, n, H * d))
        x = x + F.linear(torch.cat(outs, dim=1), w.wo)  # (1, N, D)
        m = rms_norm(x, w.mlp_norm, c.rms_norm_eps)
        x = x + F.linear(F.silu(F.linear(m, w.w_gate)) * F.linear(m, w.w_up), w.w_down)
    last = torch.tensor(lengths).cumsum(0) - 1  # (len(chunks),) the last token of each chunk
    return F.linear(rms_norm(x[0, last], model.final_norm, c.rms_norm_eps), model.lm_head)  # (len(chunks), V)


class _Blocks:
    """Computed blocks of keys and values, by their whole prefix: each layer's (k, v), each
    (1, H_kv, page_size, d)."""

    def __init__(self, page_size: int):
        self.page_size, self.held = page_size, {}

    def keep(self, tokens: list[int], cache: ModelCache, start: int, upto: int) -> None:
        """Keep every block of ``tokens[:upto]`` that a chunk ``tokens[start:upto]`` just
        filled and no other request computed before (the blocks before it are kept already)."""
        P = self.page_size
        for j in range(start // P, upto // P):
            key = tuple(tokens[:(j + 1) * P])
            if key not in self.held:
                self.held[key] = [tuple(t[:, :, j * P:(j + 1) * P].clone() for t in cache.keys_values(layer))
                                  for layer in range(len(cache.layers))]

    def fill(self, tokens: list[int], cached: int, cache: ModelCache) -> bool:
        """Append the kept blocks of ``tokens[:cached]`` to the empty ``cache``; False when
        one of them was never computed."""
        P = self.page_size
        blocks = [self.held.get(tuple(tokens[:(j + 1) * P])) for j in range(cached // P)]
        if any(b is None for b in blocks):
            return False
        for layer in range(len(cache.layers) if blocks else 0):
            cache.append(layer, torch.cat([b[layer][0] for b in blocks], dim=2),
                         torch.cat([b[layer][1] for b in blocks], dim=2))
        return True


def _is_int(x) -> bool:
    return type(x) is int


def _check_requests(requests, page_size):
    if not _is_int(page_size) or page_size < 1:
        raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError(f"request ids must be unique, got {ids}")
    for r in requests:
        if not r.prompt or r.max_output < 1:
            raise ValueError(f"request {r.id} needs a prompt and max_output >= 1")
        if r.cached % page_size or not 0 <= r.cached < len(r.prompt):
            raise ValueError(f"request {r.id}: cached must be a multiple of {page_size} below the prompt's "
                             f"{len(r.prompt)} tokens, got {r.cached}")


def _preemptions(preempted, num_steps: int) -> dict[int, list[int]]:
    """``(step, id)`` pairs as {step: [id, ...]}, checked."""
    if not isinstance(preempted, (list, tuple)):
        raise ValueError(f"preempted must be a list of (step, id), got {type(preempted).__name__}")
    drops: dict[int, list[int]] = {}
    for entry in preempted:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and all(map(_is_int, entry))):
            raise ValueError(f"preempted: {entry!r} is not a pair (step, id) of ints")
        step, rid = entry
        if not 0 <= step < num_steps:
            raise ValueError(f"preempted: step {step} is not a step of the schedule's {num_steps}")
        drops.setdefault(step, []).append(rid)
    return drops


def run_schedule(model: Llama, requests: list[Request], steps, page_size: int, preempted=()) -> ScheduleRun:
    """Execute ``steps`` (a list of steps, each a list of ``(id, n)``) on ``model``.

    Each chunk computes the next n tokens of request ``id``: a request starts at its
    ``cached`` tokens, filled from the blocks earlier chunks computed; a chunk that ends
    at the last token the request knows appends the greedy next token, until
    ``max_output``. ``preempted``: ``(step, id)`` pairs; at the start of that step the
    request drops its cache and starts again from its ``cached`` tokens. Returns a
    :class:`ScheduleRun`. Raises ValueError naming the step when a chunk names an unknown
    or finished request, is not a positive int, reaches past the tokens its request
    knows, needs a block nobody computed, when a preemption names a request that is not
    running or a step past the schedule, or when a request ends the schedule without all
    its tokens."""
    _check_requests(requests, page_size)
    by_id = {r.id: r for r in requests}
    known = {r.id: list(r.prompt) for r in requests}  # prompt + generated
    out = {r.id: [] for r in requests}
    caches: dict[int, ModelCache] = {}
    blocks, computed, passes = _Blocks(page_size), 0, 0
    if not isinstance(steps, (list, tuple)):
        raise ValueError(f"the schedule must be a list of steps, got {type(steps).__name__}")
    drops = _preemptions(preempted, len(steps))
    for s, step in enumerate(steps):
        if not isinstance(step, (list, tuple)):
            raise ValueError(f"step {s} must be a list of (id, n), got {type(step).__name__}")
        for rid in drops.get(s, ()):
            if rid not in caches or len(out[rid]) == by_id[rid].max_output:
                raise ValueError(f"step {s}: request {rid} is preempted, but it is not running")
            del caches[rid]  # recomputation: it starts again from its prefix hit
        chunks, seen = [], set()
        for entry in step:
            if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and all(map(_is_int, entry))):
                raise ValueError(f"step {s}: {entry!r} is not a pair (id, n) of ints")
            rid, n = entry
            if rid not in by_id or rid in seen:
                raise ValueError(f"step {s}: request {rid} is unknown or scheduled twice")
            if len(out[rid]) == by_id[rid].max_output:
                raise ValueError(f"step {s}: request {rid} has finished")
            seen.add(rid)
            if rid not in caches:
                caches[rid] = model.new_cache()
                if not blocks.fill(known[rid], by_id[rid].cached, caches[rid]):
                    raise ValueError(f"step {s}: request {rid} starts at its {by_id[rid].cached} cached tokens, "
                                     "but no earlier request computed them")
            start = caches[rid].seen
            if n < 1 or start + n > len(known[rid]):
                raise ValueError(f"step {s}: request {rid} has computed {start} of the {len(known[rid])} tokens "
                                 f"it knows; it cannot compute {n} more")
            chunks.append((rid, torch.tensor(known[rid][start:start + n], dtype=torch.long)))
        if not chunks:
            continue
        logits = step_forward(model, [(caches[rid], ids) for rid, ids in chunks])  # (len(chunks), V)
        passes += 1
        for (rid, ids), row in zip(chunks, logits):
            computed += ids.numel()
            cache = caches[rid]
            blocks.keep(known[rid], cache, cache.seen - ids.numel(), cache.seen)
            if cache.seen == len(known[rid]):
                token = int(row.argmax())
                out[rid].append(token)
                known[rid].append(token)
    short = [r.id for r in requests if len(out[r.id]) < r.max_output]
    if short:
        raise ValueError(f"the schedule ends before requests {short} have all their tokens")
    return ScheduleRun(tokens=out, computed=computed, passes=passes)


def staggered_trace(requests: list[Request], token_budget: int) -> list[dict]:
    """Exercise 12.6's trace for ``requests``: the first arrives at step 0, the others one a
    step from the step after its prompt is computed (``ceil(len(prompt) / token_budget)``
    steps), so that the blocks their hits start from exist when they start."""
    first = -(-len(requests[0].prompt) // token_budget)  # the steps of the first prompt
    return [{"id": r.id, "arrival": 0 if i == 0 else first + i - 1, "prompt_len": len(r.prompt),
             "max_output": r.max_output, "cached": r.cached} for i, r in enumerate(requests)]


def one_at_a_time(model: Llama, requests: list[Request]) -> dict[int, list[int]]:
    """Each request alone: its whole prompt in one forward pass, then one token at a time."""
    return {r.id: model.generate(torch.tensor([r.prompt]), max_new_tokens=r.max_output) for r in requests}
