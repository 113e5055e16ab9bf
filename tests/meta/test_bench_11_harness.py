"""Chapter 11's memory harness (benchmarks/bench_11_sparse_attention.py): methods are
compared at the bytes a KV head reads, and the question-agnostic row reads the question
after compressing the document. The sweep itself takes many minutes; these checks run
its parts on random tensors, and one prompt of 320 tokens through the real model."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import bench_11_sparse_attention as bench
from benchmarks.chapter_results import memory_harness
from benchmarks.solutions import load_solutions

# The real model's load and one short prompt take about 30 CPU seconds; a shared machine
# stretches that past the default per-test limit.
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def sol():
    return load_solutions("11_sparse_attention")


def _layer(H_kv=3, N=640, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"k": torch.randn(1, H_kv, N, d, generator=g)}


def _kv_share(mask, G):
    """(H, T, N) -> the mean share of N that a KV head reads per query (union over its group)."""
    H, T, N = mask.shape
    return mask.view(H // G, G, T, N).any(dim=1).sum(-1).double().mean().item() / N


@pytest.mark.parametrize("method", ["quest", "moba"])
def test_per_kv_head_selection_reads_the_budget_and_per_query_head_may_read_more(sol, method):
    G, budget = 3, 160  # a quarter of 640 tokens
    layer = _layer()
    q = torch.randn(1, 3 * G, 4, 16, generator=torch.Generator().manual_seed(1))  # (1, H, T, d)
    bounds = sol.page_bounds(layer["k"], bench.PAGE) if method == "quest" else None
    per_head = bench.read_mask(method, q, layer, budget, sol, bounds)
    per_kv = bench.read_mask(f"{method}_kv", q, layer, budget, sol, bounds)
    assert _kv_share(per_kv, G) <= budget / 640  # within the budget
    # one choice per group: every query head of a KV head reads the same tokens
    assert (per_kv.view(3, G, 4, 640) == per_kv.view(3, G, 4, 640)[:, :1]).all()
    # random query heads disagree, so the union over a group exceeds the budget
    assert _kv_share(per_head, G) > budget / 640
    last = 640 - 1  # the newest page or block is always read
    assert per_kv[..., last].all() and per_head[..., last].all()


def test_the_group_choice_is_the_best_score_over_its_heads():
    score = torch.tensor([[[0.0, 5.0, 1.0, 2.0]], [[3.0, 0.0, 1.0, 0.0]]])  # (H=2, T=1, C=4), one group
    chosen = bench._top_per_kv_head(score, 2, 2)
    assert chosen[0, 0].tolist() == [True, True, False, False]  # maxima 3, 5, 1, 2
    assert torch.equal(chosen[0], chosen[1])


@pytest.fixture(scope="module")
def tiny_sweep():
    """One key at one depth, 320 tokens, every method at a quarter: a minute on a laptop."""
    torch.manual_seed(0)
    return bench.measure(n=320, depths=(0.5,), trials=1, budgets=(0.25,), log=lambda *_: None)


def test_a_tiny_sweep_records_accuracy_and_reads_for_every_method(tiny_sweep):
    assert set(tiny_sweep["accuracy"]) == set(bench.METHODS)
    read = {m: tiny_sweep["read_fraction"][m]["0.25"][0] for m in bench.METHODS}
    assert read["full"] == read["kivi4"] == 1.0
    assert 0.24 < read["window"] <= 0.25  # the budget, rounded down to whole tokens
    for m in ("h2o", "snapkv", "snapkv_doc"):  # evictions keep the budget, the question included
        assert read[m] == pytest.approx(read["window"], abs=1e-9), m
    for m in ("quest_kv", "moba_kv"):
        assert read[m] <= 0.25 + 1e-9, m
    assert read["quest_kv_dense2"] > read["quest_kv"]  # its first two layers read everything
    names = {r.name for r in bench.memory_records(tiny_sweep)}
    assert "evict.copy_acc_snapkv_doc_b25_n320" in names and "evict.copy_acc_quest_kv_b25_n320" in names


def test_the_chapter_table_shows_what_each_kv_head_reads(tiny_sweep, tmp_path):
    sweep = dict(tiny_sweep, budgets=[0.125, 0.25, 0.5])
    for key in ("accuracy", "read_fraction"):  # the page quotes every budget
        sweep[key] = {m: {b: v["0.25"] for b in ("0.125", "0.25", "0.5")} for m, v in tiny_sweep[key].items()}
    sweep["accuracy"]["full"] = {b: [1.0] for b in ("0.125", "0.25", "0.5")}  # the harness's bar
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep))
    memory = memory_harness(path, inline=tmp_path / "absent.json")
    assert "read per KV head" in memory["table"].splitlines()[0]
    assert "| SnapKV, question after |" in memory["table"]
