"""The judge's answers are no oracle: a call into another exercise is answered with its
reference only where the solution made that call, with equal arguments, in the same test.

Every exercise whose contestant may ask the judge (``grading.judge.substitute.judge_answers``)
is asked through a gate (``grading.judge.answers.Gate``) that holds the record of the
solution's calls; these tests prove, per exercise, that a call outside the record is refused
before any reference runs, that the record's own calls are answered, that "equal" is the
wire's exact equality, and that the record survives being written and read back.
"""

from __future__ import annotations

import pytest
import torch

from grading.contestant.swap import NotAnswered
from grading.judge import answers, expected, replay, substitute
from grading.layout import discover_chapters

ASKING = [(c.stem, e) for c in discover_chapters() if (table := substitute.chapter_table(c.stem))
          for e in sorted(set(table[0].values())) if substitute.reference_package(c.stem, e)["asked"]]


def test_exercises_that_ask_are_found():
    """Not vacuous: the chapters whose exercises call each other are among them."""
    assert {("06_delta_rule", "6.3"), ("03_quantized_kv_cache", "3.2"), ("05_flash_attention", "5.5")} <= set(ASKING)


@pytest.mark.parametrize("stem,exercise", ASKING, ids=[f"{s}-{e}" for s, e in ASKING])
def test_every_answer_is_gated_and_refused_outside_the_record(stem, exercise, monkeypatch):
    """Each reference the judge runs for this exercise's contestant refuses a call that the
    record of this test does not hold, before the reference runs (it would raise TypeError on
    no arguments), and refuses every call when no test is running."""
    monkeypatch.setattr(answers, "answered_calls", lambda _: {"a test": frozenset({("other", "0" * 64)})})
    gates = substitute.judge_answers(stem, exercise)
    assert gates and all(isinstance(g, answers.Gate) for g in gates.values()), gates
    for name, gate in gates.items():
        with pytest.raises(NotAnswered):
            gate()
        with answers.running("a test"), pytest.raises(NotAnswered, match="notebook's own"):
            gate()


def _delta_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 5, 2, 4, generator=g, dtype=torch.float64) for _ in range(3))
    gate = -torch.rand(1, 5, 2, generator=g, dtype=torch.float64)
    beta = torch.rand(1, 5, 2, generator=g, dtype=torch.float64)
    return q, k, v, gate, beta


def test_only_the_recorded_call_with_equal_arguments_is_answered(monkeypatch):
    """6.4's reference, asked by 6.6's contestant: the recorded call is answered (with the
    reference's value), the same call with one bit changed, with an argument of another type,
    or in another test is refused."""
    args = _delta_inputs()
    name = "gated_delta_rule_recurrent"
    record = {"test_06::t": frozenset({(name, expected.ask_key(name, args, {"initial_state": None}))})}
    monkeypatch.setattr(answers, "answered_calls", lambda _: record)
    gate = substitute.judge_answers("06_delta_rule", "6.6")[name]
    with answers.running("test_06::t"):
        out, state = gate(*args, initial_state=None)
        assert out.shape == (1, 5, 2, 4) and state.shape == (1, 2, 4, 4)
        # Not contiguous, the same values: a key says what the values are, not their layout.
        gate(*(a.transpose(0, 1).contiguous().transpose(0, 1) for a in args), initial_state=None)
        flipped = args[0].clone()
        flipped.view(torch.int64)[0, 0, 0, 0] ^= 1  # one bit of one element
        for changed, kwargs in [((flipped, *args[1:]), {"initial_state": None}), (args, {}),
                                ((*args[:3], args[3].float(), args[4]), {"initial_state": None}),
                                (args, {"initial_state": None, "scale": 0.5})]:
            with pytest.raises(NotAnswered):
                gate(*changed, **kwargs)
    with answers.running("test_06::another"), pytest.raises(NotAnswered):
        gate(*args, initial_state=None)


def test_keys_are_exact_about_types():
    assert expected.ask_key("f", (1,), {}) != expected.ask_key("f", (1.0,), {})
    assert expected.ask_key("f", ((1, 2),), {}) != expected.ask_key("f", ([1, 2],), {})
    assert expected.ask_key("f", (True,), {}) != expected.ask_key("f", (1,), {})
    assert expected.ask_key("f", (1,), {}) != expected.ask_key("g", (1,), {})
    assert expected.ask_key("f", (), {"a": 1, "b": 2}) == expected.ask_key("f", (), {"b": 2, "a": 1})


def test_the_record_is_written_merged_and_read_back(tmp_path):
    """What ``make release`` writes is what the judge reads: per test, (name, key) pairs."""
    recorder = replay.Recorder()
    recorder.book("tests.references.ref_99_example")
    recorder.record_ask("99_example", "test_99_example.py::t[a]", "f", "k1")
    recorder.record_ask("99_example", "test_99_example.py::t[a]", "f", "k1")
    recorder.write(tmp_path, ["tests/test_99_example.py::t[a]"])
    more = replay.Recorder()
    more.book("tests.references.ref_99_example")
    more.record_ask("99_example", "test_99_example.py::t[a]", "g", "k2")
    more.record_ask("99_example", "test_99_example.py::u", "f", "k3")
    more.write(tmp_path, ["tests/test_99_example.py::u"])
    assert replay.asks_of(tmp_path / "99_example.npz") == {
        "test_99_example.py::t[a]": frozenset({("f", "k1"), ("g", "k2")}),
        "test_99_example.py::u": frozenset({("f", "k3")})}
    assert replay.asks_of(tmp_path / "missing.npz") is None


def test_a_refused_call_runs_the_notebooks_own_function(monkeypatch):
    """Through a real contestant: 10.2's contestant asks for merge_attention (10.1's) on a
    call the solution never made; the judge refuses, and the stub's own function runs."""
    from grading.judge import open_notebook
    from grading.layout import EXERCISES

    monkeypatch.setattr(answers, "answered_calls", lambda _: {})
    nb = open_notebook(EXERCISES / "10_context_parallel.ipynb", "10_context_parallel", trusted=True)
    out, lse = torch.zeros(1, 2, 3, 4), torch.full((1, 2, 3), float("-inf"))
    try:
        nb.use("10.2")
        with answers.running("test_10_context_parallel.py::t"), pytest.raises(NotImplementedError, match="10.1"):
            nb.merge_attention(out, lse, out, lse)
    finally:
        nb.close()


def test_test_keys_leave_out_the_variant_of_the_proof():
    class Item:
        def __init__(self, nodeid, nb=None):
            self.nodeid, self.path = nodeid, "tests/test_06_delta_rule.py"
            if nb is not None:
                self.callspec = type("C", (), {"params": {"nb": type("V", (), {"id": nb})()}})()

    key = "test_06_delta_rule.py::test_x[B2-T7]"
    assert answers.test_key(Item("tests/test_06_delta_rule.py::test_x[B2-T7]")) == key
    assert answers.test_key(Item("tests/test_06_delta_rule.py::test_x[solution-B2-T7]", "solution")) == key
    assert answers.test_key(Item("tests/test_06_delta_rule.py::test_x[B2-T7-alone-6.6]", "alone-6.6")) == key
    assert answers.test_key(Item("test_06_delta_rule.py::test_y[alone-6.6]", "alone-6.6")) == \
        "test_06_delta_rule.py::test_y"
