"""Graders for Chapter 1 (exercises/01_kv_memory.ipynb) against tests/references.

Tolerances: every answer but one is an integer count (bytes, tokens, pages, layers,
sequences) and must be exact. ``convert_bytes`` returns a float: a correct conversion is
one division by a power of 1000 or 1024, within one rounding (1.1e-16 relative) of the
fp64 reference, so 1e-12 relative admits any correct order of operations, while the
mistake the exercise is about (GB for GiB) is 2.4% to 10% off.
"""

import pytest

from grading.compare import GradingFailure, assert_equal, assert_raises, call_text
from tests.references import ref_01_kv_memory as ref

# (name, num_layers, num_kv_heads, head_dim): published configs and odd shapes.
SHAPES = [
    ("worked-example-L64-Hkv8-D128", 64, 8, 128),
    ("llama3-8b-L32-Hkv8-D128", 32, 8, 128),
    ("smollm2-135m-L30-Hkv3-D64", 30, 3, 64),
    ("mqa-L1-Hkv1-D1", 1, 1, 1),
    ("odd-L7-Hkv5-D96", 7, 5, 96),
]
DTYPES = ["fp32", "fp16", "bf16", "fp8", "int8", "int4"]
GIB = 2**30


def shape_ids(shapes):
    return [s[0] for s in shapes]


@pytest.mark.ex1_1
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,layers,kv_heads,head_dim", SHAPES, ids=shape_ids(SHAPES))
def test_bytes_per_token(nb, name, layers, kv_heads, head_dim, dtype):
    got = nb.kv_bytes_per_token(layers, kv_heads, head_dim, dtype)
    assert_equal(got, ref.bytes_per_token(layers, kv_heads, head_dim, dtype),
                 call_text("kv_bytes_per_token", layers, kv_heads, head_dim, dtype))
    if not isinstance(got, int):
        raise GradingFailure(f"kv_bytes_per_token returned {type(got).__name__}; a byte count is an int")


@pytest.mark.ex1_1
def test_bytes_per_token_worked_example(nb):
    """The chapter's worked example, written out: 256 KiB per token."""
    assert_equal(nb.kv_bytes_per_token(64, 8, 128, "fp16"), 256 * 1024, "kv_bytes_per_token(64, 8, 128, 'fp16')")


@pytest.mark.ex1_1
@pytest.mark.parametrize(
    "args,exc,names",
    [
        ((0, 8, 128, "fp16"), ValueError, "num_layers"),
        ((32, -1, 128, "fp16"), ValueError, "num_kv_heads"),
        ((32, 8, 128.0, "fp16"), TypeError, "head_dim"),
        ((32, 8, True, "fp16"), TypeError, "head_dim"),
        ((32, 8, 128, "float16"), ValueError, "dtype"),
    ],
    ids=["zero-layers", "negative-kv-heads", "float-head-dim", "bool-head-dim", "unknown-dtype"],
)
def test_bytes_per_token_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.kv_bytes_per_token, *args, exc=exc, names=names)


CACHE_CASES = [
    ("worked-32k", 64, 8, 128, 32_768, 1, "fp16"),
    ("worked-128k", 64, 8, 128, 131_072, 1, "fp16"),
    ("worked-1m", 64, 8, 128, 1_048_576, 1, "fp16"),
    ("llama3-70b-B64-N8192-fp8", 80, 8, 128, 8192, 64, "fp8"),
    ("empty-cache", 32, 8, 128, 0, 4, "bf16"),
    ("huge-past-2^53", 128, 128, 256, 10**12, 1000, "fp32"),
]


@pytest.mark.ex1_2
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("name,layers,kv_heads,head_dim,seq_len,batch,dtype", CACHE_CASES,
                         ids=[c[0] for c in CACHE_CASES])
def test_cache_bytes(nb, name, layers, kv_heads, head_dim, seq_len, batch, dtype):
    got = nb.kv_cache_bytes(layers, kv_heads, head_dim, seq_len, batch, dtype)
    assert_equal(got, ref.cache_bytes(layers, kv_heads, head_dim, seq_len, batch, dtype),
                 call_text("kv_cache_bytes", layers, kv_heads, head_dim, seq_len, batch, dtype))


@pytest.mark.ex1_2
def test_cache_bytes_worked_example_in_gib(nb):
    for seq_len, gib in [(32_768, 8), (131_072, 32), (1_048_576, 256)]:
        assert_equal(nb.kv_cache_bytes(64, 8, 128, seq_len, 1, "fp16"), gib * GIB,
                     f"kv_cache_bytes(64, 8, 128, {seq_len})")


@pytest.mark.ex1_2
@pytest.mark.parametrize("args,names", [((32, 8, 128, -1, 1), "seq_len"), ((32, 8, 128, 16, 0), "batch_size")],
                         ids=["negative-seq-len", "zero-batch"])
def test_cache_bytes_rejects_bad_input(nb, args, names):
    assert_raises(nb.kv_cache_bytes, *args, exc=ValueError, names=names)


@pytest.mark.ex1_3
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("unit", list(ref.UNIT_FACTORS))
@pytest.mark.parametrize("num_bytes", [0, 1, 999, 2**30, 10**9, 141 * 10**9, 3 * 2**40 + 17])
def test_convert_bytes(nb, num_bytes, unit):
    got = nb.convert_bytes(num_bytes, unit)
    expected = ref.convert(num_bytes, unit)
    call = call_text("convert_bytes", num_bytes, unit)
    if not isinstance(got, float):
        raise GradingFailure(f"{call} returned {type(got).__name__}; expected a float")
    if abs(got - expected) > 1e-12 * max(1.0, abs(expected)):
        raise GradingFailure(f"{call} is wrong\n  expected: {expected!r}\n  got:      {got!r}")


@pytest.mark.ex1_3
@pytest.mark.parametrize("args,names", [((100, "GiBs"), "unit"), ((100, "gb"), "unit"), ((-1, "GB"), "num_bytes")],
                         ids=["unknown-unit", "lowercase-unit", "negative-bytes"])
def test_convert_bytes_rejects_bad_input(nb, args, names):
    assert_raises(nb.convert_bytes, *args, exc=ValueError, names=names)


H100 = 80 * 10**9
H200 = 141 * 10**9
BUDGET_CASES = [
    # name, device, weights, bytes/token, reserve, page_size
    ("h200-llama3-8b-fp16", H200, 16 * 10**9, 131_072, 10 * 10**9, None),
    ("h200-llama3-8b-page16", H200, 16 * 10**9, 131_072, 10 * 10**9, 16),
    ("h100-weights-do-not-fit", H100, 141 * 10**9, 327_680, 0, 16),
    ("exact-fit", 1000, 0, 10, 0, None),
    ("one-byte-short", 999, 0, 10, 0, None),
    ("page-of-7", 10**6, 0, 3, 0, 7),
    ("page-bigger-than-budget", 100, 0, 1, 0, 128),
    ("float-rounding-trap", 3 * 2**58 - 1, 0, 3, 0, None),  # float division rounds up to 2**58
    ("float-rounding-trap-2", 10**17 - 1, 0, 10**9 - 7, 0, None),
]


@pytest.mark.ex1_4
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,device,weights,bpt,reserve,page", BUDGET_CASES, ids=[c[0] for c in BUDGET_CASES])
def test_max_tokens(nb, name, device, weights, bpt, reserve, page):
    got = nb.max_tokens(device, weights, bpt, reserve_bytes=reserve, page_size=page)
    assert_equal(got, ref.max_tokens(device, weights, bpt, reserve, page),
                 call_text("max_tokens", device, weights, bpt, reserve_bytes=reserve, page_size=page))
    if not isinstance(got, int):
        raise GradingFailure(f"max_tokens returned {type(got).__name__}; a token count is an int")


@pytest.mark.ex1_4
@pytest.mark.parametrize(
    "kwargs,names",
    [
        (dict(device_bytes=0, weight_bytes=0, bytes_per_token=1), "device_bytes"),
        (dict(device_bytes=10, weight_bytes=0, bytes_per_token=0), "bytes_per_token"),
        (dict(device_bytes=10, weight_bytes=0, bytes_per_token=1, page_size=0), "page_size"),
        (dict(device_bytes=10, weight_bytes=-5, bytes_per_token=1), "weight_bytes"),
    ],
    ids=["zero-device", "zero-bytes-per-token", "zero-page-size", "negative-weights"],
)
def test_max_tokens_rejects_bad_input(nb, kwargs, names):
    assert_raises(nb.max_tokens, exc=ValueError, names=names, **kwargs)


@pytest.mark.ex1_6
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize(
    "device,weights,bpt,seq_len,reserve,page",
    [
        (H200, 16 * 10**9, 131_072, 32_768, 10 * 10**9, None),
        (H200, 16 * 10**9, 131_072, 32_769, 10 * 10**9, 16),
        (H100, 16 * 10**9, 131_072, 1_000_000, 0, 16),
        (1000, 0, 1, 10, 0, 16),
        (10**6, 0, 3, 17, 5, 8),
    ],
    ids=["h200-32k", "h200-32k+1-page16", "h100-1m-does-not-fit", "page-rounds-up", "odd-budget"],
)
def test_max_batch_size(nb, device, weights, bpt, seq_len, reserve, page):
    got = nb.max_batch_size(device, weights, bpt, seq_len, reserve_bytes=reserve, page_size=page)
    assert_equal(got, ref.max_batch(device, weights, bpt, seq_len, reserve, page),
                 call_text("max_batch_size", device, weights, bpt, seq_len, reserve_bytes=reserve, page_size=page))


@pytest.mark.ex1_6
@pytest.mark.parametrize(
    "kwargs,names",
    [
        (dict(seq_len=0), "seq_len"),
        (dict(page_size=0), "page_size"),
        (dict(device_bytes=0), "device_bytes"),
        (dict(weight_bytes=-1), "weight_bytes"),
    ],
    ids=["zero-seq-len", "zero-page-size", "zero-device", "negative-weights"],
)
def test_max_batch_size_rejects_bad_input(nb, kwargs, names):
    args = dict(device_bytes=10**6, weight_bytes=0, bytes_per_token=4, seq_len=16) | kwargs
    assert_raises(nb.max_batch_size, exc=ValueError, names=names, **args)


VARIANTS = [
    # id, config kwargs (besides name)
    ("mha-L32-H32-D128", dict(num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128)),
    ("gqa-llama3-8b", dict(num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128)),
    ("mqa-L32-D128", dict(num_layers=32, num_heads=32, num_kv_heads=1, head_dim=128)),
    ("mla-deepseek-v3",
     dict(num_layers=61, num_heads=128, num_kv_heads=128, head_dim=128, kv_lora_rank=512, rope_head_dim=64)),
    ("swa-all-local-mistral", dict(num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, window=4096)),
    ("swa-half-global-gemma2-9b",
     dict(num_layers=42, num_heads=16, num_kv_heads=8, head_dim=256, window=4096, num_global_layers=21)),
    ("swa-window-1", dict(num_layers=3, num_heads=2, num_kv_heads=1, head_dim=2, window=1, num_global_layers=1)),
]


@pytest.mark.ex1_5
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("seq_len", [0, 1, 4095, 4096, 4097, 131_072])
@pytest.mark.parametrize("vid,cfg", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_cache_bytes_for_variants(nb, vid, cfg, seq_len):
    config = nb.AttentionConfig(name=vid, **cfg)
    for batch, dtype in [(1, "fp16"), (3, "fp8")]:
        got = nb.cache_bytes_for(config, seq_len, batch, dtype)
        expected = ref.variant_bytes(seq_len=seq_len, batch_size=batch, dtype=dtype,
                                     **{k: v for k, v in cfg.items() if k != "num_heads"})
        assert_equal(got, expected,
                     f"cache_bytes_for(AttentionConfig({vid}), seq_len={seq_len}, batch_size={batch}, dtype={dtype!r})")


@pytest.mark.ex1_5
def test_cache_bytes_for_rejects_bad_window(nb):
    config = nb.AttentionConfig(name="bad", num_layers=4, num_heads=4, num_kv_heads=4, head_dim=8, window=0)
    assert_raises(nb.cache_bytes_for, config, 16, exc=ValueError, names="window")
