"""Independent references for Chapter 3: quantization written as plain loops over
rows and groups in Python floats (fp64), never imported from a notebook. At the end,
``SUBSTITUTES``: the exercises' own functions, written in fp64 from their docstrings,
which stand in for a student's other exercises while one exercise is graded.

Rounding a Python float to fp16 goes through ``torch.tensor(..., float64).to(float16)``,
which rounds to nearest-even once, from the exact fp64 value."""

import math

import torch

INT8_QMAX = 127
META_BYTES = 2  # scales and zero-points are stored in fp16

# The stated synthetic outlier model (Chapter 3, section 3.2): every element N(0, 1);
# in each KV head, OUTLIER_CHANNELS random channels of the keys are scaled by OUTLIER_SCALE.
OUTLIER_CHANNELS = 4
OUTLIER_SCALE = 10.0


def synthetic_kv(batch_size, num_kv_heads, seq_len, head_dim, num_outliers=OUTLIER_CHANNELS,
                 outlier_scale=OUTLIER_SCALE, seed=0):
    """The outlier model, drawn with the same generator calls as the book's, so the
    graders test on exactly the data the chapter describes."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(batch_size, num_kv_heads, seq_len, head_dim, generator=g)
    v = torch.randn(batch_size, num_kv_heads, seq_len, head_dim, generator=g)
    channels = [torch.randperm(head_dim, generator=g)[:num_outliers].tolist() for _ in range(num_kv_heads)]
    for h, chans in enumerate(channels):
        for c in chans:
            k[:, h, :, c] *= outlier_scale
    return k, v, channels


def fp16(value: float) -> float:
    return torch.tensor(value, dtype=torch.float64).to(torch.float16).item()


def fp16_ulp(value: float) -> float:
    """Spacing of fp16 numbers at ``value`` (subnormal spacing near zero)."""
    a = abs(value)
    if a < 2.0**-14:
        return 2.0**-24
    return 2.0 ** (math.floor(math.log2(a)) - 10)


def round_half_even(r: float) -> int:
    return int(round(r))  # Python's round() is round-half-to-even


def allowed_codes(r: float, lo: int, hi: int, slack: float = 1e-3) -> set[int]:
    """The codes a correct float32 implementation may produce for the exact ratio r:
    round-half-even of r, clamped, plus the neighbour when r lies within ``slack`` of a
    rounding boundary (float32 arithmetic can land on either side of it)."""
    codes = {min(max(round_half_even(r), lo), hi)}
    frac = r - math.floor(r)
    if abs(frac - 0.5) < slack:
        codes |= {min(max(math.floor(r), lo), hi), min(max(math.floor(r) + 1, lo), hi)}
    return codes


def rows(x: torch.Tensor) -> list[list[float]]:
    """The last dimension as Python float rows (fp64)."""
    return x.detach().double().reshape(-1, x.shape[-1]).tolist()


# -- Input checks of the substitutes (grading.judge.substitute), as the docstrings state them --
def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _require_float(name, x, min_dim=1, finite=True):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimension(s), got shape {tuple(x.shape)}")
    if finite and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite (no NaN or inf)")


def _require_uint8(name, x):
    if not isinstance(x, torch.Tensor) or x.dtype != torch.uint8:
        raise TypeError(f"{name} must be a uint8 tensor, got {getattr(x, 'dtype', type(x).__name__)}")


def _require_bits(bits):
    _require_int("bits", bits, 1)
    if bits > 8:
        raise ValueError(f"bits must be in [1, 8], got {bits}")


def _require_shape(name, x, shape):
    _require_float(name, x, min_dim=0, finite=False)
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")


# -- Exercise 3.1: symmetric INT8 per vector ------------------------------------------
def int8_scales(x: torch.Tensor) -> torch.Tensor:
    """fp16(max |x| / 127) for each row, shape x.shape[:-1] + (1,), as float64.
    The absmax is taken on the float32 values the solution computes with."""
    out = []
    for row in rows(x.float()):
        absmax = 0.0
        for value in row:
            absmax = max(absmax, abs(value))
        out.append(fp16(absmax / INT8_QMAX))
    return torch.tensor(out, dtype=torch.float64).reshape(*x.shape[:-1], 1)


def int8_code_sets(x: torch.Tensor, scale: torch.Tensor) -> list[list[set[int]]]:
    """For the given (student's, already checked) fp16 scales: the allowed codes per element."""
    out = []
    for row, s in zip(rows(x.float()), scale.double().flatten().tolist()):
        if s == 0.0:
            out.append([{0} for _ in row])
        else:
            out.append([allowed_codes(value / s, -INT8_QMAX, INT8_QMAX) for value in row])
    return out


# -- Exercise 3.2: asymmetric groups along the last dimension ---------------------------
def asym_params(x: torch.Tensor, bits: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, zero) in fp64 of fp16 values: per row, per group of group_size elements,
    zero = fp16(min), scale = fp16((max - min) / (2**bits - 1))."""
    levels = 2**bits - 1
    scales, zeros = [], []
    for row in rows(x.float()):
        for start in range(0, len(row), group_size):
            group = row[start:start + group_size]
            lo, hi = min(group), max(group)
            zeros.append(fp16(lo))
            scales.append(fp16((hi - lo) / levels))
    shape = (*x.shape[:-1], x.shape[-1] // group_size)
    return (torch.tensor(scales, dtype=torch.float64).reshape(shape),
            torch.tensor(zeros, dtype=torch.float64).reshape(shape))


def asym_code_sets(x, scale, zero, bits, group_size) -> list[list[set[int]]]:
    """Allowed codes per element for the given (checked) scale and zero of each group."""
    levels = 2**bits - 1
    s_rows, z_rows = rows(scale.double()), rows(zero.double())
    out = []
    for row, s_row, z_row in zip(rows(x.float()), s_rows, z_rows):
        codes = []
        for i, value in enumerate(row):
            s, z = s_row[i // group_size], z_row[i // group_size]
            codes.append({0} if s == 0.0 else allowed_codes((value - z) / s, 0, levels))
        out.append(codes)
    return out


def asym_dequant(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group_size: int) -> torch.Tensor:
    out = []
    for q_row, s_row, z_row in zip(rows(q.double()), rows(scale.double()), rows(zero.double())):
        out.append([c * s_row[i // group_size] + z_row[i // group_size] for i, c in enumerate(q_row)])
    return torch.tensor(out, dtype=torch.float64).reshape(q.shape)


# -- Exercise 3.4: nibble packing -------------------------------------------------------
# Also the substitutes for 3.4 (grading.judge.substitute): with the errors the docstrings promise.
def pack_int4(q):
    """q: (..., d) uint8 codes in [0, 15], d even -> (..., d // 2) uint8 with byte i =
    q[2i] + 16 q[2i+1] (element 2i in the low nibble), one byte at a time."""
    _require_uint8("q", q)
    if q.dim() == 0 or q.shape[-1] % 2:
        raise ValueError(f"q must have an even last dimension, got shape {tuple(q.shape)}")
    if q.numel() and int(q.max()) > 15:
        raise ValueError(f"q must hold 4-bit codes in [0, 15], got {int(q.max())}")
    out_shape = (*q.shape[:-1], q.shape[-1] // 2)
    if q.numel() == 0:
        return torch.zeros(out_shape, dtype=torch.uint8)
    out = []
    for row in q.reshape(-1, q.shape[-1]).tolist():
        out.append([row[2 * i] + 16 * row[2 * i + 1] for i in range(len(row) // 2)])
    return torch.tensor(out, dtype=torch.uint8).reshape(out_shape)


def unpack_int4(packed):
    """packed: (..., n) uint8 -> (..., 2n) uint8 codes: byte % 16 first, then byte // 16."""
    _require_uint8("packed", packed)
    if packed.dim() == 0:
        raise ValueError("packed must have at least 1 dimension, got a 0-D tensor")
    out_shape = (*packed.shape[:-1], 2 * packed.shape[-1])
    if packed.numel() == 0:
        return torch.zeros(out_shape, dtype=torch.uint8)
    out = []
    for row in packed.reshape(-1, packed.shape[-1]).tolist():
        codes = []
        for byte in row:
            codes += [byte % 16, byte // 16]
        out.append(codes)
    return torch.tensor(out, dtype=torch.uint8).reshape(out_shape)


# -- Exercise 3.5: bytes per token --------------------------------------------------------
def quantized_bytes_per_token(num_layers, num_kv_heads, head_dim, bits, group_size, zero_point=True):
    """Bytes per token, counted element by element (also 3.5's substitute)."""
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                        ("bits", bits), ("group_size", group_size)):
        _require_int(name, value, 1)
    if bits > 16:
        raise ValueError(f"bits must be at most 16, got {bits}")
    if head_dim % group_size:
        raise ValueError(f"group_size must divide head_dim {head_dim}, got {group_size}")
    if head_dim * bits % 8:
        raise ValueError(f"head_dim x bits must be a whole number of bytes, got head_dim {head_dim} x {bits} bits")
    total_bits = 0
    for _layer in range(num_layers):
        for _tensor in ("k", "v"):
            for _head in range(num_kv_heads):
                total_bits += head_dim * bits  # the codes
                groups = head_dim // group_size
                total_bits += groups * 8 * META_BYTES  # one fp16 scale per group
                if zero_point:
                    total_bits += groups * 8 * META_BYTES  # one fp16 zero-point per group
    assert total_bits % 8 == 0
    return total_bits // 8


# -- Exercise 3.6: the KIVI-style cache ---------------------------------------------------
def kivi_expected(k: torch.Tensor, v: torch.Tensor, bits: int, group_size: int):
    """What keys_values() should return after appending k, v (B, H_kv, T, d) in any
    pieces, and how far each element may be from it.

    Full groups of group_size tokens: keys quantized per channel (statistics over the
    group's tokens), values per token (statistics over group_size channels), both
    asymmetric with fp16 scale and zero-point. The last T % group_size tokens: exact.
    Returns (k_hat, v_hat, k_step, v_step) in fp64; the step is the scale of each
    element's group (0 for the residual), the most a correct float32 implementation
    can differ by (one code, at a rounding boundary, or an fp16 ulp of the scale)."""
    B, H, T, d = k.shape
    levels = 2**bits - 1
    full = T - T % group_size
    kl, vl = k.double().tolist(), v.double().tolist()  # nested Python lists: fast element access
    k_hat, v_hat = k.double().tolist(), v.double().tolist()  # residual entries stay exact
    k_step = [[[[0.0] * d for _ in range(T)] for _ in range(H)] for _ in range(B)]
    v_step = [[[[0.0] * d for _ in range(T)] for _ in range(H)] for _ in range(B)]

    def quantize(group):
        """fp16 zero-point and scale of one group, and each element's dequantized value."""
        z, s = fp16(min(group)), fp16((max(group) - min(group)) / levels)
        codes = [0 if s == 0 else min(max(round_half_even((x - z) / s), 0), levels) for x in group]
        return [c * s + z for c in codes], s + fp16_ulp(z)

    for b in range(B):
        for h in range(H):
            for start in range(0, full, group_size):
                tokens = range(start, start + group_size)
                for c in range(d):  # keys: one group per channel over the group's tokens
                    values, step = quantize([kl[b][h][t][c] for t in tokens])
                    for t, x_hat in zip(tokens, values):
                        k_hat[b][h][t][c], k_step[b][h][t][c] = x_hat, step
                for t in tokens:  # values: groups of group_size channels within a token
                    for c0 in range(0, d, group_size):
                        values, step = quantize(vl[b][h][t][c0:c0 + group_size])
                        v_hat[b][h][t][c0:c0 + group_size] = values
                        v_step[b][h][t][c0:c0 + group_size] = [step] * group_size
    as_tensor = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return as_tensor(k_hat), as_tensor(v_hat), as_tensor(k_step), as_tensor(v_step)


def kivi_nbytes(batch_size, num_kv_heads, head_dim, seq_len, bits, group_size, residual_element_size):
    groups = seq_len // group_size
    residual = seq_len % group_size
    per_group = 0
    # keys: group_size x head_dim codes, one scale and zero per channel
    per_group += group_size * head_dim * bits // 8 + 2 * META_BYTES * head_dim
    # values: group_size x head_dim codes, one scale and zero per group of channels per token
    per_group += group_size * head_dim * bits // 8 + 2 * META_BYTES * group_size * (head_dim // group_size)
    residual_bytes = 2 * residual * head_dim * residual_element_size
    return batch_size * num_kv_heads * (groups * per_group + residual_bytes)


def attention(q, k, v):
    """Dense softmax attention in fp64, one query head at a time (H_kv divides H)."""
    q, k, v = q.double(), k.double(), v.double()
    B, H, Tq, d = q.shape
    group = H // k.shape[1]
    out = torch.zeros(B, H, Tq, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            kh, vh = k[b, h // group], v[b, h // group]
            weights = torch.softmax(q[b, h] @ kh.T / math.sqrt(d), dim=-1)
            out[b, h] = weights @ vh
    return out


# -- Exercises 3.7 and 3.8: FP8 E4M3 and the Hadamard rotation ---------------------------
# The two E4M3 variants, by torch's dtype name: (exponent bias, largest finite value).
# Both have 3 mantissa bits, subnormals and no infinities; E4M3FN spends the codes of
# S.1111.111 on NaN (largest 1.75 * 2**8), E4M3FNUZ only the code of negative zero
# (largest 1.875 * 2**7). Rounding is written by hand: torch's float8 casts are never used
# to round (only to store a number that is already on the grid).
FP8_MANTISSA_BITS = 3
FP8_FORMATS = {"float8_e4m3fn": (7, 448.0), "float8_e4m3fnuz": (8, 240.0)}
FP8_SCALE_RTOL = 2.0**-22  # amax / M rounded once to float32 (2**-24), with room


def fp8_round(value: float, dtype_name: str) -> float:
    """The E4M3 number nearest to ``value`` (ties to even), saturating at +-M."""
    bias, fmax = FP8_FORMATS[dtype_name]
    a = min(abs(value), fmax)
    exponent = 1 - bias  # the subnormals share the smallest normal binade's step
    if a > 0:
        exponent = max(math.frexp(a)[1] - 1, exponent)  # floor(log2 a), exactly
    step = 2.0 ** (exponent - FP8_MANTISSA_BITS)
    return math.copysign(round_half_even(a / step) * step, value)  # a / step is exact


def fp8_scales(x: torch.Tensor, per_head: bool, dtype_name: str) -> torch.Tensor:
    """max |x| / M in fp64, over the tensor (shape ()) or each KV head (B, H_kv, 1, 1);
    1.0 where the maximum is 0."""
    fmax = FP8_FORMATS[dtype_name][1]
    xf = x.float().double()
    blocks = xf.reshape(-1, x.shape[-2] * x.shape[-1]).tolist() if per_head else [xf.flatten().tolist()]
    out = []
    for block in blocks:
        amax = 0.0
        for value in block:
            amax = max(amax, abs(value))
        out.append(amax / fmax if amax > 0 else 1.0)
    return torch.tensor(out, dtype=torch.float64).reshape((*x.shape[:2], 1, 1) if per_head else ())


def fp8_code_sets(x: torch.Tensor, scale: torch.Tensor, dtype_name: str) -> list[list[set[float]]]:
    """For the given (student's, already checked) float32 scale: the FP8 values each
    element may take, rows along the last dimension. x / s in float32 is off by at most
    2**-23 relative from the exact ratio, so the nearest E4M3 number of any ratio within
    FP8_SCALE_RTOL of it is allowed (both sides of a rounding boundary)."""
    s = scale.double().expand(x.shape).reshape(-1, x.shape[-1]).tolist()
    out = []
    for row, s_row in zip(rows(x.float()), s):
        out.append([{fp8_round(value / si * (1 + e), dtype_name) for e in (-FP8_SCALE_RTOL, 0.0, FP8_SCALE_RTOL)}
                    for value, si in zip(row, s_row)])
    return out


def fp8_noisy_code_sets(ratio: torch.Tensor, noise: float, dtype_name: str) -> list[list[set[float]]]:
    """For exact ratios x / s (rows along the last dimension): the FP8 values each element
    may take when the ratio is off by at most ``noise`` (both sides of a rounding boundary).
    One call for a whole tensor, so that a recorded release replays it as one value."""
    return [[{fp8_round(value + t, dtype_name) for t in (-noise, 0.0, noise)} for value in row]
            for row in ratio.double().reshape(-1, ratio.shape[-1]).tolist()]


def hadamard(n: int) -> torch.Tensor:
    """H_1 = (1), H_2n = [[H, H], [H, -H]] / sqrt(2), element by element in fp64."""
    h = [[1.0]]
    while len(h) < n:
        h = [row + row for row in h] + [row + [-e for e in row] for row in h]
    return torch.tensor(h, dtype=torch.float64) / math.sqrt(n)


def fp8_roundtrip_rotated_expected(x: torch.Tensor, per_head: bool, dtype_name: str) -> torch.Tensor:
    """(x H) quantized to E4M3 with the fp64 scale, dequantized, times H^T, all in fp64."""
    rot = hadamard(x.shape[-1])
    xr = x.float().double() @ rot  # (B, H_kv, T, d)
    s = fp8_scales(xr, per_head, dtype_name).expand(xr.shape)
    codes = torch.tensor([fp8_round(value, dtype_name) for value in (xr / s).flatten().tolist()],
                         dtype=torch.float64).reshape(xr.shape)
    return (codes * s) @ rot.T


# -- References for the exercises' own API (grading.judge.substitute) --------------------
# While a test of one exercise runs, the functions of the other exercises in the
# student's notebook are these: 3.3 builds on 3.2's quantizer, and the cache of 3.6
# calls 3.2, 3.3 and 3.4. Written from the exercises' docstrings and section 3.3's
# formulas (z = min x, s = (max x - min x) / (2**b - 1), q = clamp(round((x - z) / s),
# 0, 2**b - 1), x_hat = q s + z) in fp64, with s and z rounded to fp16 once, from the
# exact fp64 value, and the codes computed from the rounded s and z (what is stored is
# what dequantizes). round() is half-to-even; a zero scale (a constant group) gives
# code 0, which dequantizes to z exactly. The errors are the ones the docstrings promise.


def quantize_int8(x):
    """Exercise 3.1: s = fp16(max |x| / 127) per vector, q = clamp(round(x / s), -127, 127)
    as int8 (0 where s is 0); returns (q (..., d) int8, scale (..., 1) fp16)."""
    _require_float("x", x)
    xd = x.double()  # (..., d)
    scale = (xd.abs().amax(dim=-1, keepdim=True) / INT8_QMAX).to(torch.float16)  # (..., 1)
    s = scale.double()
    nonzero = s > 0
    ratio = xd / torch.where(nonzero, s, torch.ones_like(s))  # never 0 / 0
    q = torch.where(nonzero, torch.round(ratio).clamp(-INT8_QMAX, INT8_QMAX), torch.zeros_like(ratio))
    return q.to(torch.int8), scale


def dequantize_int8(q, scale):
    """Exercise 3.1: q * scale in float32."""
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8:
        raise TypeError(f"q must be an int8 tensor, got {getattr(q, 'dtype', type(q).__name__)}")
    if q.dim() < 1:
        raise ValueError(f"q must have at least 1 dimension, got shape {tuple(q.shape)}")
    _require_shape("scale", scale, (*q.shape[:-1], 1))
    return (q.double() * scale.double()).float()


def _asym_last(xg, bits):
    """Asymmetric quantization of each group along the last dim of xg (..., g), fp64:
    (codes (..., g) uint8, scale (...) fp16, zero (...) fp16)."""
    levels = 2**bits - 1
    lo, hi = xg.amin(dim=-1), xg.amax(dim=-1)  # (...)
    zero = lo.to(torch.float16)
    scale = ((hi - lo) / levels).to(torch.float16)
    s, z = scale.double().unsqueeze(-1), zero.double().unsqueeze(-1)  # (..., 1)
    nonzero = s > 0
    ratio = (xg - z) / torch.where(nonzero, s, torch.ones_like(s))
    codes = torch.where(nonzero, torch.round(ratio).clamp(0, levels), torch.zeros_like(ratio))
    return codes.to(torch.uint8), scale, zero


def quantize_asym(x, bits, group_size):
    """Exercise 3.2: groups of group_size consecutive elements of the last dimension.
    Returns (q (..., d) uint8, scale (..., d // group_size) fp16, zero (same) fp16)."""
    _require_float("x", x)
    _require_bits(bits)
    _require_int("group_size", group_size, 1)
    d = x.shape[-1]
    if d % group_size:
        raise ValueError(f"group_size must divide the last dimension {d}, got {group_size}")
    xg = x.double().reshape(*x.shape[:-1], d // group_size, group_size)  # (..., n_groups, g)
    codes, scale, zero = _asym_last(xg, bits)
    return codes.reshape(x.shape), scale, zero


def dequantize_asym(q, scale, zero, group_size):
    """Exercise 3.2: element i of a row is q_i * scale[i // group_size] + zero[i // group_size],
    in float32."""
    _require_uint8("q", q)
    if q.dim() < 1:
        raise ValueError(f"q must have at least 1 dimension, got shape {tuple(q.shape)}")
    _require_int("group_size", group_size, 1)
    d = q.shape[-1]
    if d % group_size:
        raise ValueError(f"group_size must divide the last dimension {d}, got {group_size}")
    groups = (*q.shape[:-1], d // group_size)
    _require_shape("scale", scale, groups)
    _require_shape("zero", zero, groups)
    qg = q.double().reshape(*groups, group_size)  # (..., n_groups, g)
    x = qg * scale.double().unsqueeze(-1) + zero.double().unsqueeze(-1)
    return x.reshape(q.shape).float()


def quantize_keys_per_channel(k, bits, group_size):
    """Exercise 3.3: for each channel, groups of group_size consecutive tokens. Returns
    (q (..., T, d) uint8, scale (..., T // group_size, d) fp16, zero (same) fp16)."""
    _require_float("k", k, min_dim=2)
    _require_bits(bits)
    _require_int("group_size", group_size, 1)
    T, d = k.shape[-2], k.shape[-1]
    if T % group_size:
        raise ValueError(f"group_size must divide the number of tokens {T}, got {group_size}")
    kg = k.double().reshape(*k.shape[:-2], T // group_size, group_size, d)  # (..., n_groups, g, d)
    codes, scale, zero = _asym_last(kg.transpose(-1, -2), bits)  # codes (..., n_groups, d, g)
    return codes.transpose(-1, -2).reshape(k.shape), scale, zero


def dequantize_keys_per_channel(q, scale, zero, group_size):
    """Exercise 3.3: token t, channel c is q[t, c] * scale[t // group_size, c] +
    zero[t // group_size, c], in float32."""
    _require_uint8("q", q)
    if q.dim() < 2:
        raise ValueError(f"q must have at least 2 dimensions, got shape {tuple(q.shape)}")
    _require_int("group_size", group_size, 1)
    T, d = q.shape[-2], q.shape[-1]
    if T % group_size:
        raise ValueError(f"group_size must divide the number of tokens {T}, got {group_size}")
    groups = (*q.shape[:-2], T // group_size, d)
    _require_shape("scale", scale, groups)
    _require_shape("zero", zero, groups)
    qg = q.double().reshape(*q.shape[:-2], T // group_size, group_size, d)  # (..., n_groups, g, d)
    x = qg * scale.double().unsqueeze(-2) + zero.double().unsqueeze(-2)
    return x.reshape(q.shape).float()


def quantize_fp8(x, per_head=False, scale=None, dtype=torch.float8_e4m3fn):
    """Exercise 3.7: s = max |x| / M (1 where that is 0), per tensor () or per KV head
    (B, H_kv, 1, 1), or the given scale; codes = E4M3 nearest to x / s, saturated at +-M."""
    _require_float("x", x, min_dim=4)
    if x.dim() != 4:
        raise ValueError(f"x must be (B, H_kv, T, d), got shape {tuple(x.shape)}")
    if dtype not in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        raise TypeError(f"dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {dtype}")
    name = str(dtype).removeprefix("torch.")
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be positive and finite, got {scale}")
        if per_head:
            raise ValueError("scale is one number for the whole tensor; per_head must be False")
        s = torch.tensor(float(scale), dtype=torch.float64)
    else:
        s = fp8_scales(x, per_head, name)
    ratio = (x.float().double() / s.expand(x.shape)).flatten().tolist()
    codes = torch.tensor([fp8_round(r, name) for r in ratio], dtype=torch.float64).reshape(x.shape)
    return codes.to(dtype), s.float()  # the codes are on the grid: the cast only stores them


def dequantize_fp8(codes, scale):
    """Exercise 3.7: codes * scale in float32; scale () or (B, H_kv, 1, 1)."""
    if not isinstance(codes, torch.Tensor) or codes.dtype not in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        raise TypeError(f"codes must be a float8_e4m3fn or float8_e4m3fnuz tensor, got "
                        f"{getattr(codes, 'dtype', type(codes).__name__)}")
    if codes.dim() != 4:
        raise ValueError(f"codes must be (B, H_kv, T, d), got shape {tuple(codes.shape)}")
    _require_float("scale", scale, min_dim=0)
    if tuple(scale.shape) not in ((), (*codes.shape[:2], 1, 1)):
        raise ValueError(f"scale must have shape () or {(*codes.shape[:2], 1, 1)}, got {tuple(scale.shape)}")
    return (codes.double() * scale.double()).float()


# Every function one exercise may call of another (3.6 and 3.8 are called by none).
SUBSTITUTES = {
    "quantize_int8": quantize_int8,
    "dequantize_int8": dequantize_int8,
    "quantize_asym": quantize_asym,
    "dequantize_asym": dequantize_asym,
    "quantize_keys_per_channel": quantize_keys_per_channel,
    "dequantize_keys_per_channel": dequantize_keys_per_channel,
    "pack_int4": pack_int4,
    "unpack_int4": unpack_int4,
    "quantized_bytes_per_token": quantized_bytes_per_token,
    "quantize_fp8": quantize_fp8,
    "dequantize_fp8": dequantize_fp8,
}
