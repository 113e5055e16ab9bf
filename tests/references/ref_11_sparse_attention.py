"""Independent references for Chapter 11: dense attention in fp64 and selections counted
one key, one page, one block at a time in Python loops. Never imported from a notebook.

Conventions (the chapter's): q (B, H, N_q, d) or, at a decode step, (B, H, d); keys
and values (B, H_kv, N, d); query head h reads KV head h // (H // H_kv); scores are
q . k / sqrt(d); under the causal mask the query at position i sees the keys j <= i.
Every returned index is int64 and sorted ascending; among equal scores the lower
position (page, block) wins. A choice "by largest score, ties to the lower index" is
written here as a sort of (-score, index) pairs in Python, not with torch.topk.
"""

import math

import torch


def _kv_head(h, H, H_kv):
    return h // (H // H_kv)


def _top_by_score(scores, count):
    """The `count` indices of largest score (list of floats), ties to the lower index."""
    ranked = sorted(range(len(scores)), key=lambda j: (-scores[j], j))
    return sorted(ranked[:count])


def softmax_row(values):
    """Softmax of a list of floats (-inf allowed), in Python floats."""
    top = max(values)
    e = [math.exp(v - top) if v != -math.inf else 0.0 for v in values]
    total = sum(e)
    return [x / total for x in e]


# -- 11.1 ------------------------------------------------------------------------------
def attention_mass_topk(scores, k, mask=None):
    s = scores.detach().to(torch.float64)
    N_q, N_k = s.shape[-2:]
    lead = s.shape[:-2]
    flat = s.reshape(-1, N_q, N_k)
    out = torch.zeros(flat.shape[0], N_q, dtype=torch.float64)
    for b in range(flat.shape[0]):
        for i in range(N_q):
            row = [float(flat[b, i, j]) if (mask is None or bool(mask[i, j])) else -math.inf for j in range(N_k)]
            p = sorted(softmax_row(row), reverse=True)
            out[b, i] = math.fsum(p[:k])
    return out.reshape(*lead, N_q)


# -- 11.2 ------------------------------------------------------------------------------
def causal_lse(q, k):
    """(B, H, N) natural-log log-sum-exp of each causal row, fp64."""
    B, H, N, d = q.shape
    G = H // k.shape[1]
    kf = k.double().repeat_interleave(G, dim=1)
    s = q.double() @ kf.transpose(-1, -2) / math.sqrt(d)
    s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), -math.inf)
    return torch.logsumexp(s, dim=-1)


def h2o_scores(q, k, lse):
    """Column sums of the causal P, one key at a time: a[b, h, j] = sum_{i >= j} exp(s_ij - lse_i)."""
    q64, k64, lse64 = q.double(), k.double(), lse.double()
    B, H, N, d = q.shape
    H_kv = k.shape[1]
    out = torch.zeros(B, H, N, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            kh = _kv_head(h, H, H_kv)
            s = (q64[b, h] @ k64[b, kh].T) / math.sqrt(d)  # (N, N)
            for j in range(N):
                out[b, h, j] = math.fsum(math.exp(float(s[i, j]) - float(lse64[b, h, i])) for i in range(j, N))
    return out


# -- 11.3 ------------------------------------------------------------------------------
def snapkv_votes(q_obs, k):
    """(B, H_kv, N - w) float64 votes: probabilities summed over the window and the group."""
    B, H, w, d = q_obs.shape
    H_kv, N = k.shape[1], k.shape[2]
    q64, k64 = q_obs.double(), k.double()
    votes = torch.zeros(B, H_kv, N - w, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            kh = _kv_head(h, H, H_kv)
            for r in range(w):
                pos = N - w + r
                row = [float(q64[b, h, r] @ k64[b, kh, j]) / math.sqrt(d) if j <= pos else -math.inf for j in range(N)]
                p = softmax_row(row)
                for j in range(N - w):
                    votes[b, kh, j] += p[j]
    return votes


def snapkv_select(q_obs, k, budget, kernel_size=5):
    B, H, w, d = q_obs.shape
    H_kv, N = k.shape[1], k.shape[2]
    if budget >= N:
        return torch.arange(N).repeat(B, H_kv, 1)
    votes = snapkv_votes(q_obs, k)
    r = kernel_size // 2
    out = torch.zeros(B, H_kv, budget, dtype=torch.long)
    for b in range(B):
        for kh in range(H_kv):
            v = votes[b, kh].tolist()
            pooled = [max(v[max(0, j - r): j + r + 1]) for j in range(N - w)]
            kept = _top_by_score(pooled, budget - w) + list(range(N - w, N))
            out[b, kh] = torch.tensor(kept)
    return out


# -- 11.4 / 11.5 -----------------------------------------------------------------------
def page_bounds(keys, page_size):
    B, H_kv, N, d = keys.shape
    P = (N + page_size - 1) // page_size
    lo = torch.empty(B, H_kv, P, d, dtype=keys.dtype)
    hi = torch.empty(B, H_kv, P, d, dtype=keys.dtype)
    for p in range(P):
        page = keys[:, :, p * page_size: min((p + 1) * page_size, N)]
        for c in range(d):
            lo[:, :, p, c] = page[..., c].min(dim=-1).values
            hi[:, :, p, c] = page[..., c].max(dim=-1).values
    return lo, hi


def quest_upper_bound(q, page_min, page_max):
    B, H, d = q.shape
    H_kv, P = page_min.shape[1], page_min.shape[2]
    out = torch.zeros(B, H, P, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            kh = _kv_head(h, H, H_kv)
            for p in range(P):
                terms = []
                for c in range(d):
                    qc = float(q[b, h, c])
                    terms.append(max(qc * float(page_min[b, kh, p, c]), qc * float(page_max[b, kh, p, c])))
                out[b, h, p] = sum(terms)
    return out


def quest_select(q, page_min, page_max, budget):
    bound = quest_upper_bound(q, page_min, page_max)
    B, H, P = bound.shape
    S = min(budget, P)
    out = torch.zeros(B, H, S, dtype=torch.long)
    for b in range(B):
        for h in range(H):
            if budget >= P:
                out[b, h] = torch.arange(P)
            else:
                out[b, h] = torch.tensor(_top_by_score(bound[b, h, : P - 1].tolist(), budget - 1) + [P - 1])
    return out


# -- 11.6 ------------------------------------------------------------------------------
def sparse_paged_decode(q, k_pool, v_pool, block_table, seq_lens, pages):
    """Gather the selected tokens through the block table, then dense fp64 attention."""
    B, H, d = q.shape
    page_size, H_kv = k_pool.shape[1], k_pool.shape[2]
    out = torch.zeros(B, H, d, dtype=torch.float64)
    for b in range(B):
        n = int(seq_lens[b])
        for h in range(H):
            kh = _kv_head(h, H, H_kv)
            positions = sorted({int(p) * page_size + t for p in pages[b, h].tolist() for t in range(page_size)})
            positions = [x for x in positions if x < n]
            keys = torch.stack([k_pool[int(block_table[b, x // page_size]), x % page_size, kh]
                                for x in positions]).double()
            vals = torch.stack([v_pool[int(block_table[b, x // page_size]), x % page_size, kh]
                                for x in positions]).double()
            p = torch.tensor(softmax_row([float(q[b, h].double() @ kk) / math.sqrt(d) for kk in keys]),
                             dtype=torch.float64)
            out[b, h] = p @ vals
    return out


# -- 11.7 ------------------------------------------------------------------------------
def moba_gate(q, k, block_size, top_k):
    B, H, N, d = q.shape
    H_kv = k.shape[1]
    C = (N + block_size - 1) // block_size
    gate = torch.zeros(B, H, N, C, dtype=torch.bool)
    for b in range(B):
        for h in range(H):
            kh = _kv_head(h, H, H_kv)
            means = [k[b, kh, c * block_size: min((c + 1) * block_size, N)].double().mean(dim=0) for c in range(C)]
            for i in range(N):
                own = i // block_size
                scores = [float(q[b, h, i].double() @ means[c]) for c in range(own)]
                for c in _top_by_score(scores, top_k - 1) + [own]:
                    gate[b, h, i, c] = True
    return gate


# -- 11.8 ------------------------------------------------------------------------------
def nsa_tokens_read(seq_len, selected_blocks, compress_block=32, compress_stride=16, select_block=64, window=512):
    """Counted by enumeration: every compression block start, every token."""
    compressed = sum(1 for start in range(0, seq_len, compress_stride) if start + compress_block <= seq_len)
    selected = {t for c in selected_blocks for t in range(c * select_block, (c + 1) * select_block) if t < seq_len}
    recent = {t for t in range(seq_len) if t >= seq_len - window}
    return {"compressed": compressed, "selected": len(selected), "window": len(recent),
            "total": compressed + len(selected | recent)}



# -- 11.9 ------------------------------------------------------------------------------
def indexer_topk(q, k, weights, top_k):
    """Each score summed head by head in Python floats; the choice by sorting (-score, j)."""
    B, H, T, d = q.shape
    N = k.shape[1]
    K = min(top_k, N)
    q64, k64, w64 = q.detach().double(), k.detach().double(), weights.detach().double()
    out = torch.full((B, T, K), -1, dtype=torch.long)
    for b in range(B):
        for t in range(T):
            visible = N - T + t + 1  # keys 0 .. N - T + t
            scores = []
            for j in range(visible):
                total = 0.0
                for h in range(H):
                    dot = float(q64[b, h, t] @ k64[b, j])
                    total += float(w64[b, h, t]) * max(0.0, dot)
                scores.append(total)
            chosen = _top_by_score(scores, K)
            out[b, t, : len(chosen)] = torch.tensor(chosen, dtype=torch.long)
    return out

# -- References for the exercises' own API (grading.judge.substitute) --------------------
# quest_select (11.5) calls quest_upper_bound (11.4): while 11.5 is graded, this one
# answers, with the errors 11.4 promises.


def _need_float(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating tensor, got {t.dtype}")


def checked_quest_upper_bound(q, page_min, page_max):
    _need_float("q", q)
    _need_float("page_min", page_min)
    _need_float("page_max", page_max)
    if q.dim() != 3:
        raise ValueError(f"q must be (B, H, d), got shape {tuple(q.shape)}")
    if page_min.dim() != 4:
        raise ValueError(f"page_min must be (B, H_kv, P, d), got shape {tuple(page_min.shape)}")
    if page_max.shape != page_min.shape:
        raise ValueError("page_max must have page_min's shape")
    B, H, d = q.shape
    if page_min.shape[0] != B or page_min.shape[3] != d or page_min.shape[1] == 0 or H % page_min.shape[1]:
        raise ValueError("page_min must match q's batch and head_dim, with H a multiple of H_kv")
    if bool((page_max < page_min).any()):
        raise ValueError("page_max must be >= page_min in every channel")
    return quest_upper_bound(q, page_min, page_max)


def checked_page_bounds(keys, page_size):
    _need_float("keys", keys)
    if keys.dim() != 4 or keys.shape[2] == 0:
        raise ValueError("keys must be (B, H_kv, N, d) with N >= 1")
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise TypeError("page_size must be an int")
    if page_size < 1:
        raise ValueError("page_size must be >= 1")
    return page_bounds(keys, page_size)


SUBSTITUTES = {"quest_upper_bound": checked_quest_upper_bound, "page_bounds": checked_page_bounds}
