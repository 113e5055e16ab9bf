"""The benchmark harness itself (``make bench`` measures; these check how it measures)."""

import datetime
import importlib
import json

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


def test_benchmark_table_is_generated_from_the_results_files():
    from benchmarks.readme import PAGE, updated_page

    text = PAGE.read_text()
    assert updated_page(text) == text, (
        "docs/benchmarks.md's table is not what the results files give: run `python -m benchmarks.readme`"
    )


def test_results_files_say_which_machine():
    from benchmarks.results import RESULTS_DIR, load_all

    runs = load_all()
    assert runs, f"no results file in {RESULTS_DIR}"
    for run in runs:
        assert run["file"].startswith(run["date"]), f"{run['file']}: the name starts with the run's date"
        for key in ("cpu_model", "cpu_vendor", "logical_cores", "torch_threads", "blas", "torch"):
            assert run["machine"].get(key) not in (None, ""), f"{run['file']}: machine lacks {key}"
        for record in run["records"]:
            Record(record["name"], record["value"], record["unit"], record["goal"])  # a goal it can parse
            assert set(record) >= {"name", "value", "unit", "goal", "pass", "note"}, run["file"]


def test_new_results_name_the_cpu_exactly():
    """A brand name ("AMD EPYC") does not tell a Zen 3 from a Zen 4: new files carry the
    family, model number, stepping and the flags that pick the BLAS's kernels."""
    from benchmarks.readme import cpu_id
    from benchmarks.results import CPU_FLAGS, machine

    here = machine(1)
    for key in ("cpu_family", "cpu_model_number", "cpu_stepping", "cpu_flags"):
        assert key in here, f"machine() lacks {key}"
    assert set(here["cpu_flags"]) <= set(CPU_FLAGS)
    m = dict(here, cpu_family=25, cpu_model_number=17, cpu_stepping=1, cpu_flags=["avx2", "avx512f"])
    assert cpu_id(m) == "family 25, model 17, stepping 1, flags avx2 avx512f"
    assert cpu_id({"cpu_model": "AMD EPYC"}) == "CPU family, model and flags not recorded"


def test_results_are_added_to_the_file_of_the_day(tmp_path, monkeypatch):
    from benchmarks import results

    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    first = Record("a.one", 1.0, "x", "<= 2").to_json()
    path = results.write_results([first, Record("a.two", 2.0, "x").to_json()], threads=1, date="2030-01-02")
    results.write_results([Record("a.one", 3.0, "x", "<= 2").to_json()], threads=1, date="2030-01-02",
                          command="python -m benchmarks one --results")
    data = json.loads(path.read_text())
    # The file names every run it holds, in order: docs/benchmarks.md's footnote quotes it.
    assert data["source"] == "python -m benchmarks --results, then python -m benchmarks one --results"
    assert path.name.startswith("2030-01-02-") and data["machine"]["torch_threads"] == 1
    # The UTC time of the write orders two files of one day.
    assert datetime.datetime.fromisoformat(data["written"]).utcoffset() == datetime.timedelta(0)
    assert {r["name"]: r["value"] for r in data["records"]} == {"a.one": 3.0, "a.two": 2.0}
    # Another thread count is another file: its numbers must not replace these.
    other = results.write_results([first], threads=2, date="2030-01-02")
    assert other != path and json.loads(path.read_text()) == data
    # Another machine cannot add to this machine's file.
    here = results.machine(1)
    monkeypatch.setattr(results, "machine", lambda threads: dict(here, blas="another BLAS"))
    with pytest.raises(RuntimeError, match="another machine"):
        results.write_results([first], threads=1, date="2030-01-02")
