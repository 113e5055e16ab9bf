"""Independent references for Chapter 14, never imported from a notebook.

Everything is a loop over plain Python numbers: probabilities in float64 one token at a
time, sums with ``math.fsum``, the roofline's seconds in exact fractions (rounded once,
at the end), pages and reference counts as lists, and the draft's cache as the whole
sequence kept in a list beside the set of positions a bounded cache still holds.

Conventions (the chapter's): a probability vector sums to 1 within ``PROB_ATOL``;
sampling with a uniform u from d takes the smallest t with u < cumsum(d)[t] (else the
last t with d[t] > 0); argmax ties go to the lowest index; a sequence of n tokens fills
ceil(n / page_size) pages.

``SUBSTITUTES`` (grading.judge.substitute): 14.4 calls 14.1 and 14.2, 14.6 calls 14.5.
Every function raises the errors the statements name.
"""

import math
from fractions import Fraction

import torch

PROB_ATOL = 1e-6
CONFIG_KEYS = ("num_layers", "num_heads", "num_kv_heads", "head_dim", "num_params", "dtype_bytes")


# -- validation --------------------------------------------------------------------------
def _int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be finite and > 0, got {value}")


def _probabilities(name, t, dim):
    """t, a floating tensor of ``dim`` dimensions whose last axis holds probability
    vectors, as nested lists of Python floats (rows for dim 2)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating tensor, got {t.dtype}")
    if t.dim() != dim or t.shape[-1] < 1:
        raise ValueError(f"{name} must have {dim} dimension(s) and V >= 1 tokens, got shape {tuple(t.shape)}")
    rows = t.double().tolist()
    for row in (rows if dim == 2 else [rows]):
        if any(x != x for x in row):
            raise ValueError(f"{name} holds NaN")
        if any(x < 0 for x in row):
            raise ValueError(f"{name} holds a negative probability")
        if abs(math.fsum(row) - 1.0) > PROB_ATOL:
            raise ValueError(f"{name} must sum to 1, got {math.fsum(row)}")
    return rows


def _ids(name, t, dim, vocab):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got {t.dtype}")
    if t.dim() != dim:
        raise ValueError(f"{name} must have {dim} dimension(s), got shape {tuple(t.shape)}")
    ids = t.tolist()
    for row in (ids if dim == 2 else [ids]):
        if any(x < 0 or x >= vocab for x in row):
            raise ValueError(f"{name} holds a token id outside [0, {vocab})")
    return ids


def _uniform(name, u):
    if isinstance(u, bool) or not isinstance(u, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(u).__name__}")
    if not 0.0 <= u < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {u}")


def _sample(d, u):
    """The smallest t with u < cumsum(d)[t], the cumsum in float64 from the left; the last
    t with d[t] > 0 where u is above the rounded total."""
    total = 0.0
    for t, x in enumerate(d):
        total += x
        if u < total:
            return t
    return max(t for t, x in enumerate(d) if x > 0)


# -- 14.1 -----------------------------------------------------------------------------------
def acceptance_probs(p, q):
    pp = _probabilities("p", p, 1)
    qq = _probabilities("q", q, 1)
    if len(pp) != len(qq):
        raise ValueError(f"q has {len(qq)} tokens, p has {len(pp)}")
    # where the draft gives a token no mass it never proposes it: min(1, p / 0) = 1
    return torch.tensor([1.0 if b == 0 else min(1.0, a / b) for a, b in zip(pp, qq)], dtype=torch.float64)


# -- 14.2 -----------------------------------------------------------------------------------
def residual_distribution(p, q):
    pp = _probabilities("p", p, 1)
    qq = _probabilities("q", q, 1)
    if len(pp) != len(qq):
        raise ValueError(f"q has {len(qq)} tokens, p has {len(pp)}")
    excess = [max(0.0, a - b) for a, b in zip(pp, qq)]
    total = math.fsum(excess)
    if total == 0:
        return torch.tensor(pp, dtype=torch.float64)
    return torch.tensor([x / total for x in excess], dtype=torch.float64)


# -- 14.3 -----------------------------------------------------------------------------------
def _argmax(row):
    best = 0
    for t in range(1, len(row)):
        if row[t] > row[best]:  # strictly greater: a tie keeps the lower index
            best = t
    return best


def verify_greedy(target_logits, draft_tokens):
    if not isinstance(target_logits, torch.Tensor):
        raise TypeError(f"target_logits must be a torch.Tensor, got {type(target_logits).__name__}")
    if not target_logits.dtype.is_floating_point:
        raise TypeError(f"target_logits must be floating, got {target_logits.dtype}")
    if target_logits.dim() != 3 or target_logits.shape[-1] < 1:
        raise ValueError(f"target_logits must be (B, gamma + 1, V), got shape {tuple(target_logits.shape)}")
    B, rows, V = target_logits.shape
    drafts = _ids("draft_tokens", draft_tokens, 2, V)
    if draft_tokens.shape[0] != B:
        raise ValueError(f"draft_tokens has batch {draft_tokens.shape[0]}, target_logits {B}")
    gamma = draft_tokens.shape[1]
    if rows != gamma + 1:
        raise ValueError(f"target_logits must have gamma + 1 = {gamma + 1} rows, got {rows}")
    logits = target_logits.double().tolist()
    if any(x != x for seq in logits for row in seq for x in row):
        raise ValueError("target_logits holds NaN")
    out = []
    for b in range(B):
        best = [_argmax(logits[b][i]) for i in range(gamma + 1)]
        n = 0
        while n < gamma and drafts[b][n] == best[n]:
            n += 1
        out.append(drafts[b][:n] + [best[n]])
    return out


# -- 14.4 -----------------------------------------------------------------------------------
def verify_sampled(p, q, draft_tokens, accept_uniforms, sample_uniform):
    pp = _probabilities("p", p, 2)
    drafts = _ids("draft_tokens", draft_tokens, 1, p.shape[1])
    gamma = len(drafts)
    if len(pp) != gamma + 1:
        raise ValueError(f"p must have gamma + 1 = {gamma + 1} rows, got {len(pp)}")
    qq = _probabilities("q", q, 2)
    if tuple(q.shape) != (gamma, p.shape[1]):
        raise ValueError(f"q must be (gamma, V) = ({gamma}, {p.shape[1]}), got {tuple(q.shape)}")
    if not isinstance(accept_uniforms, torch.Tensor) or not accept_uniforms.dtype.is_floating_point:
        raise TypeError("accept_uniforms must be a floating tensor")
    if accept_uniforms.shape != (gamma,):
        raise ValueError(f"accept_uniforms must have shape ({gamma},), got {tuple(accept_uniforms.shape)}")
    uniforms = accept_uniforms.double().tolist()
    if any(not 0.0 <= u < 1.0 for u in uniforms):
        raise ValueError("accept_uniforms must be in [0, 1)")
    _uniform("sample_uniform", sample_uniform)
    for i, x in enumerate(drafts):
        if qq[i][x] == 0:
            raise ValueError(f"draft_tokens[{i}] = {x} has probability 0 under q: the draft cannot have proposed it")
    out = []
    for i, x in enumerate(drafts):
        accept = acceptance_probs(p[i], q[i])[x].item()
        if not uniforms[i] < accept:
            return out + [_sample(residual_distribution(p[i], q[i]).tolist(), sample_uniform)]
        out.append(x)
    return out + [_sample(pp[gamma], sample_uniform)]


def acceptance_thresholds(p, q, draft_tokens):
    """min(1, p[i, x_i] / q[i, x_i]) for each drafted token, as Python floats: the graders
    keep their uniforms away from them."""
    return [min(1.0, p[i, x].item() / q[i, x].item()) for i, x in enumerate(draft_tokens.tolist())]


def cumsum_boundaries(d):
    """The running sums of d (a (V,) tensor) from the left in float64, as Python floats."""
    out, total = [], 0.0
    for x in d.double().tolist():
        total += x
        out.append(total)
    return out


# -- 14.5 -----------------------------------------------------------------------------------
def _alpha(alpha):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"alpha must be a number, got {type(alpha).__name__}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")


def expected_tokens(alpha, gamma):
    _alpha(alpha)
    _int("gamma", gamma, 0)
    # the drafted token k (0-based) is emitted when the first k + 1 are accepted; the
    # correction or bonus token always is: 1 + alpha + ... + alpha**gamma, exactly summed
    a = Fraction(alpha)
    return float(sum(a**k for k in range(gamma + 1)))


# -- 14.6 -----------------------------------------------------------------------------------
def _config(config):
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    for key in CONFIG_KEYS:
        if key not in config:
            raise ValueError(f"config lacks {key!r}")
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"config[{key!r}] must be an int")
        if value < 1:
            raise ValueError(f"config[{key!r}] must be >= 1")


def forward_seconds(config, batch_size, cache_len, new_tokens, bandwidth, peak_flops):
    """Seconds of one forward of ``new_tokens`` per sequence over ``cache_len`` cached
    tokens, as an exact Fraction: the weights and the cache read once, or the FLOPs."""
    c = config
    weights = c["num_params"] * c["dtype_bytes"]
    per_token = 2 * c["num_layers"] * c["num_kv_heads"] * c["head_dim"] * c["dtype_bytes"]
    per_pair = 4 * c["num_layers"] * c["num_heads"] * c["head_dim"]
    read = weights + batch_size * per_token * (cache_len + new_tokens)
    # query j (0-based) of the n new ones attends over cache_len + j + 1 keys
    pairs = sum(cache_len + j + 1 for j in range(new_tokens))
    flops = batch_size * (2 * c["num_params"] * new_tokens + per_pair * pairs)
    return max(Fraction(read) / Fraction(bandwidth), Fraction(flops) / Fraction(peak_flops))


def speculative_speedup(config, batch_size, context_len, gamma, draft_budget, alpha, bandwidth, peak_flops):
    _config(config)
    _int("batch_size", batch_size, 1)
    _int("context_len", context_len, 1)
    _int("gamma", gamma, 0)
    _int("draft_budget", draft_budget, 1)
    _alpha(alpha)
    _positive("bandwidth", bandwidth)
    _positive("peak_flops", peak_flops)
    plain = forward_seconds(config, batch_size, context_len, 1, bandwidth, peak_flops)
    draft = forward_seconds(config, batch_size, min(context_len, draft_budget), 1, bandwidth, peak_flops)
    verify = forward_seconds(config, batch_size, context_len, gamma + 1, bandwidth, peak_flops)
    tokens = Fraction(expected_tokens(alpha, gamma))
    speedup = tokens * plain / (gamma * draft + verify)
    return {"plain_step": float(plain), "draft_step": float(draft), "verify_step": float(verify),
            "tokens_per_verify": float(tokens), "speedup": float(speedup)}


# -- 14.7 -----------------------------------------------------------------------------------
def rollback_pages(block_table, refcounts, seq_len, new_len, page_size):
    if not isinstance(block_table, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in block_table):
        raise TypeError("block_table must be a list of ints")
    if not isinstance(refcounts, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in refcounts):
        raise TypeError("refcounts must be a list of ints")
    _int("seq_len", seq_len, 0)
    _int("page_size", page_size, 1)
    _int("new_len", new_len, 0)
    if new_len > seq_len:
        raise ValueError(f"new_len {new_len} is longer than seq_len {seq_len}")
    pages = 0
    while pages * page_size < seq_len:
        pages += 1
    if len(block_table) != pages:
        raise ValueError(f"block_table holds {len(block_table)} pages; {seq_len} tokens fill {pages}")
    if len(set(block_table)) != len(block_table):
        raise ValueError("block_table holds a page twice")
    if any(count < 0 for count in refcounts):
        raise ValueError("refcounts holds a negative count")
    for page in block_table:
        if not 0 <= page < len(refcounts) or refcounts[page] < 1:
            raise ValueError(f"refcounts has no reference for page {page} of the block table")
    kept = 0
    while kept * page_size < new_len:
        kept += 1
    counts = list(refcounts)
    freed = []
    for page in block_table[kept:]:
        counts[page] -= 1
        if counts[page] == 0:
            freed.append(page)
    return list(block_table[:kept]), counts, freed


# -- 14.8 -----------------------------------------------------------------------------------
class DraftWindowCache:
    """The whole sequence in a list (one (H_kv, d) key and value per token), and beside it
    the set of non-sink positions a cache of num_sink + window + max_rollback tokens still
    holds: what decides whether a rollback is possible."""

    def __init__(self, num_sink, window, max_rollback):
        _int("num_sink", num_sink, 0)
        _int("window", window, 1)
        _int("max_rollback", max_rollback, 0)
        self.num_sink, self.window, self.max_rollback = num_sink, window, max_rollback
        self.keys, self.values = [], []
        self.held = set()  # non-sink positions still held
        self.shape = None  # (H_kv, d, dtype) of the first append

    def append(self, k, v):
        for name, t in (("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if not t.dtype.is_floating_point:
                raise TypeError(f"{name} must be floating, got {t.dtype}")
            if t.dim() != 3 or t.shape[1] < 1:
                raise ValueError(f"{name} must be (H_kv, T, d) with T >= 1, got shape {tuple(t.shape)}")
        if self.shape is not None and (k.shape[0], k.shape[2], k.dtype) != self.shape:
            raise ValueError(f"k must have H_kv, d and dtype {self.shape}, got {tuple(k.shape)} {k.dtype}")
        if v.shape != k.shape or v.dtype != k.dtype:
            raise ValueError(f"v must have k's shape and dtype, got {tuple(v.shape)} {v.dtype}")
        self.shape = (k.shape[0], k.shape[2], k.dtype)
        for t in range(k.shape[1]):
            position = len(self.keys)
            self.keys.append(k[:, t].clone())
            self.values.append(v[:, t].clone())
            if position >= self.num_sink:
                self.held.add(position)
        oldest = len(self.keys) - self.window - self.max_rollback
        self.held = {p for p in self.held if p >= oldest}

    def rollback(self, n):
        _int("n", n, 0)
        if n > len(self.keys):
            raise ValueError(f"n = {n} is more than the {len(self.keys)} tokens of the sequence")
        needed = visible_positions(len(self.keys) - n, self.num_sink, self.window)
        if any(p >= self.num_sink and p not in self.held for p in needed):
            raise ValueError(f"rolling back n = {n} needs tokens the cache no longer holds")
        del self.keys[len(self.keys) - n:], self.values[len(self.values) - n:]
        self.held = {p for p in self.held if p < len(self.keys)}

    def keys_values(self):
        positions = visible_positions(len(self.keys), self.num_sink, self.window)
        H_kv, d, dtype = self.shape
        if not positions:
            empty = torch.zeros(H_kv, 0, d, dtype=dtype)
            return empty, empty.clone(), torch.zeros(0, dtype=torch.int64)
        k = torch.stack([self.keys[p] for p in positions], dim=1)
        v = torch.stack([self.values[p] for p in positions], dim=1)
        return k, v, torch.tensor(positions, dtype=torch.int64)

    def __len__(self):
        return len(self.keys)


def visible_positions(length, num_sink, window):
    """The positions a sink-and-window cache shows for a sequence of ``length`` tokens:
    the first num_sink, then the last ``window`` of the others, in order."""
    sinks = list(range(min(length, num_sink)))
    others = list(range(num_sink, length))
    return sinks + others[len(others) - window:] if len(others) > window else sinks + others


SUBSTITUTES = {
    "acceptance_probs": acceptance_probs,
    "residual_distribution": residual_distribution,
    "expected_tokens": expected_tokens,
}
