"""References for Chapter 9: the RoPE scaling rules of ``transformers`` itself, and
RoPE as a complex rotation.

``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` is the code that sets the
frequencies of Llama 3.1, Qwen, DeepSeek and most open models when they are loaded,
so it is the standard our exercises must agree with. Each of its functions takes a
model config and reads ``config.rope_parameters`` (a dict with ``rope_theta``,
``factor`` and the method's own keys), ``config.head_dim`` and
``config.max_position_embeddings``; it returns ``(inv_freq, attention_factor)``, the
inverse frequencies in float32. ``RopeConfig`` below is the smallest object that
offers those attributes, so that no model config (and none of its validation or
defaults) stands between the test and the function.

The rotation itself is checked against multiplication of the complex number
``x_i + i x_{i+d/2}`` by ``a exp(i p theta_i)``, in complex128, from Python floats.
"""

import cmath

import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS


class RopeConfig:
    """What a ``ROPE_INIT_FUNCTIONS`` entry reads from a model config, and nothing else."""

    def __init__(self, head_dim, max_position_embeddings, **rope_parameters):
        self.head_dim = head_dim
        self.num_attention_heads = 1
        self.hidden_size = head_dim
        self.max_position_embeddings = max_position_embeddings
        self.rope_parameters = dict(rope_parameters)

    def standardize_rope_params(self):  # already in the standard form
        pass


def _run(rope_type, head_dim, max_position_embeddings, seq_len=None, **params):
    config = RopeConfig(head_dim, max_position_embeddings, rope_type=rope_type, **params)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"), seq_len=seq_len)
    return inv_freq.to(torch.float64), float(attention_factor)


def default_inv_freq(head_dim, base):
    """Plain RoPE: linear scaling with factor 1 (the division by 1 is exact)."""
    return _run("linear", head_dim, 2048, rope_theta=float(base), factor=1.0)[0]


def linear_inv_freq(head_dim, base, factor):
    return _run("linear", head_dim, 2048, rope_theta=float(base), factor=float(factor))[0]


def ntk_inv_freq(head_dim, base, factor, original_len=4096):
    """Static NTK-aware scaling through transformers' *dynamic* NTK rule.

    The dynamic rule sets base' = base * (f * n / L - (f - 1))**(d/(d-2)) for a sequence
    of n >= L tokens. With its own factor f = 1 and n = s * L this is exactly
    base * s**(d/(d-2)), the static rule with factor s."""
    return _run("dynamic", head_dim, original_len, seq_len=factor * original_len,
                rope_theta=float(base), factor=1.0)[0]


def yarn(head_dim, base, factor, original_len, beta_fast=32.0, beta_slow=1.0):
    """(inv_freq float64, attention_factor) of transformers' YaRN, with truncation (its default)."""
    return _run("yarn", head_dim, int(original_len * factor), rope_theta=float(base), factor=float(factor),
                original_max_position_embeddings=original_len, beta_fast=beta_fast, beta_slow=beta_slow)


def yarn_boundaries(head_dim, base, original_len, beta_fast=32.0, beta_slow=1.0):
    """The fractional indices i(beta) of YaRN's ramp, before rounding (for choosing test cases)."""
    import math

    def index_of(rotations):
        return head_dim * math.log(original_len / (2 * math.pi * rotations)) / (2 * math.log(base))

    return index_of(beta_fast), index_of(beta_slow)


def llama3_inv_freq(head_dim, base, factor, original_len, low_freq_factor=1.0, high_freq_factor=4.0):
    return _run("llama3", head_dim, int(original_len * factor), rope_theta=float(base), factor=float(factor),
                original_max_position_embeddings=original_len, low_freq_factor=low_freq_factor,
                high_freq_factor=high_freq_factor)[0]


def rotate(x, positions, inv_freq, attention_factor=1.0):
    """a * RoPE(x) with the given frequencies, as complex multiplication in complex128.
    x: (..., T, d); positions: int (T,); inv_freq: (d/2,). Returns float64 (..., T, d)."""
    half = x.shape[-1] // 2
    x64 = x.detach().to(torch.float64)
    z = torch.complex(x64[..., :half], x64[..., half:])  # (..., T, d/2)
    rows = [[attention_factor * cmath.exp(1j * p * f) for f in inv_freq.tolist()] for p in positions.tolist()]
    out = z * torch.tensor(rows, dtype=torch.complex128)  # (..., T, d/2)
    return torch.cat([out.real, out.imag], dim=-1)


# -- References for the exercises' own API (grading.judge.substitute) --------------------
# While a test of 9.3 to 9.6 runs, the student's rope_inv_freq (9.1) is this one:
# the textbook formula, one Python float per frequency, with the errors of 9.1.


def checked_rope_inv_freq(head_dim, base=10000.0):
    if isinstance(head_dim, bool) or not isinstance(head_dim, int):
        raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be even and >= 2, got {head_dim}")
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a real number, got {type(base).__name__}")
    if not base > 1 or base == float("inf"):
        raise ValueError(f"base must be finite and > 1, got {base}")
    return torch.tensor([float(base) ** (-2.0 * i / head_dim) for i in range(head_dim // 2)], dtype=torch.float64)


SUBSTITUTES = {"rope_inv_freq": checked_rope_inv_freq}
