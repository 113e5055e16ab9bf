"""Independent references for Chapter 1: the formulas written out the slow, obvious
way (a loop over layers, explicit unit tables), never imported from a notebook."""

BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
NIBBLE_DTYPES = {"int4"}  # half a byte per element
UNIT_FACTORS = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}


def elements_to_bytes(elements: int, dtype: str) -> int:
    if dtype in NIBBLE_DTYPES:
        assert elements % 2 == 0
        return elements // 2
    return elements * BYTES[dtype]


def bytes_per_token(num_layers, num_kv_heads, head_dim, dtype):
    elements = 0
    for _layer in range(num_layers):
        elements += num_kv_heads * head_dim  # keys
        elements += num_kv_heads * head_dim  # values
    return elements_to_bytes(elements, dtype)


def cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, dtype):
    return bytes_per_token(num_layers, num_kv_heads, head_dim, dtype) * seq_len * batch_size


def convert(num_bytes, unit):
    return num_bytes / UNIT_FACTORS[unit]


def max_tokens(device_bytes, weight_bytes, bytes_per_tok, reserve_bytes=0, page_size=None):
    free = device_bytes - weight_bytes - reserve_bytes
    step = page_size or 1
    # Count whole pages (or tokens) with exact integers: no float division anywhere.
    pages = max(free, 0) // (bytes_per_tok * step)
    return pages * step


def max_batch(device_bytes, weight_bytes, bytes_per_tok, seq_len, reserve_bytes=0, page_size=None):
    free = max(device_bytes - weight_bytes - reserve_bytes, 0)
    tokens_per_seq = seq_len
    if page_size:
        pages = seq_len // page_size + (1 if seq_len % page_size else 0)
        tokens_per_seq = pages * page_size
    return free // (tokens_per_seq * bytes_per_tok)


def variant_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, dtype,
                  kv_lora_rank=0, rope_head_dim=0, window=None, num_global_layers=0):
    total_elements = 0
    for layer in range(num_layers):
        is_local = window is not None and layer < num_layers - num_global_layers
        kept = min(seq_len, window) if is_local else seq_len
        per_token = (kv_lora_rank + rope_head_dim) if kv_lora_rank else 2 * num_kv_heads * head_dim
        total_elements += kept * per_token
    return elements_to_bytes(total_elements * batch_size, dtype)


# -- References for the exercises' own API (grading.judge.substitute) --------------------
# While a test of one exercise runs, the other exercises' functions in the student's
# notebook are these: the formulas above with the errors each docstring promises.


def _require_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def checked_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype="fp16"):
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
        _require_int(name, value)
    if dtype not in BYTES and dtype not in NIBBLE_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(BYTES) + sorted(NIBBLE_DTYPES)}, got {dtype!r}")
    return bytes_per_token(num_layers, num_kv_heads, head_dim, dtype)


def checked_max_tokens(device_bytes, weight_bytes, bytes_per_token, reserve_bytes=0, page_size=None):
    _require_int("device_bytes", device_bytes)
    _require_int("weight_bytes", weight_bytes, 0)
    _require_int("reserve_bytes", reserve_bytes, 0)
    _require_int("bytes_per_token", bytes_per_token)
    if page_size is not None:
        _require_int("page_size", page_size)
    return max_tokens(device_bytes, weight_bytes, bytes_per_token, reserve_bytes, page_size)


SUBSTITUTES = {
    "kv_bytes_per_token": checked_bytes_per_token,
    "max_tokens": checked_max_tokens,
}
