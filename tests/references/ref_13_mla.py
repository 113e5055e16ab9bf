"""Independent references for Chapter 13: MLA as dense multi-head attention in fp64 over
keys and values built head by head, the costs added up term by term, and the caches
counted layer by layer and rank by rank. Never imported from a notebook.

Conventions (the chapter's): q_nope (B, H, N_q, d_nope), q_pe (B, H, N_q, d_rope),
c_kv (B, N, r), k_pe (B, N, d_rope), w_uk (H, d_nope, r), w_uv (H, d_v, r); query i sits
at position N - N_q + i and sees the keys at positions j <= N - N_q + i; scores are
divided by sqrt(d_nope + d_rope); RoPE rotates the channel pairs (i, i + d/2) by the
angle pos * theta ** (-2 i / d).

``SUBSTITUTES`` (grading.judge.substitute) is empty: no exercise calls another's function.
The counts raise the errors the statements name.
"""

import math

import torch

ROPE_THETA = 10000.0


def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _require_tensor(name, t, dim):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating tensor, got {t.dtype}")
    if t.dim() != dim:
        raise ValueError(f"{name} must have {dim} dimensions, got shape {tuple(t.shape)}")


def rope_fp64(x, positions, theta=ROPE_THETA):
    """x (..., N, d) rotated pair by pair in fp64: channel i and i + d/2 of row n turn by
    positions[n] * theta ** (-2 i / d)."""
    x = x.double()
    d = x.shape[-1]
    half = d // 2
    out = x.clone()
    for n, pos in enumerate(positions):
        for i in range(half):
            angle = float(pos) * theta ** (-2 * i / d)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., n, i], x[..., n, i + half]
            out[..., n, i] = a * c - b * s
            out[..., n, i + half] = b * c + a * s
    return out


def mla_keys_values_fp64(c_kv, k_pe, w_uk, w_uv):
    """K (B, H, N, d_nope + d_rope) and V (B, H, N, d_v) in fp64, head by head: k = [w_uk[h]
    c_j, RoPE(k_pe_j, j)], v = w_uv[h] c_j."""
    c, w_uk, w_uv = c_kv.double(), w_uk.double(), w_uv.double()
    N = c.shape[1]
    H = w_uk.shape[0]
    k_rope = rope_fp64(k_pe, range(N))  # (B, N, d_rope), the same for every head
    keys, values = [], []
    for h in range(H):
        keys.append(torch.cat([c @ w_uk[h].T, k_rope], dim=-1))  # (B, N, d_nope + d_rope)
        values.append(c @ w_uv[h].T)  # (B, N, d_v)
    return torch.stack(keys, dim=1), torch.stack(values, dim=1)


def dense_attention_fp64(q, k, v, q_pos, k_pos, scale):
    """softmax(q k^T * scale) v in fp64 with query i seeing key j iff k_pos[j] <= q_pos[i]:
    q (B, H, N_q, D), k (B, H, N, D), v (B, H, N, d_v). Returns (out, lse); a query that sees
    no key has out 0 and lse -inf."""
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-1, -2) * scale  # (B, H, N_q, N)
    hidden = torch.tensor([[int(kj) > int(qi) for kj in k_pos] for qi in q_pos], dtype=torch.bool)
    s = s.masked_fill(hidden.reshape(len(q_pos), len(k_pos)), -math.inf)
    m = s.amax(dim=-1, keepdim=True) if len(k_pos) else torch.full((*s.shape[:-1], 1), -math.inf, dtype=torch.float64)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m_safe)
    total = e.sum(dim=-1, keepdim=True)
    seen = total > 0
    out = (e / torch.where(seen, total, torch.ones_like(total))) @ v
    lse = torch.where(seen, m_safe + torch.log(torch.where(seen, total, torch.ones_like(total))),
                      torch.full_like(total, -math.inf))
    return out, lse.squeeze(-1)


def mla_attention_fp64(q_nope, q_pe, c_kv, k_pe, w_uk, w_uv):
    """Exercises 13.1 and 13.2 by the definition: dense fp64 attention over the keys and
    values materialised head by head. Returns (B, H, N_q, d_v) in fp64."""
    N_q, N = q_nope.shape[2], c_kv.shape[1]
    q_pos = list(range(N - N_q, N))
    q = torch.cat([q_nope.double(), rope_fp64(q_pe, q_pos)], dim=-1)
    k, v = mla_keys_values_fp64(c_kv, k_pe, w_uk, w_uv)
    return dense_attention_fp64(q, k, v, q_pos, list(range(N)), 1 / math.sqrt(q.shape[-1]))[0]


def _config_int(config, key):
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    if key not in config:
        raise ValueError(f"config needs the key {key!r}")
    _require_int(f"config[{key!r}]", config[key], 1)
    return config[key]


def decode_step_cost(config, seq_len, mode, query_tokens=1, dtype_bytes=2):
    """Exercise 13.3, term by term: each matrix product as (rows x inner x columns)
    multiply-adds, 2 FLOPs each, added in a loop over the heads; the bytes as numbers per
    cached token times tokens."""
    if mode not in ("naive", "absorbed", "gqa"):
        raise ValueError(f"mode must be 'naive', 'absorbed' or 'gqa', got {mode!r}")
    for name, value in (("seq_len", seq_len), ("query_tokens", query_tokens), ("dtype_bytes", dtype_bytes)):
        _require_int(name, value, 1)
    N, s = seq_len, query_tokens
    H = _config_int(config, "num_attention_heads")

    def matmul(rows, inner, cols):
        return 2 * rows * inner * cols

    flops = 0
    if mode == "gqa":
        H_kv, d = _config_int(config, "num_key_value_heads"), _config_int(config, "head_dim")
        for _head in range(H):
            flops += matmul(s, d, N)  # q k^T
            flops += matmul(s, N, d)  # p v
        per_token = 2 * H_kv * d  # K and V of every KV head
        return flops, per_token * N * dtype_bytes
    r = _config_int(config, "kv_lora_rank")
    d_nope, d_rope = _config_int(config, "qk_nope_head_dim"), _config_int(config, "qk_rope_head_dim")
    d_v = _config_int(config, "v_head_dim")
    for _head in range(H):
        if mode == "naive":
            flops += matmul(N, r, d_nope)  # K_nope = C W_UK^T, every cached token
            flops += matmul(N, r, d_v)  # V = C W_UV^T
            flops += matmul(s, d_nope + d_rope, N)  # scores
            flops += matmul(s, N, d_v)  # p v
        else:
            flops += matmul(s, d_nope, r)  # q_lat = W_UK^T q_nope
            flops += matmul(s, r + d_rope, N)  # scores over [c, k_rope]
            flops += matmul(s, N, r)  # p C
            flops += matmul(s, r, d_v)  # W_UV o_lat
    return flops, (r + d_rope) * N * dtype_bytes


LAYER_KEYS = {"full": ("num_kv_heads", "head_dim"), "sliding": ("num_kv_heads", "head_dim", "window"),
              "latent": ("kv_lora_rank", "rope_head_dim"), "shared": ("source",),
              "recurrent": ("num_heads", "key_dim", "value_dim")}


def stack_kv_bytes(layers, seq_len, batch_size=1, dtype_bytes=2):
    """Exercise 13.4, token by token: a layer's bytes are the numbers it stores for each
    token it keeps (every token, the last `window`, none) plus a state, per sequence."""
    _require_int("seq_len", seq_len, 0)
    _require_int("batch_size", batch_size, 1)
    _require_int("dtype_bytes", dtype_bytes, 1)
    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
        raise TypeError("layers must be a list of dicts")
    if not layers:
        raise ValueError("layers must not be empty")
    result = []
    for index, layer in enumerate(layers):
        kind = layer.get("kind")
        if kind not in LAYER_KEYS:
            raise ValueError(f"layers[{index}]: unknown kind {kind!r}")
        for key in LAYER_KEYS[kind]:
            if key not in layer:
                raise ValueError(f"layers[{index}] needs {key!r}")
            _require_int(key, layer[key], 0 if key == "source" else 1)
        kept_tokens = [t for t in range(seq_len)]
        per_token, state = 0, 0
        if kind in ("full", "sliding"):
            per_token = 2 * layer["num_kv_heads"] * layer["head_dim"]
            if kind == "sliding":
                kept_tokens = [t for t in kept_tokens if t >= seq_len - layer["window"]]
        elif kind == "latent":
            per_token = layer["kv_lora_rank"] + layer["rope_head_dim"]
        elif kind == "recurrent":
            state = layer["num_heads"] * layer["key_dim"] * layer["value_dim"]
        else:
            source = layer["source"]
            if source >= index or layers[source].get("kind") == "shared":
                raise ValueError(f"layers[{index}]: source {source} must be an earlier layer that is not shared")
        numbers = sum(per_token for _ in kept_tokens) + state
        result.append(numbers * batch_size * dtype_bytes)
    return result


def kv_bytes_per_rank(config, tp_size, seq_len, dcp_size=1, dtype_bytes=2):
    """Exercise 13.5, rank by rank: which KV heads rank t reads (query heads split evenly,
    KV head of query head h is h // G), and which tokens it keeps (i mod dcp_size)."""
    _require_int("tp_size", tp_size, 1)
    _require_int("seq_len", seq_len, 0)
    _require_int("dcp_size", dcp_size, 1)
    _require_int("dtype_bytes", dtype_bytes, 1)
    if not isinstance(config, dict):
        raise TypeError("config must be a dict")
    attention = config.get("attention")
    if attention == "gqa":
        H_kv, d = _config_int(config, "num_key_value_heads"), _config_int(config, "head_dim")
        if H_kv % tp_size and tp_size % H_kv:
            raise ValueError(f"tp_size {tp_size} and num_key_value_heads {H_kv}: neither divides the other")
        # Give each rank the KV heads its query heads read, with H = lcm(H_kv, tp) query heads.
        H = H_kv * tp_size // math.gcd(H_kv, tp_size)
        G = H // H_kv
        heads_of_rank = [{h // G for h in range(t * H // tp_size, (t + 1) * H // tp_size)} for t in range(tp_size)]
        per_token = [2 * len(heads) * d for heads in heads_of_rank]
        holders = [sum(1 for heads in heads_of_rank if kv in heads) for kv in range(H_kv)]
        duplication = holders[0]
    elif attention == "mla":
        width = _config_int(config, "kv_lora_rank") + _config_int(config, "qk_rope_head_dim")
        per_token = [width] * tp_size
        duplication = tp_size
    else:
        raise ValueError(f"config['attention'] must be 'gqa' or 'mla', got {attention!r}")
    if duplication % dcp_size:
        raise ValueError(f"dcp_size {dcp_size} must divide the duplication factor {duplication}")
    result = []
    for t in range(tp_size):
        tokens = sum(1 for i in range(seq_len) if i % dcp_size == t % dcp_size)
        result.append(tokens * per_token[t] * dtype_bytes)
    return result


def dcp_positions(seq_len, world_size, rank):
    """The positions rank `rank` of `world_size` holds: every i < seq_len with i mod P = rank."""
    return [i for i in range(seq_len) if i % world_size == rank]


def dcp_reference(q, kv_full, seq_len, kv_lora_rank, scale):
    """Exercise 13.6's answer by the definition: fp64 attention of q (B, H, s, D) over the
    whole cache kv_full (B, seq_len, D), values its first kv_lora_rank channels, causal by
    position. Returns (out, lse)."""
    s = q.shape[2]
    k = kv_full.double()[:, None]  # (B, 1, N, D): one KV head for every query head
    v = k[..., :kv_lora_rank]
    H = q.shape[1]
    return dense_attention_fp64(q, k.expand(-1, H, -1, -1), v.expand(-1, H, -1, -1),
                                list(range(seq_len - s, seq_len)), list(range(seq_len)), scale)


# No exercise calls another exercise's function (each takes plain tensors and dicts), so
# nothing is swapped: an exercise is graded alone by construction, and an empty table says
# so to grading.judge.substitute (a call into another exercise would fail as a grader error).
SUBSTITUTES: dict = {}
