"""Our own decode loop over SmolLM2's weights, with pluggable attention and KV cache.

A Llama layer, for hidden states ``x`` (B, T, D):

    h = x + W_o · attention(RoPE(W_q · n), RoPE(W_k · n), W_v · n),   n = RMSNorm(x)
    y = h + W_down · (SiLU(W_gate · m) * (W_up · m)),                   m = RMSNorm(h)

with ``RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w`` and RoPE rotating the pairs
``(i, i + d/2)`` of each head by ``position * theta**(-2i/d)``. The logits are the
final RMSNorm times the (tied) embedding matrix. Keys are rotated *before* they are
cached, at their absolute positions (Llama's convention).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from modellab.attention import dense_attention
from modellab.caches import DenseCache, ModelCache
from modellab.load import ModelConfig, load_model, model_config


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor  # (D,)
    wq: torch.Tensor  # (H*d, D)
    wk: torch.Tensor  # (H_kv*d, D)
    wv: torch.Tensor  # (H_kv*d, D)
    wo: torch.Tensor  # (D, H*d)
    mlp_norm: torch.Tensor  # (D,)
    w_gate: torch.Tensor  # (F, D)
    w_up: torch.Tensor  # (F, D)
    w_down: torch.Tensor  # (D, F)


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope(x, positions, theta, inv_freq=None, attention_factor=1.0):
    """Rotate ``x`` (B, H, T, d) at ``positions`` (T,): pair (i, i + d/2) by angle positions * inv_freq[i].

    ``inv_freq`` (d/2,) defaults to theta**(-2i/d); a scaled RoPE (Chapter 9) passes its own,
    and YaRN's ``attention_factor`` multiplies cos and sin (so q.k by its square), as
    ``transformers`` does. Angles in fp32, like ``transformers``."""
    d = x.shape[-1]
    if inv_freq is None:
        inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)  # (d/2,)
    angles = positions.float()[:, None] * inv_freq.float()[None, :]  # (T, d/2)
    cos, sin = torch.cat([angles, angles], dim=-1).cos(), torch.cat([angles, angles], dim=-1).sin()  # (T, d)
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)  # rotate_half
    return x * cos + rotated * sin


class Llama:
    """The model's weights and our forward pass. ``Llama()`` loads SmolLM2 (cached)."""

    def __init__(self, hf_model=None):
        if hf_model is None:
            hf_model, _ = load_model()
        self.config: ModelConfig = model_config(hf_model)
        m = hf_model.model
        self.embed = m.embed_tokens.weight.detach()  # (V, D)
        self.final_norm = m.norm.weight.detach()
        self.lm_head = hf_model.lm_head.weight.detach()  # (V, D), tied to embed
        self.layers = [
            LayerWeights(
                attn_norm=layer.input_layernorm.weight.detach(),
                wq=layer.self_attn.q_proj.weight.detach(),
                wk=layer.self_attn.k_proj.weight.detach(),
                wv=layer.self_attn.v_proj.weight.detach(),
                wo=layer.self_attn.o_proj.weight.detach(),
                mlp_norm=layer.post_attention_layernorm.weight.detach(),
                w_gate=layer.mlp.gate_proj.weight.detach(),
                w_up=layer.mlp.up_proj.weight.detach(),
                w_down=layer.mlp.down_proj.weight.detach(),
            )
            for layer in m.layers
        ]
        self.inv_freq = None  # (d/2,) or None: the default RoPE frequencies theta**(-2i/d)
        self.attention_factor = 1.0  # YaRN's factor on cos and sin (Chapter 9)

    def with_rope(self, inv_freq=None, attention_factor=1.0) -> "Llama":
        """The same weights (shared, not copied) with other RoPE frequencies: ``inv_freq``
        (head_dim/2,) and an ``attention_factor`` on cos and sin (Chapter 9's scaled RoPE)."""
        d = self.config.head_dim
        if inv_freq is not None and (not isinstance(inv_freq, torch.Tensor) or inv_freq.shape != (d // 2,)):
            raise ValueError(f"inv_freq must be a tensor of shape ({d // 2},), got "
                             f"{getattr(inv_freq, 'shape', inv_freq)!r}")
        if (not isinstance(attention_factor, (int, float)) or isinstance(attention_factor, bool)
                or attention_factor <= 0):
            raise ValueError(f"attention_factor must be a positive number, got {attention_factor!r}")
        other = copy.copy(self)
        other.inv_freq, other.attention_factor = inv_freq, float(attention_factor)
        return other

    def new_cache(self, make_layer=DenseCache, **kwargs) -> ModelCache:
        """A fresh :class:`ModelCache` with one ``make_layer()`` per layer (dense by default)."""
        return ModelCache(make_layer, self.config.num_layers, **kwargs)

    @torch.inference_mode()
    def forward(self, input_ids, cache: ModelCache, attention=dense_attention, *, capture_keys=None):
        """Logits (B, T, V) for ``input_ids`` (B, T), the next T tokens after what ``cache`` holds.

        ``capture_keys``: an optional list that receives each layer's rotated keys
        (B, H_kv, T, d), for looking at real keys."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
            raise ValueError("input_ids must be an int64 tensor of shape (B, T)")
        c = self.config
        B, T = input_ids.shape
        positions = torch.arange(cache.seen, cache.seen + T)  # (T,)
        x = F.embedding(input_ids, self.embed)  # (B, T, D)
        for i, w in enumerate(self.layers):
            n = rms_norm(x, w.attn_norm, c.rms_norm_eps)
            q = F.linear(n, w.wq).view(B, T, c.num_heads, c.head_dim).transpose(1, 2)  # (B, H, T, d)
            k = F.linear(n, w.wk).view(B, T, c.num_kv_heads, c.head_dim).transpose(1, 2)  # (B, H_kv, T, d)
            v = F.linear(n, w.wv).view(B, T, c.num_kv_heads, c.head_dim).transpose(1, 2)
            q = rope(q, positions, c.rope_theta, self.inv_freq, self.attention_factor)
            k = rope(k, positions, c.rope_theta, self.inv_freq, self.attention_factor)
            if capture_keys is not None:
                capture_keys.append(k)
            cache.append(i, k, v)
            keys, values = cache.keys_values(i)  # (B, H_kv, T_kept, d)
            mask = cache.mask(i, positions)  # (T, T_kept)
            out = attention(q, keys.to(q.dtype), values.to(q.dtype), mask)  # (B, H, T, d)
            x = x + F.linear(out.transpose(1, 2).reshape(B, T, c.num_heads * c.head_dim), w.wo)
            m = rms_norm(x, w.mlp_norm, c.rms_norm_eps)
            x = x + F.linear(F.silu(F.linear(m, w.w_gate)) * F.linear(m, w.w_up), w.w_down)
        return F.linear(rms_norm(x, self.final_norm, c.rms_norm_eps), self.lm_head)  # (B, T, V)

    def generate(self, input_ids, cache: ModelCache | None = None, max_new_tokens: int = 16,
                 attention=dense_attention) -> list[int]:
        """Greedy decoding: prefill the prompt (1, T), then one token at a time. Returns the new token ids."""
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"input_ids must be (1, T), got {tuple(input_ids.shape)}")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        cache = self.new_cache() if cache is None else cache
        logits = self.forward(input_ids, cache, attention)
        new = []
        for step in range(max_new_tokens):
            token = int(logits[0, -1].argmax())
            new.append(token)
            if step + 1 < max_new_tokens:
                logits = self.forward(torch.tensor([[token]]), cache, attention)
        return new
