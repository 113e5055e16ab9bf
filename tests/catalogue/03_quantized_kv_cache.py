"""Wrong implementations of Chapter 3 that the graders must reject."""

from dataclasses import replace

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '3.1': 'Symmetric INT8, one scale per token',
    '3.2': 'Asymmetric quantization in groups',
    '3.3': 'Per token or per channel',
    '3.4': 'Asymmetric quantization in groups',
    '3.5': 'Honest memory accounting',
    '3.6': 'A KIVI-style cache',
    '3.7': 'FP8: what serving engines ship',
    '3.8': 'FP8: what serving engines ship',
}

BUGS = [
    # 3.1 symmetric INT8
    Bug("scale_from_max_not_absmax", "3.1", "takes the scale from max(x), so negative-dominated rows overflow",
        old="absmax = x.abs().amax(dim=-1, keepdim=True)", new="absmax = x.amax(dim=-1, keepdim=True)"),
    Bug("zero_row_divides_by_zero", "3.1", "divides an all-zero row by a zero scale (NaN, cast to int by luck)",
        old="safe = torch.where(s > 0, s, torch.ones_like(s))\n    q = torch.round(x / safe)",
        new="safe = s\n    q = torch.round(x / safe)"),
    Bug("no_clamp_before_int8_cast", "3.1", "casts without clamping, so a rounded-down fp16 scale wraps 185 to -71",
        old="q = torch.round(x / safe).clamp(-INT8_QMAX, INT8_QMAX)", new="q = torch.round(x / safe)"),
    Bug("range_minus_128", "3.1", "uses the asymmetric range [-128, 127] with scale absmax / 128",
        old="scale = (absmax / INT8_QMAX).to(META_DTYPE)", new="scale = (absmax / 128).to(META_DTYPE)"),
    Bug("scale_kept_in_fp32", "3.1",
        "quantizes with the fp32 scale but stores the fp16 one, so codes and scale disagree",
        old="s = scale.float()\n    # An all-zero", new="s = absmax / INT8_QMAX\n    # An all-zero"),
    Bug("truncates_instead_of_rounding", "3.1", "casts x / s straight to int, truncating towards zero",
        old="q = torch.round(x / safe).clamp(-INT8_QMAX, INT8_QMAX)",
        new="q = (x / safe).trunc().clamp(-INT8_QMAX, INT8_QMAX)"),
    # 3.2 asymmetric groups
    Bug("zero_point_not_applied_on_dequantize", "3.2", "dequantizes q * s and forgets to add the zero-point",
        old="x = qg * scale.float().unsqueeze(-1) + zero.float().unsqueeze(-1)",
        new="x = qg * scale.float().unsqueeze(-1)"),
    Bug("levels_2_pow_bits", "3.2", "divides the range by 2**bits instead of 2**bits - 1",
        old="levels = 2**bits - 1\n    xg", new="levels = 2**bits\n    xg"),
    Bug("constant_group_nan", "3.2", "divides a constant group by its zero scale",
        old="safe = torch.where(s > 0, s, torch.ones_like(s))\n    q = torch.round((xg",
        new="safe = s\n    q = torch.round((xg"),
    Bug("groups_strided_not_contiguous", "3.2", "forms groups from every n-th element instead of consecutive elements",
        old="xg = x.float().reshape(*x.shape[:-1], d // group_size, group_size)",
        new="xg = x.float().reshape(*x.shape[:-1], group_size, d // group_size).transpose(-1, -2)"),
    # 3.3 per-channel keys
    Bug("keys_per_token", "3.3", "quantizes keys per token (groups along head_dim) instead of per channel",
        code="""
        _check_float_tensor("k", k, min_dim=2)
        if k.shape[-2] % group_size:
            raise ValueError(f"group_size must divide the number of tokens {k.shape[-2]}, got {group_size}")
        q, scale, zero = quantize_asym(k, bits, group_size)
        return q, scale, zero
        """),
    # 3.4 packing
    Bug("nibbles_packed_in_wrong_order", "3.4", "puts element 2i in the high nibble",
        old="return low | (high << 4)", new="return high | (low << 4)"),
    Bug("nibbles_unpacked_in_wrong_order", "3.4", "unpacks the high nibble first",
        old="torch.stack([low, high], dim=-1)", new="torch.stack([high, low], dim=-1)"),
    Bug("codes_above_15_accepted", "3.4", "packs a code of 16 and silently corrupts the neighbour",
        old="if q.numel() and int(q.max()) > 15:", new="if False:"),
    # 3.5 bytes per token
    Bug("metadata_not_counted", "3.5", "counts only the codes, as if scales and zero-points were free",
        old="per_vector = head_dim * bits // 8 + head_dim // group_size * meta_per_group",
        new="per_vector = head_dim * bits // 8"),
    Bug("zero_point_always_counted", "3.5", "charges a zero-point to symmetric schemes too",
        old="meta_per_group = META_BYTES * (2 if zero_point else 1)", new="meta_per_group = META_BYTES * 2"),
    Bug("k_and_v_factor_forgotten", "3.5", "counts keys only",
        old="return 2 * num_layers * num_kv_heads * per_vector", new="return num_layers * num_kv_heads * per_vector"),
    # 3.6 the KIVI-style cache
    Bug("residual_holds_a_full_group", "3.6", "flushes only when the residual exceeds group_size (off by one)",
        old="while res_k.shape[2] >= G:", new="while res_k.shape[2] > G:"),
    Bug("cache_keys_per_token", "3.6", "quantizes the cache's keys per token, like the values",
        old="self.key_groups.append(self._store(*quantize_keys_per_channel(res_k[:, :, :G], self.bits, G)))",
        new="self.key_groups.append(self._store(*quantize_asym(res_k[:, :, :G], self.bits, G)))"),
    Bug("cache_values_per_channel", "3.6", "quantizes the cache's values per channel, like the keys",
        old="self.value_groups.append(self._store(*quantize_asym(res_v[:, :, :G], self.bits, G)))",
        new="self.value_groups.append(self._store(*quantize_keys_per_channel(res_v[:, :, :G], self.bits, G)))"),
    Bug("residual_dropped_from_attention", "3.6", "returns only the quantized groups, losing the newest tokens",
        old="        if self.res_k is not None:\n            ks.append",
        new="        if False:\n            ks.append"),
    Bug("residual_not_counted", "3.6", "leaves the full-precision residual out of nbytes()",
        old="            total += self.res_k.numel() * self.res_k.element_size() + self.res_v.numel() * "
            "self.res_v.element_size()",
        new="            total += 0"),
    Bug("unpacked_codes_counted", "3.6", "stores INT4 codes one per byte, unpacked",
        old="""self.key_groups.append(self._store(*quantize_keys_per_channel(res_k[:, :, :G], self.bits, G)))
            self.value_groups.append(self._store(*quantize_asym(res_v[:, :, :G], self.bits, G)))""",
        new="""self.key_groups.append(quantize_keys_per_channel(res_k[:, :, :G], self.bits, G))
            self.value_groups.append(quantize_asym(res_v[:, :, :G], self.bits, G))"""),
    # A student who writes the cache's own quantizer instead of calling 3.2's can round
    # every code down and still stay within one step of the reference: the cache's
    # grader rejects that on its own (the half-step check against the appended values).
    Bug("cache_rounds_codes_down", "3.6",
        "quantizes the values with its own code, which floors (x - zero) / scale instead of rounding",
        old="self.value_groups.append(self._store(*quantize_asym(res_v[:, :, :G], self.bits, G)))",
        new="""levels = 2**self.bits - 1
            vg = res_v[:, :, :G].float().reshape(B, H, G, d // G, G)  # (B, H_kv, G, groups, G)
            lo, hi = vg.amin(dim=-1), vg.amax(dim=-1)  # (B, H_kv, G, groups)
            zero, scale = lo.half(), ((hi - lo) / levels).half()
            safe = torch.where(scale > 0, scale.float(), torch.ones_like(lo)).unsqueeze(-1)
            q = torch.floor((vg - zero.float().unsqueeze(-1)) / safe).clamp(0, levels).to(torch.uint8)
            self.value_groups.append(self._store(q.reshape(B, H, G, d), scale, zero))""",
        tests="cache_keys_values"),
    # 3.7 FP8 E4M3
    Bug("fp8_scale_from_fnuz_max", "3.7",
        "divides max |x| by 240, the largest E4M3FNUZ number, also when it casts to E4M3FN (whose largest is 448)",
        old="fp8_max = torch.finfo(dtype).max", new="fp8_max = 240.0"),
    Bug("fp8_cast_without_saturation", "3.7",
        "casts x / s to FP8 without clamping it to [-M, M], so what lies past a given scale becomes NaN",
        old="codes = (x / s).clamp(-fp8_max, fp8_max).to(dtype)", new="codes = (x / s).to(dtype)"),
    Bug("fp8_scale_per_token", "3.7", "takes one scale per token (max over head_dim) instead of one per KV head",
        old="amax = x.abs().amax(dim=(-2, -1), keepdim=True)  # (B, H_kv, 1, 1)",
        new="amax = x.abs().amax(dim=-1, keepdim=True)  # (B, H_kv, T, 1)"),
    Bug("fp8_zero_head_divides_by_zero", "3.7", "divides a head of zeros by its zero scale (0 / 0 is NaN)",
        old="s = torch.where(amax > 0, amax / fp8_max, torch.ones_like(amax))", new="s = amax / fp8_max"),
    Bug("fp8_dequantize_divides", "3.7", "dequantizes codes / scale instead of codes * scale",
        old="return codes.float() * scale.float()  # (B, H_kv, T, d)",
        new="return codes.float() / scale.float()  # (B, H_kv, T, d)"),
    # 3.8 the Hadamard rotation
    Bug("rotation_not_undone", "3.8", "returns the dequantized keys still rotated, without multiplying by H^T",
        old="return dequantize_fp8(codes, scale) @ rot.T  # (B, H_kv, T, d)",
        new="return dequantize_fp8(codes, scale)  # (B, H_kv, T, d)"),
    Bug("hadamard_not_normalized", "3.8", "builds the +-1 Hadamard matrix without dividing by sqrt(n)",
        old="return (h / math.sqrt(n)).float()  # (n, n)", new="return h.float()  # (n, n)"),
    Bug("rotated_per_head_ignored", "3.8",
        "quantizes the rotated keys with one scale per tensor whatever per_head says",
        old="quantize_fp8(x.float() @ rot, per_head=per_head, dtype=dtype)",
        new="quantize_fp8(x.float() @ rot, dtype=dtype)"),
]

# Each bug runs only against its own exercise's graders (the test names share these
# words), which keeps `pytest --prove` fast.
TESTS_OF_EXERCISE = {"3.1": "int8", "3.2": "asym", "3.3": "per_channel", "3.4": "int4", "3.5": "quantized_bytes",
                     "3.6": "cache", "3.7": "fp8", "3.8": "rotation"}
BUGS = [b if b.tests else replace(b, tests=TESTS_OF_EXERCISE[b.exercise]) for b in BUGS]
# The same mistake in 3.2's own quantizer: its graders check the codes exactly.
BUGS.append(Bug("asym_rounds_codes_down", "3.2", "floors (x - zero) / scale instead of rounding",
                old="q = torch.round((xg - zero.float().unsqueeze(-1)) / safe).clamp(0, levels)",
                new="q = torch.floor((xg - zero.float().unsqueeze(-1)) / safe).clamp(0, levels)",
                tests="asym"))
