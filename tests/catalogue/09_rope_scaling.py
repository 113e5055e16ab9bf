"""Wrong implementations of Chapter 9 that the graders must reject."""

from dataclasses import replace

from grading.notebook.catalogue import Bug

# Each bug runs only against the graders of its own exercise, which keeps `pytest --prove` short.
GRADERS = {"9.1": "rope_inv_freq", "9.2": "apply_rope_freqs", "9.3": "linear_inv_freq", "9.4": "ntk_inv_freq",
           "9.5": "yarn", "9.6": "llama3"}

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '9.1': 'Angles the model never saw',
    '9.2': 'Angles the model never saw',
    '9.3': 'Position interpolation',
    '9.4': 'NTK-aware scaling',
    '9.5': 'YaRN: decide pair by pair',
    '9.6': 'YaRN: decide pair by pair',
}

BUGS = [
    # 9.1: the inverse frequencies
    Bug("freq_exponent_i_over_d", "9.1", "uses base**(-i/d), so the pairs span only half the range of wavelengths",
        old="return float(base) ** (-2.0 * i / head_dim)", new="return float(base) ** (-i / head_dim)"),
    Bug("freq_one_pair_per_channel", "9.1", "makes a frequency for every channel, arange(0, d, 2) written as arange(d)",
        old="i = torch.arange(head_dim // 2, dtype=torch.float64)",
        new="i = torch.arange(head_dim, dtype=torch.float64) / 2"),
    Bug("freq_returns_wavelength_scale", "9.1", "returns base**(2i/d), the reciprocal of the inverse frequency",
        old="return float(base) ** (-2.0 * i / head_dim)", new="return float(base) ** (2.0 * i / head_dim)"),
    # 9.2: the rotation
    Bug("rope_interleaved_pairing", "9.2",
        "rotates the adjacent pairs (2i, 2i+1) of GPT-J instead of Llama's (i, i + d/2)",
        old="x1, x2 = x[..., :half], x[..., half:]  # (..., T, d/2)",
        new="x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d/2)"),
    Bug("attention_factor_on_cos_only", "9.2",
        "multiplies only cos by the attention factor, so the rotation is no longer a scaled rotation",
        old="sin = (attention_factor * angles.sin()).to(x.dtype)", new="sin = angles.sin().to(x.dtype)"),
    Bug("attention_factor_squared_in_rotation", "9.2",
        "applies the score factor a**2 to q and to k, so the scores get a**4",
        old="cos = (attention_factor * angles.cos()).to(x.dtype)  # (T, d/2)\n"
            "    sin = (attention_factor * angles.sin()).to(x.dtype)  # (T, d/2)",
        new="cos = (attention_factor ** 2 * angles.cos()).to(x.dtype)  # (T, d/2)\n"
            "    sin = (attention_factor ** 2 * angles.sin()).to(x.dtype)  # (T, d/2)"),
    Bug("rope_angles_in_float32", "9.2",
        "computes the angles in float32, off by whole hundredths of a radian at large positions",
        old="angles = positions.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]",
        new="angles = (positions.to(torch.float32)[:, None] * inv_freq.to(torch.float32)[None, :]).double()"),
    # 9.3: position interpolation
    Bug("pi_multiplies_by_factor", "9.3", "speeds the rotation up by s instead of slowing it down (positions times s)",
        old="return rope_inv_freq(head_dim, base) / factor", new="return rope_inv_freq(head_dim, base) * factor"),
    Bug("pi_scales_positions_and_frequencies", "9.3",
        "divides the frequencies by s and then the positions by s as well: s**2 in all",
        old="return rope_inv_freq(head_dim, base) / factor",
        new="return rope_inv_freq(head_dim, base) / factor / factor"),
    # 9.4: NTK-aware
    Bug("ntk_base_times_factor", "9.4",
        "multiplies the base by s, forgetting the exponent d/(d-2): the slowest pair is not interpolated by s",
        old="new_base = float(base) * float(factor) ** (head_dim / (head_dim - 2))",
        new="new_base = float(base) * float(factor)"),
    Bug("ntk_scales_positions_and_base", "9.4",
        "scales the base and also divides the positions by s, interpolating twice",
        old="return rope_inv_freq(head_dim, new_base)", new="return rope_inv_freq(head_dim, new_base) / factor"),
    Bug("ntk_exponent_upside_down", "9.4", "uses the exponent (d-2)/d instead of d/(d-2)",
        old="(head_dim / (head_dim - 2))", new="((head_dim - 2) / head_dim)"),
    # 9.5: YaRN
    Bug("yarn_ramp_on_the_wrong_side", "9.5", "interpolates the fast pairs and keeps the slow ones, the ramp reversed",
        old="inv_freq = (1 - ramp) * theta + ramp * theta / factor",
        new="inv_freq = ramp * theta + (1 - ramp) * theta / factor"),
    Bug("yarn_betas_swapped", "9.5", "puts beta_slow at the low end of the ramp and beta_fast at the high end",
        old="low = max(math.floor(index_of(beta_fast)), 0)\n"
            "    high = min(math.ceil(index_of(beta_slow)), head_dim - 1)",
        new="low = max(math.floor(index_of(beta_slow)), 0)\n"
            "    high = min(math.ceil(index_of(beta_fast)), head_dim - 1)"),
    Bug("yarn_temperature_twice", "9.5",
        "returns 1/t = (0.1 ln s + 1)**2, the factor on the scores, which apply_rope_freqs then applies to q and to k",
        old="attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0",
        new="attention_factor = (0.1 * math.log(factor) + 1.0) ** 2 if factor > 1 else 1.0"),
    Bug("yarn_temperature_sqrt", "9.5", "returns sqrt(1/t) taken once more, sqrt(0.1 ln s + 1)",
        old="attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0",
        new="attention_factor = math.sqrt(0.1 * math.log(factor) + 1.0) if factor > 1 else 1.0"),
    Bug("yarn_no_rounding", "9.5",
        "leaves the ramp's ends fractional instead of rounding them outwards with floor and ceil",
        old="low = max(math.floor(index_of(beta_fast)), 0)\n"
            "    high = min(math.ceil(index_of(beta_slow)), head_dim - 1)",
        new="low = max(index_of(beta_fast), 0)\n    high = min(index_of(beta_slow), head_dim - 1)"),
    Bug("yarn_index_in_channels", "9.5",
        "solves for the channel index (d instead of d/2 pairs: the formula without the 2)",
        old="return head_dim * math.log(original_len / (2 * math.pi * rotations)) / (2 * math.log(base))",
        new="return head_dim * math.log(original_len / (2 * math.pi * rotations)) / math.log(base)"),
    Bug("yarn_high_clamped_at_last_pair", "9.5", "clamps the ramp's slow end at the last pair, d/2 - 1, instead of "
        "head_dim - 1, so a ramp that ends past the last pair is steeper than it should be",
        old="high = min(math.ceil(index_of(beta_slow)), head_dim - 1)",
        new="high = min(math.ceil(index_of(beta_slow)), head_dim // 2 - 1)"),
    Bug("yarn_rotations_without_2pi", "9.5", "counts radians instead of turns: r = L theta instead of L theta / 2 pi",
        old="math.log(original_len / (2 * math.pi * rotations))", new="math.log(original_len / rotations)"),
    Bug("yarn_ln_of_factor_base10", "9.5", "uses log10(s) in the attention factor",
        old="attention_factor = 0.1 * math.log(factor) + 1.0", new="attention_factor = 0.1 * math.log10(factor) + 1.0"),
    # 9.6: Llama 3.1
    Bug("llama3_blend_reversed", "9.6", "gives the blend's weights to the wrong ends: mu on the interpolated frequency",
        old="blended = (1 - smooth) * theta / factor + smooth * theta",
        new="blended = smooth * theta / factor + (1 - smooth) * theta"),
    Bug("llama3_thresholds_swapped", "9.6", "divides the short waves by s and keeps the long ones",
        old="out = torch.where(wavelength > original_len / low_freq_factor, theta / factor, blended)\n"
            "    return torch.where(wavelength < original_len / high_freq_factor, theta, out)",
        new="out = torch.where(wavelength > original_len / low_freq_factor, theta, blended)\n"
            "    return torch.where(wavelength < original_len / high_freq_factor, theta / factor, out)"),
    Bug("llama3_wavelength_without_2pi", "9.6", "takes 1/theta as the wavelength, so every threshold moves by 2 pi",
        old="wavelength = 2 * math.pi / theta", new="wavelength = 1 / theta"),
    Bug("llama3_no_blend", "9.6", "switches from keeping to interpolating at one threshold, with no smooth band",
        old="blended = (1 - smooth) * theta / factor + smooth * theta", new="blended = theta"),
]
BUGS = [replace(bug, tests=GRADERS[bug.exercise]) for bug in BUGS]
