"""Independent references for Chapter 6: per-token loops in fp64 with the state in
the papers' d_v x d_k layout (S, not the S^T the notebook stores), written as the
formulas read: S (I - beta k k^T) + beta v k^T, batched matmuls only. Slow on purpose:
nothing here is shared with the notebook.

q, k: (B, T, H, d_k); v: (B, T, H, d_v); g, beta: (B, T, H). Every function returns
the outputs (B, T, H, d_v) and the final state converted to the book's stored layout
S^T, (B, H, d_k, d_v), so the graders can compare directly.
"""

import math

import torch
import torch.nn.functional as F

L2_EPS = 1e-6
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def l2norm(x):
    x = x.double()
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def gated_delta_rule(q, k, v, g=None, beta=None, initial_state=None, scale=None, normalize=True, delta=True):
    """The most general recurrence; the others are special cases of it. One token at a
    time, every (batch, head) pair a separate d_v x d_k matrix (batched matmuls only).

    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T   (delta=True)
    S_t = alpha_t S_{t-1} + v_t k_t^T                                  (delta=False)
    o_t = scale * S_t q_t,  alpha_t = exp(g_t),  S: (B, H, d_v, d_k)."""
    B, T, H, d_k = q.shape
    d_v = v.shape[-1]
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    q = l2norm(q) if normalize else q.double()
    k = l2norm(k) if normalize else k.double()
    v = v.double()
    o = torch.zeros(B, T, H, d_v, dtype=torch.float64)
    eye = torch.eye(d_k, dtype=torch.float64)
    if initial_state is None:
        S = torch.zeros(B, H, d_v, d_k, dtype=torch.float64)
    else:
        S = initial_state.double().transpose(-1, -2).clone()  # stored S^T -> S
    for t in range(T):
        kt = k[:, t, :, :, None]  # (B, H, d_k, 1), a column
        vt = v[:, t, :, :, None]  # (B, H, d_v, 1)
        qt = q[:, t, :, :, None]  # (B, H, d_k, 1)
        alpha = torch.exp(g[:, t, :, None, None].double()) if g is not None else 1.0
        write = vt @ kt.transpose(-1, -2)  # (B, H, d_v, d_k): v_t k_t^T
        if delta:
            bt = beta[:, t, :, None, None].double()
            S = alpha * S @ (eye - bt * (kt @ kt.transpose(-1, -2))) + bt * write
        else:
            S = alpha * S + write
        o[:, t] = scale * (S @ qt)[..., 0]
    return o, S.transpose(-1, -2).contiguous()  # S -> stored S^T, (B, H, d_k, d_v)


def linear_attention(q, k, v, initial_state=None, scale=None):
    return gated_delta_rule(q, k, v, initial_state=initial_state, scale=scale, normalize=False, delta=False)


def delta_rule(q, k, v, beta, initial_state=None, scale=None):
    return gated_delta_rule(q, k, v, None, beta, initial_state, scale)


def layer_inputs(weights, x):
    """The simplified Gated DeltaNet layer's projections, in fp64, from its weights
    (a dict of tensors named as the layer's parameters)."""
    W = {name: w.detach().double() for name, w in weights.items()}
    x = x.double()
    B, T, _ = x.shape
    H = W["A_log"].shape[0]
    q = (x @ W["q_proj.weight"].T).view(B, T, H, -1)
    k = (x @ W["k_proj.weight"].T).view(B, T, H, -1)
    v = (x @ W["v_proj.weight"].T).view(B, T, H, -1)
    g = -torch.exp(W["A_log"]) * F.softplus(x @ W["a_proj.weight"].T + W["dt_bias"])
    beta = torch.sigmoid(x @ W["b_proj.weight"].T)
    return q, k, v, g, beta


def gated_deltanet_layer(weights, x, state=None):
    """y = o_proj(gated_delta_rule(q, k, v, g, beta)) for x: (B, T, d_model)."""
    q, k, v, g, beta = layer_inputs(weights, x)
    o, final = gated_delta_rule(q, k, v, g, beta, state)
    B, T = x.shape[:2]
    return o.reshape(B, T, -1) @ weights["o_proj.weight"].detach().double().T, final


def hybrid_bytes(num_linear_layers, num_heads, head_dim_k, head_dim_v, num_attention_layers,
                 num_kv_heads, head_dim, seq_len, batch_size, state_dtype, kv_dtype):
    total = 0
    for _ in range(num_linear_layers):
        total += num_heads * head_dim_k * head_dim_v * DTYPE_BYTES[state_dtype]
    for _ in range(num_attention_layers):
        total += seq_len * num_kv_heads * head_dim * DTYPE_BYTES[kv_dtype]  # keys
        total += seq_len * num_kv_heads * head_dim * DTYPE_BYTES[kv_dtype]  # values
    return total * batch_size


# -- References for the exercises' own API (grading.judge.substitute) --------------------
# While a test of 6.6 runs, the student's kernels of 6.4 and 6.5 are these: the
# per-token fp64 recurrence above, returned in q's dtype as the exercises return.


def recurrent_in_dtype(q, k, v, g, beta, initial_state=None, scale=None):
    o, state = gated_delta_rule(q, k, v, g, beta, initial_state=initial_state, scale=scale)
    return o.to(q.dtype), state.to(q.dtype)


def chunked_in_dtype(q, k, v, g, beta, initial_state=None, scale=None, chunk_size=64):
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size must be an int, got {type(chunk_size).__name__}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return recurrent_in_dtype(q, k, v, g, beta, initial_state=initial_state, scale=scale)


SUBSTITUTES = {
    "gated_delta_rule_recurrent": recurrent_in_dtype,
    "chunk_gated_delta_rule": chunked_in_dtype,
}
