"""Wrong implementations of Chapter 6 that the graders must reject.

Each bug only runs the graders of the exercises it can affect (``tests=``), which keeps
``--prove`` within the chapter's time budget."""

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '6.1': 'Attention without the softmax is a recurrence',
    '6.2': 'Attention without the softmax is a recurrence',
    '6.3': 'The delta rule: a memory that corrects itself',
    '6.4': 'Gated DeltaNet: forgetting in log space',
    '6.5': 'The chunkwise parallel form',
    '6.6': 'A Gated DeltaNet layer: prefill and decode',
    '6.7': 'Hybrids and the memory budget',
}

# Lines of the solution's loops, indented as in the cell: a bug that only reorders them
# swaps these lines.
WRITE_THEN_READ = (
    '        state = state + torch.einsum("bhk,bhv->bhkv", k[:, t], v[:, t])  # (B, H, d_k, d_v)',
    '        o[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state)  # (B, H, d_v)',
)
DECAY_THEN_UPDATE = (
    "        state = state * g[:, t, :, None, None].exp()  # decay first: alpha_t S_{t-1}",
    '        predicted = torch.einsum("bhk,bhkv->bhv", k_t, state)  # (B, H, d_v)',
    "        delta = b_t * (v[:, t] - predicted)  # (B, H, d_v)",
    '        state = state + torch.einsum("bhk,bhv->bhkv", k_t, delta)  # (B, H, d_k, d_v)',
)

BUGS = [
    # 6.1 linear attention, recurrent
    Bug("einsum_sums_over_heads", "6.1", "writes v k^T summed over heads into every head's state (mixes heads)",
        old='torch.einsum("bhk,bhv->bhkv", k[:, t], v[:, t])',
        new='torch.einsum("bhk,bhv->bkv", k[:, t], v[:, t])[:, None]', tests="test_linear_attention_recurrent"),
    Bug("state_updated_in_place", "6.1",
        "adds into the caller's initial_state tensor, so the next call starts elsewhere",
        old="state = state + torch.einsum(\"bhk,bhv->bhkv\", k[:, t], v[:, t])",
        new="state += torch.einsum(\"bhk,bhv->bhkv\", k[:, t], v[:, t])", tests="test_linear_attention_recurrent"),
    Bug("read_before_write", "6.1", "reads o_t from S_{t-1}, so token t does not see itself",
        old="\n".join(WRITE_THEN_READ), new="\n".join(WRITE_THEN_READ[::-1]),
        tests="test_linear_attention_recurrent"),
    # 6.2 linear attention, parallel
    Bug("mask_drops_diagonal", "6.2", "masks s < t instead of s <= t (the token's own key is left out)",
        old="torch.ones(T, T, dtype=torch.bool, device=q.device).tril()",
        new="torch.ones(T, T, dtype=torch.bool, device=q.device).tril(-1)", tests="test_linear_attention_parallel"),
    Bug("no_causal_mask", "6.2", "forgets the causal mask: every token reads the future",
        old="scores = scores.masked_fill(~causal, 0.0)", new="scores = scores", tests="test_linear_attention_parallel"),
    # 6.3 delta rule
    Bug("keys_not_normalised", "6.3", "leaves k unnormalised, so I - beta k k^T is no longer a projection step",
        old="q, k = l2norm(q), l2norm(k)", new="q = l2norm(q)", tests="test_delta_rule"),
    Bug("queries_not_normalised", "6.3",
        "normalises k but reads the state with the raw q, so the output grows with |q| instead of depending on its "
        "direction only",
        old="q, k = l2norm(q), l2norm(k)", new="k = l2norm(k)", tests="test_delta_rule"),
    Bug("delta_rule_without_erase", "6.3",
        "adds beta v k^T but never subtracts the old value (linear attention with a step size)",
        old="delta = b_t * (v[:, t] - predicted)", new="delta = b_t * v[:, t]", tests="test_delta_rule"),
    # 6.4 gated delta rule, recurrent
    Bug("decay_after_update", "6.4", "applies alpha_t after the delta update instead of before it",
        old="\n".join(DECAY_THEN_UPDATE), new="\n".join(DECAY_THEN_UPDATE[1:] + DECAY_THEN_UPDATE[:1]),
        tests="test_gated_delta_rule"),
    Bug("one_minus_beta", "6.4", "writes with (1 - beta) where the rule has beta",
        old="b_t = k[:, t], beta[:, t, :, None]", new="b_t = k[:, t], 1 - beta[:, t, :, None]",
        tests="test_gated_delta_rule"),
    Bug("g_as_linear_factor", "6.4", "multiplies by g itself instead of alpha = exp(g): g is a log",
        old="state = state * g[:, t, :, None, None].exp()", new="state = state * g[:, t, :, None, None]",
        tests="test_gated_delta_rule"),
    Bug("state_shared_across_batch", "6.4", "sums the update over the batch into one state that every sequence shares",
        old='torch.einsum("bhk,bhv->bhkv", k_t, delta)', new='torch.einsum("bhk,bhv->hkv", k_t, delta)',
        tests="test_gated_delta_rule"),
    # 6.5 chunkwise
    Bug("last_partial_chunk_dropped", "6.5",
        "counts chunks with T // C, so the tail of a T that is not a multiple of C is lost",
        old="N = -(-T // C)", new="N = T // C", tests="test_chunk"),
    Bug("padding_decays_the_state", "6.5",
        "pads the gates with -1 instead of 0, so padding tokens decay the final state",
        old="g = F.pad(g, (0, 0, 0, pad))", new="g = F.pad(g, (0, 0, 0, pad), value=-1.0)", tests="test_chunk"),
    Bug("gate_ratio_underflows", "6.5",
        "forms exp(G_i - G_j) as exp(G_i) / exp(G_j), which is 0/0 when the gates are near 0",
        old="decay = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, -math.inf).exp()",
        new="decay = (G.exp()[..., :, None] / G.exp()[..., None, :]).masked_fill(~causal, 0.0)", tests="test_chunk"),
    Bug("triangular_sign_flipped", "6.5",
        "solves with (I - L) instead of (I + L): the corrections enter with the wrong sign",
        old="I_plus_L = L + torch.eye(", new="I_plus_L = -L + torch.eye(", tests="test_chunk"),
    Bug("no_decay_between_chunks", "6.5", "hands the state to the next chunk without the chunk's total decay",
        old="state = state * chunk_decay[:, :, n] + ", new="state = state + ", tests="test_chunk"),
    Bug("initial_state_ignored", "6.5", "always starts from a zero state",
        old="o = q.new_empty(B, H, N, C, d_v)\n",
        new="o = q.new_empty(B, H, N, C, d_v)\n    state = torch.zeros_like(state)\n",
        tests="test_chunk"),
    # 6.6 the layer
    Bug("state_kept_between_calls", "6.6",
        "remembers the last state on the module and resumes from it when state is None",
        old="        q, k, v, g, beta = self.project(x)\n"
            "        o, new_state = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state, "
            "chunk_size=self.chunk_size)\n",
        new="        q, k, v, g, beta = self.project(x)\n"
            "        state = state if state is not None else getattr(self, '_state', None)\n"
            "        if state is not None and state.shape[0] != x.shape[0]:\n            state = None\n"
            "        o, new_state = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state, "
            "chunk_size=self.chunk_size)\n        self._state = new_state\n",
        tests="test_layer"),
    Bug("gate_not_log_space", "6.6", "feeds -softplus(...) without the per-head rate exp(A_log)",
        old="g = -self.A_log.exp() * F.softplus(", new="g = -F.softplus(", tests="test_layer"),
    Bug("gate_without_dt_bias", "6.6",
        "drops the per-head dt_bias from the forget gate's softplus, so every head forgets at the rate of "
        "softplus(a_proj(x)) alone",
        old="F.softplus(self.a_proj(x) + self.dt_bias)", new="F.softplus(self.a_proj(x))", tests="test_layer"),
    Bug("step_ignores_state", "6.6", "decodes each token from a zero state",
        old="o, next_state = gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=state)",
        new="o, next_state = gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=None)", tests="test_layer"),
    Bug("heads_split_wrong", "6.6", "splits the projection as (B, T, d, H) instead of (B, T, H, d)",
        old="q = self.q_proj(x).view(B, T, H, self.head_dim_k)  # (B, T, H, d_k)",
        new="q = self.q_proj(x).view(B, T, self.head_dim_k, H).transpose(-1, -2)  # (B, T, H, d_k)",
        tests="test_layer"),
    # 6.7 hybrid memory
    Bug("state_grows_with_seq_len", "6.7", "counts the linear layers' state per token, like a KV cache",
        old="state = num_linear_layers * num_heads * head_dim_k * head_dim_v * DTYPE_BYTES[state_dtype]",
        new="state = num_linear_layers * num_heads * head_dim_k * head_dim_v * DTYPE_BYTES[state_dtype] * max(seq_len, "
            "1)",
        tests="test_hybrid"),
    Bug("kv_without_factor_2", "6.7", "counts only the keys of the attention layers",
        old="kv = num_attention_layers * 2 * num_kv_heads", new="kv = num_attention_layers * num_kv_heads",
        tests="test_hybrid"),
]
