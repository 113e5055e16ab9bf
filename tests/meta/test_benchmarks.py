"""The benchmark harness itself (``make bench`` measures; these check how it measures)."""

import importlib

import pytest
import torch

from benchmarks.records import Record, median_ratio, paired_times
from benchmarks.solutions import load_solutions
from grading.layout import ROOT

MODULES = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))


def test_record_goals():
    assert Record("a", 1.4, "x", "<= 1.5").passed is True
    assert Record("a", 1.6, "x", "<= 1.5").passed is False
    assert Record("a", 10.0, "x", ">= 10").passed is True
    assert Record("a", 3.0, "x").passed is None and Record("a", 3.0, "x").to_json()["pass"] is None


def test_median_ratio_pairs_rounds():
    # Round 2 is disturbed on one side only; the minima of each side come from different
    # rounds (ratio of bests 1.0 / 2.0 = 0.5), the paired median does not.
    ours, peer = [3.0, 1.0, 3.0], [2.0, 2.0, 2.0]  # min(ours) / min(peer) would be 0.5
    assert median_ratio(ours, peer) == 1.5
    with pytest.raises(ValueError):
        median_ratio([1.0, 2.0], [1.0])


def test_paired_times_calls_in_turn():
    calls = []
    times = paired_times([lambda: calls.append("a"), lambda: calls.append("b")], rounds=3)
    assert calls == ["a", "b"] * 4  # one warm-up round, then three
    assert [len(t) for t in times] == [3, 3] and all(t >= 0 for row in times for t in row)


def test_loading_a_solution_keeps_the_benchmark_thread_count():
    # Every notebook calls torch.set_num_threads(1); a benchmark must not inherit that.
    before = torch.get_num_threads()
    wanted = 2 if before != 2 else 3
    torch.set_num_threads(wanted)
    try:
        sol = load_solutions("01_kv_memory")
        assert not sol.errors
        assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("name", MODULES)
def test_every_benchmark_module_has_run(name):
    module = importlib.import_module(f"benchmarks.{name}")
    assert callable(getattr(module, "run", None))
    if "load_solutions" in vars(module):  # solution notebooks go through the thread-keeping loader
        assert module.load_solutions is load_solutions
