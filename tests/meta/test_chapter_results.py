"""What the chapters quote from committed results (benchmarks/chapter_results.py)."""

from __future__ import annotations

import json

import pytest

from benchmarks.chapter_results import NOT_MEASURED, memory_harness


def _sweep(full: list[float], window: list[float]) -> dict:
    budgets = ("0.125", "0.25", "0.5")
    return {"date": "2026-12-02", "machine": "a test", "model": "none", "n": 4096, "key_digits": 6,
            "trials": 2, "depths": [0.1, 0.9], "budgets": [float(b) for b in budgets],
            "kivi_bytes_fraction": 0.28,
            "accuracy": {"full": {b: full for b in budgets}, "window": {b: window for b in budgets},
                         "snapkv": {b: [0.5, 1.0] for b in budgets}}}


def test_the_harness_glues_what_the_file_holds(tmp_path):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(_sweep([1.0, 1.0], [0.0, 1.0])))
    memory = memory_harness(path, inline=tmp_path / "absent.json")
    glue = memory["glue"]
    assert glue["acc_full"] == "1.00" and glue["acc_window"] == "0.50"
    assert glue["acc_window_d10"] == "0.00" and glue["acc_window_d90"] == "1.00"
    assert glue["acc_snapkv_b500"] == "0.75" and glue["snapkv_over_window"] == "1.5"
    assert glue["harness_n"] == "4,096" and glue["harness_keys"] == "4"
    assert glue["acc_quest"] == NOT_MEASURED and glue["inline_full"] == NOT_MEASURED
    assert "SnapKV > sinks + window" in memory["about"][-1]


def test_a_harness_whose_full_cache_fails_its_bar_stops_the_page(tmp_path):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(_sweep([0.5, 1.0], [0.0, 1.0])))
    with pytest.raises(ValueError, match="fails its bar"):
        memory_harness(path)


def test_without_a_sweep_every_number_says_not_measured(tmp_path):
    memory = memory_harness(tmp_path / "absent.json", inline=tmp_path / "absent.json")
    assert memory["data"] is None and "No measurement" in memory["about"][0]
    assert memory["glue"]["acc_full"] == NOT_MEASURED


def test_the_committed_sweep_passes_its_bar():
    memory = memory_harness()
    assert memory["data"] is not None and float(memory["glue"]["acc_full"]) >= 0.9


def _speculative(counts: dict) -> dict:
    """Chapter 14's sweep file with the given counts at every prompt and window."""
    lengths = {n: {**{str(w): counts for w in (16, 256)}, "quest": {**counts, "accepted": 1}} for n in ("1024", "4096")}
    return {"date": "2026-12-05", "machine": "a test", "model": "none", "new_tokens": 32, "gamma": 4,
            "num_sink": 4, "quest_page": 16, "quest_pages": 16, "windows": [16, 256], "lengths": lengths}


def test_the_speculative_sweep_glues_what_the_file_holds(tmp_path):
    from benchmarks.chapter_results import speculative_smollm2

    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(_speculative({"drafted": 8, "accepted": 6, "rejections": 2, "verifications": 4,
                                             "greedy": True})))
    sweep = speculative_smollm2(path)
    assert sweep["lengths"] == [1024, 4096] and sweep["rates"][4096] == [0.75, 0.75]
    assert sweep["glue"]["sweep_rate_long"] == "0.75" and sweep["glue"]["sweep_quest_long"] == "0.12"
    assert sweep["glue"]["sweep_equal"] == sweep["glue"]["sweep_runs"] == "6"
    assert speculative_smollm2(tmp_path / "absent.json")["glue"]["sweep_long"] == NOT_MEASURED
