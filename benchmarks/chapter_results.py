"""What the chapters quote from committed benchmark results, read in one place.

A chapter that reports a benchmark run (a run too long to repeat while the book builds)
reads the committed file through this module and shows the reader the numbers, not the
bookkeeping of finding them: which file, which run, which record is absent. Every value
comes back as text ready to glue, "(not measured)" where the file lacks it, so a page
builds, and says so, before any run is committed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from grading.layout import BENCH_RESULTS

NOT_MEASURED = "(not measured)"

# Chapter 9: the RoPE methods measured on the real model, in the order the page shows them.
ROPE_METHODS = {"none": "no scaling", "pi": "position interpolation", "ntk": "NTK-aware", "yarn": "YaRN"}
ROPE_PPL_FILE = BENCH_RESULTS / "09_rope_scaling_ppl.json"


def rope_scaling_ppl(path: Path = ROPE_PPL_FILE) -> dict:
    """Chapter 9's perplexity curves (``python -m benchmarks.bench_09_rope_scaling --write``).

    Returns ``about`` (lines saying what was measured, when and on what), ``have`` (the
    methods measured, in page order), ``names``, the file's ``data`` (None without a file),
    ``table`` (rows: method, perplexity at L, at 2L, their ratio, of the tokens from L to
    2L alone) and ``glue`` (the values the prose quotes, as text)."""
    data = json.loads(path.read_text()) if path.exists() else None
    have = [m for m in ROPE_METHODS if data and m in data["ppl"]]
    out: dict = {"names": ROPE_METHODS, "have": have, "data": data, "about": [], "table": [], "glue": {}}
    if not have:
        out["about"].append("No measurement is committed yet: run `.venv/bin/python -m "
                            f"benchmarks.bench_09_rope_scaling --write`, which writes "
                            f"benchmarks/results/{path.name}, and rebuild the book.")
        for m in ROPE_METHODS:
            for key in (f"second_{m}", f"ratio_{m}", f"ppl_{m}_L", f"ppl_{m}_2L"):
                out["glue"][key] = NOT_MEASURED
        out["glue"]["trained_level"] = out["glue"]["none_leaves"] = NOT_MEASURED
        return out

    dates = data.get("dates", {m: data["date"] for m in have})
    machines = data.get("machines", {m: data["machine"] for m in have})
    runs = {m: (dates[m], machines[m]) for m in have}
    for run in sorted(set(runs.values())):
        which = ", ".join(ROPE_METHODS[m] for m in have if runs[m] == run)
        out["about"].append(f"{which}: measured {run[0]} on {run[1]}")
    out["about"].append(f"{data['model']}; {data['text']}")
    missing = [ROPE_METHODS[m] for m in ROPE_METHODS if m not in have]
    if missing:
        out["about"].append("not measured in this file yet: " + ", ".join(missing))

    trained, s, ppl = data["trained_len"], data["factor"], data["ppl"]
    at = data["lengths"].index(trained)
    for m in ROPE_METHODS:
        if m not in ppl:
            for key in (f"second_{m}", f"ratio_{m}", f"ppl_{m}_L", f"ppl_{m}_2L"):
                out["glue"][key] = NOT_MEASURED
            continue
        # the perplexity of the tokens from L to 2L alone, from the two prefix perplexities
        n_all, n_first = s * trained - 1, trained - 1
        second = math.exp((math.log(ppl[m][-1]) * n_all - math.log(ppl[m][at]) * n_first) / (n_all - n_first))
        out["table"].append((ROPE_METHODS[m], ppl[m][at], ppl[m][-1], ppl[m][-1] / ppl[m][at], second))
        out["glue"].update({f"second_{m}": f"{second:.2f}", f"ratio_{m}": f"{ppl[m][-1] / ppl[m][at]:.2f}",
                            f"ppl_{m}_L": f"{ppl[m][at]:.2f}", f"ppl_{m}_2L": f"{ppl[m][-1]:.2f}"})
    if "none" in ppl:
        nll, bin_ = data["nll_by_position"]["none"], data["bin"]
        level = sum(nll[: trained // bin_]) / (trained // bin_)  # mean loss inside the trained context
        leaves = next((j for j in range(trained // bin_, len(nll)) if nll[j] > level + 0.5), None)
        out["glue"]["trained_level"] = f"{level:.2f}"
        out["glue"]["none_leaves"] = f"{leaves * bin_:,}" if leaves is not None else NOT_MEASURED
    else:
        out["glue"]["trained_level"] = out["glue"]["none_leaves"] = NOT_MEASURED
    return out


def rope_scaling_table(summary: dict) -> str:
    """The table of :func:`rope_scaling_ppl` as Markdown (the page renders it as HTML)."""
    data = summary["data"]
    trained, s = data["trained_len"], data["factor"]
    lines = [f"| RoPE | ppl at {trained:,} | ppl at {s * trained:,} | ratio | tokens {trained:,} to "
             f"{s * trained:,} alone |", "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {name} | {at_l:.2f} | {at_2l:.2f} | {ratio:.2f} | {second:.2f} |"
              for name, at_l, at_2l, ratio, second in summary["table"]]
    return "\n".join(lines)


def rope_scaling_figure(summary: dict):
    """Loss by position and perplexity against length, one line per method, the panels
    stacked (a phone shows a figure about 310 px wide) and one legend below both.
    Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    data = summary["data"]
    trained, bin_ = data["trained_len"], data["bin"]
    fig, axes = plt.subplots(2, 1, figsize=(5, 8.4), layout="constrained")
    for m in summary["have"]:
        nll = data["nll_by_position"][m]
        axes[0].plot([bin_ * (j + 0.5) for j in range(len(nll))], nll, label=summary["names"][m])
        axes[1].plot(data["lengths"], data["ppl"][m], "o-", ms=3, label=summary["names"][m])
    for ax in axes:
        ax.axvline(trained, color="gray", ls=":", lw=1)
        ax.set_xticks([4096, 8192, 12288, 16384], ["4K", "8K", "12K", "16K"])
    axes[0].set(xlabel="position", ylabel=f"-log p, mean over {bin_} tokens", title="Loss by position")
    axes[1].set(xlabel="tokens read", ylabel="perplexity of the prefix", title="Perplexity against length",
                yscale="log")
    axes[0].text(trained * 1.02, axes[0].get_ylim()[1] * 0.95, "L", color="gray", va="top")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=10, frameon=False)
    return fig


# Chapter 5: torch.compile'd flash attention, from the newest results file that measured it.
def compiled_flash() -> dict:
    """The run that measured ``flash.compiled_cpu_vs_sdpa_n4096`` (``python -m benchmarks
    --results bench_05``): ``about`` (lines: the file, the machine, the records, the note)
    and ``glue`` (compiled / SDPA, compiled / eager, eager / SDPA, the first call's seconds,
    the machine and the date, as text)."""
    from benchmarks.results import newest_with

    newest = newest_with("flash.compiled_cpu_vs_sdpa_n4096")
    if not newest:
        return {"about": ["No committed results file holds flash.compiled_cpu_vs_sdpa_n4096 yet; on a quiet "
                          "machine run `.venv/bin/python -m benchmarks --results bench_05`, commit the file "
                          "it writes under benchmarks/results/, and rebuild the book."],
                "glue": {"compiled_ratio": NOT_MEASURED, "compiled_over_eager": NOT_MEASURED,
                         "compiled_eager_ratio": NOT_MEASURED, "compiled_first_call": NOT_MEASURED,
                         "compiled_where": "(no run committed)", "compiled_date": "(no run committed)"}}
    run, found = newest
    m = run["machine"]
    threads = m["torch_threads"]
    where = (f"{m['cpu_model']} ({m['cpu_vendor']}), {threads} torch thread{'s' if threads != 1 else ''}, "
             f"{m['blas']}, torch {m['torch']}")

    def shown(name: str, spec: str) -> str:
        value = found.get(name, {}).get("value")
        if value is None or value != value:  # absent, or NaN when inductor failed
            return NOT_MEASURED
        return format(value, spec)

    # The file by its name alone: the student edition has no benchmarks/ to look in.
    about = [f"{run['file']}, {run['date']}: {where}"]
    about += [f"  {name}: {found[name]['value']:.3g}" for name in sorted(found)
              if name.startswith(("flash.compile", "flash.cpu_vs_sdpa"))]
    about.append("  note: " + found["flash.compiled_cpu_vs_sdpa_n4096"]["note"])
    return {"about": about,
            "glue": {"compiled_ratio": shown("flash.compiled_cpu_vs_sdpa_n4096", ".2f"),
                     "compiled_over_eager": shown("flash.compiled_over_eager_n4096", ".2f"),
                     "compiled_eager_ratio": shown("flash.cpu_vs_sdpa_n4096", ".2f"),
                     "compiled_first_call": shown("flash.compile_first_call_s_n4096", ".0f"),
                     "compiled_where": where, "compiled_date": run["date"]}}


# Chapter 7: the Triton kernel against SDPA on a GPU (benchmarks/gpu_07_triton_kernels.py).
GPU_07_FILE = BENCH_RESULTS / "gpu_07_triton_kernels.json"


def gpu_triton(path: Path = GPU_07_FILE) -> dict:
    """``about`` (a line on the run, or on how to make one) and ``table`` (Markdown: one row
    per case, TFLOP/s of the kernel and of SDPA, their ratio, the share of the peak and the
    block configuration), empty without a committed file."""
    if not path.exists():
        # How to make one is the chapter's to say, in the self-study edition only: the
        # student edition, built from the same execution, has no benchmarks/ to run.
        return {"about": ["No GPU results are committed: this book was built without a GPU, so there are no "
                          "measured TFLOP/s in this section."], "table": ""}
    res = json.loads(path.read_text())
    peak = res.get("peak_bf16_tflops")  # None for a GPU whose dense BF16 peak the script does not know
    lines = ["| causal | Triton TFLOP/s | SDPA TFLOP/s | ratio | of peak | BLOCK_M, BLOCK_N, warps, stages |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for row in res["rows"]:
        of_peak = f"{row['triton_tflops'] / peak:.0%}" if peak else "unknown"
        lines.append(f"| {row['causal']} | {row['triton_tflops']:.1f} | {row['sdpa_tflops']:.1f} | "
                     f"{row['ratio']:.2f} | {of_peak} | {row['config']} |")
    return {"about": [f"measured {res['date']} on {res['gpu']} (torch {res['torch']}, triton {res['triton']}, "
                      f"CUDA {res['cuda']})"], "table": "\n".join(lines)}


# Chapter 11: what each cache remembers (benchmarks/bench_11_sparse_attention.py --write).
MEMORY_FILE = BENCH_RESULTS / "11_sparse_attention_memory.json"
# The same harness with the needle run into the text's sentences, the full cache alone.
INLINE_NEEDLE_FILE = BENCH_RESULTS / "11_sparse_attention_memory_n4096_inline_needle.json"
MEMORY_METHODS = {
    "full": "full cache",
    "window": "sinks + window (Ch. 4)",
    "kivi4": "INT4 KIVI (Ch. 3)",
    "h2o": "H2O",
    "snapkv": "SnapKV",
    "quest": "Quest (pages of 16)",
    "moba": "MoBA gate, untrained",
    "quest_kv": "Quest, per KV head",
    "moba_kv": "MoBA, per KV head",
    "quest_kv_dense2": "Quest, per KV head, first two layers dense",
    "snapkv_doc": "SnapKV, question after",
}
MEMORY_BUDGET = "0.25"  # the budget the page compares methods at: a quarter of the tokens
HARNESS_BAR = 0.9  # the full cache's accuracy below which the harness says nothing


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def memory_harness(path: Path = MEMORY_FILE, inline: Path = INLINE_NEEDLE_FILE) -> dict:
    """Chapter 11's pass-key sweep: ``about`` (lines on the run and the ranking at a quarter
    of the tokens), ``data`` (the file, None without one), ``table`` (Markdown: accuracy per
    depth and the mean, per method, at a quarter of the tokens), ``budgets`` (Markdown: the
    mean over depths per budget) and ``glue``: ``acc_<m>`` (the mean at a quarter),
    ``acc_<m>_b<budget x 1000>``, ``acc_<m>_d<depth x 100>`` (at a quarter),
    ``read_<m>`` (the share each KV head reads, at a quarter, where the sweep recorded it),
    ``harness_n``, ``harness_keys``, ``snapkv_over_window``, ``inline_full`` and
    ``inline_keys``, as text. Raises ValueError when the full cache fails the harness's
    own bar (0.9): the page says the harness is valid, so its build stops."""
    data = json.loads(path.read_text()) if path.exists() else None
    glue = {f"acc_{m}": NOT_MEASURED for m in MEMORY_METHODS}
    glue |= {"harness_n": NOT_MEASURED, "harness_keys": "0", "snapkv_over_window": NOT_MEASURED}
    out = {"data": data, "names": MEMORY_METHODS, "about": [], "table": "", "budgets": "", "glue": glue}
    inline_digits = []
    if inline.exists():
        by_key = json.loads(inline.read_text())["trials_accuracy"]["full"][MEMORY_BUDGET]
        inline_digits = [x for at_depth in by_key for x in at_depth]
    glue["inline_keys"] = str(len(inline_digits))
    glue["inline_full"] = f"{_mean(inline_digits):.2f}" if inline_digits else NOT_MEASURED
    if data is None:
        out["about"].append("No measurement is committed yet: run `.venv/bin/python -m "
                            "benchmarks.bench_11_sparse_attention --write`, and rebuild the book.")
        return out

    acc, depths = data["accuracy"], data["depths"]
    have = [m for m in MEMORY_METHODS if m in acc]
    mean = {m: _mean(acc[m][MEMORY_BUDGET]) for m in have}
    if mean["full"] < HARNESS_BAR:
        raise ValueError(f"the full cache reads {mean['full']:.2f}: the harness fails its bar, {HARNESS_BAR}")
    ranked = sorted((m for m in have if m != "full"), key=lambda m: -mean[m])
    out["about"] += [
        f"measured {data['date']} on {data['machine']}",
        f"{data['model']}; n = {data['n']:,} tokens, a pass key of {data['key_digits']} digits, "
        f"{data['trials']} keys per depth",
        f"INT4 KIVI keeps every token at {data['kivi_bytes_fraction']:.0%} of the fp16 bytes",
        "ranked at a quarter of the tokens: " + " > ".join(MEMORY_METHODS[m] for m in ranked),
    ]
    depth_cells = " | ".join(f"D = {d:g}" for d in depths)
    # Older sweeps did not record what each KV head reads; the column appears with the data.
    read = data.get("read_fraction", {})
    read_cell = " read per KV head |" if read else ""
    lines = [f"| method, 25% budget | {depth_cells} | mean |{read_cell}",
             "| --- |" + " ---: |" * (len(depths) + 1 + bool(read))]
    for m in have:
        cells = " | ".join(f"{v:.2f}" for v in acc[m][MEMORY_BUDGET])
        row = f"| {MEMORY_METHODS[m]} | " + cells + f" | {mean[m]:.2f} |"
        if read:
            shares = [x for x in read.get(m, {}).get(MEMORY_BUDGET, []) if x is not None]
            row += f" {sum(shares) / len(shares):.0%} |" if shares else " |"
        lines.append(row)
    out["table"] = "\n".join(lines)
    budgets = [str(b) for b in data["budgets"]]
    lines = ["| method, mean over depths | " + " | ".join(f"{float(b):.1%} kept" for b in budgets) + " |",
             "| --- |" + " ---: |" * len(budgets)]
    lines += [f"| {MEMORY_METHODS[m]} | " + " | ".join(f"{_mean(acc[m][b]):.2f}" for b in budgets) + " |"
              for m in have]
    out["budgets"] = "\n".join(lines)

    for m in have:
        glue[f"acc_{m}"] = f"{mean[m]:.2f}"
        for b in budgets:
            glue[f"acc_{m}_b{round(float(b) * 1000)}"] = f"{_mean(acc[m][b]):.2f}"
        for d, value in zip(depths, acc[m][MEMORY_BUDGET]):
            glue[f"acc_{m}_d{round(d * 100)}"] = f"{value:.2f}"
        shares = [x for x in read.get(m, {}).get(MEMORY_BUDGET, []) if x is not None]
        if shares:  # the share of the cache each KV head reads, at a quarter of the tokens
            glue[f"read_{m}"] = f"{sum(shares) / len(shares):.0%}"
    glue["harness_n"] = f"{data['n']:,}"
    glue["harness_keys"] = str(data["trials"] * len(depths))
    if "snapkv" in mean and mean.get("window"):
        glue["snapkv_over_window"] = f"{mean['snapkv'] / mean['window']:.1f}"
    return out


def memory_harness_figure(summary: dict):
    """Accuracy against depth at a quarter of the tokens, one line per method, the legend
    below the axes (a phone shows a figure about 310 px wide). Returns the figure."""
    import matplotlib.pyplot as plt

    data = summary["data"]
    fig, ax = plt.subplots(figsize=(5, 5.6))
    for m, label in summary["names"].items():
        if m in data["accuracy"]:
            ax.plot(data["depths"], data["accuracy"][m][MEMORY_BUDGET], "o-", ms=4, label=label)
    ax.set_xlabel("depth of the needle (fraction of the text)")
    ax.set_ylabel("accuracy on the key's digits")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("What each cache remembers\nat 25% of the tokens")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    return fig


# Chapter 12: the chapter's scheduler driving SmolLM2 on a CPU, without and with prefix hits.
SERVING_FILE = BENCH_RESULTS / "12_serving_smollm2.json"


def serving_smollm2(path: Path = SERVING_FILE) -> dict:
    """Chapter 12's sweep over shared-prompt lengths (``python -m benchmarks.bench_12_serving
    --write``). Returns ``about`` (what was measured, when and on what), ``table`` (rows:
    shared prompt, tokens computed without and with hits, forward passes without and with,
    the wall-time speedup, greedy matches) and ``glue`` (the values the prose quotes)."""
    data = json.loads(path.read_text()) if path.exists() else None
    out: dict = {"data": data, "about": [], "table": [], "glue": {}}
    keys = ("speedup_short", "speedup_long", "short", "long", "matches", "requests")
    if not data:
        out["about"].append("No measurement is committed yet: run `.venv/bin/python -m "
                            f"benchmarks.bench_12_serving --write`, which writes benchmarks/results/{path.name}, "
                            "and rebuild the book.")
        out["glue"] = {key: NOT_MEASURED for key in keys}
        return out
    out["about"].append(f"measured {data['date']} on {data['machine']}; {data['model']}; {data['questions']} "
                        f"questions, {data['output']} tokens each, pages of {data['page_size']}, a budget of "
                        f"{data['token_budget']} tokens per step; wall time: median of {data['rounds']} paired "
                        "rounds")
    lengths = sorted(data["lengths"], key=int)
    matches = 0
    for length in lengths:
        row = data["lengths"][length]
        off, on = row["uncached"], row["cached"]
        matches += off["matches"] + on["matches"]
        out["table"].append((length, f"{off['computed']:,}", f"{on['computed']:,}", str(off["passes"]),
                             str(on["passes"]), f"{row['speedup']:.2f}x",
                             f"{off['matches'] + on['matches']} of {2 * data['questions']}"))
    short, long = data["lengths"][lengths[0]], data["lengths"][lengths[-1]]
    out["glue"] = {"speedup_short": f"{short['speedup']:.1f}", "speedup_long": f"{long['speedup']:.1f}",
                   "short": lengths[0], "long": f"{int(lengths[-1]):,}", "matches": str(matches),
                   "requests": str(2 * data["questions"] * len(lengths))}
    return out


# Chapter 14: SmolLM2 drafting for itself, over prompt lengths and draft budgets.
SPECULATIVE_FILE = BENCH_RESULTS / "14_speculative_decoding_smollm2.json"


def _rate(counts: dict) -> float:
    return counts["accepted"] / counts["drafted"] if counts["drafted"] else 0.0


def speculative_smollm2(path: Path = SPECULATIVE_FILE) -> dict:
    """Chapter 14's sweep (``python -m benchmarks.bench_14_speculative_decoding --write``).

    Returns ``about`` (what was measured, when and on what), ``lengths`` and ``windows``
    (ints, in order), ``rates`` ({length: [acceptance rate of each window]}), ``quest``
    ({length: the Quest draft's acceptance rate}), ``table`` (rows: prompt, each window's
    rate, Quest's) and ``glue`` (the values the prose quotes, as text)."""
    data = json.loads(path.read_text()) if path.exists() else None
    out: dict = {"data": data, "about": [], "lengths": [], "windows": [], "rates": {}, "quest": {},
                 "table": [], "glue": {}}
    keys = ("sweep_equal", "sweep_runs", "sweep_long", "sweep_short", "sweep_window", "sweep_rate_short",
            "sweep_rate_long", "sweep_quest_long")
    if not data:
        out["about"].append("No measurement is committed yet: run `.venv/bin/python -m "
                            f"benchmarks.bench_14_speculative_decoding --write`, which writes "
                            f"benchmarks/results/{path.name}, and rebuild the book.")
        out["glue"] = {key: NOT_MEASURED for key in keys}
        return out
    out["about"].append(f"measured {data['date']} on {data['machine']}; {data['model']}; {data['new_tokens']} "
                        f"greedy tokens, gamma = {data['gamma']}, {data['num_sink']} sinks beside each window; "
                        f"Quest: {data['quest_pages']} pages of {data['quest_page']} tokens")
    out["lengths"] = sorted(int(n) for n in data["lengths"])
    out["windows"] = list(data["windows"])
    runs = [c for row in data["lengths"].values() for c in row.values()]
    for n in out["lengths"]:
        row = data["lengths"][str(n)]
        out["rates"][n] = [_rate(row[str(w)]) for w in out["windows"]]
        out["quest"][n] = _rate(row["quest"])
        out["table"].append((f"{n:,}", *(f"{r:.2f}" for r in out["rates"][n]), f"{out['quest'][n]:.2f}"))
    short, long = out["lengths"][0], out["lengths"][-1]
    at = out["windows"].index(data["quest_pages"] * data["quest_page"])
    out["glue"] = {"sweep_equal": str(sum(c["greedy"] for c in runs)), "sweep_runs": str(len(runs)),
                   "sweep_long": f"{long:,}", "sweep_short": f"{short:,}", "sweep_window": str(out["windows"][at]),
                   "sweep_rate_short": f"{out['rates'][short][at]:.2f}",
                   "sweep_rate_long": f"{out['rates'][long][at]:.2f}", "sweep_quest_long": f"{out['quest'][long]:.2f}"}
    return out
