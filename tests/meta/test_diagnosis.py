"""Diagnosis from the catalogue (grading.diagnosis): a known mistake is named, an unknown
one gets nothing extra, and a diagnosis is never given when two bugs fail alike."""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from grading import alternatives
from grading.judge import diagnosis
from grading.layout import ROOT, SOLUTIONS, TESTS, discover_chapters
from grading.notebook import owners
from grading.notebook.catalogue import load_catalogue, load_sections

MISTAKE = "This looks like a known mistake"


def _close(check: str, values: list) -> dict:
    return {"kind": "close", "check": check, "shape": [len(values)], "values": values, "atol": 1e-6, "rtol": 0.0}


TABLE = {
    "a": {"exercise": "9.1", "hint": "forgets a", "section": "§9.1", "tested": ["t.py::x[1]", "t.py::x[2]"],
          "failed": {"t.py::x[1]": _close("f(1): out", [1.0, 2.0])}},
    "b": {"exercise": "9.1", "hint": "forgets b", "section": "§9.1", "tested": ["t.py::x[1]", "t.py::x[2]"],
          "failed": {"t.py::x[1]": _close("f(1): out", [5.0, 2.0]), "t.py::x[2]": _close("f(2): out", [0.0])}},
    "c": {"exercise": "9.2", "hint": "other", "section": "", "tested": ["t.py::y"],
          "failed": {"t.py::y": {"kind": "raised", "type": "KeyError", "text": "'k'"}}},
}


def test_a_match_needs_the_same_output_on_every_failing_case_and_the_same_passes():
    one = {"t.py::x[1]": _close("f(1): out", [1.0 + 1e-9, 2.0])}
    assert diagnosis.matches(TABLE, "9.1", one, {"t.py::x[2]"}) == ["a"]
    assert diagnosis.diagnose(TABLE, "9.1", one, {"t.py::x[2]"}).hint == "forgets a"
    # Outside the check's tolerance, or a different check: no match.
    assert diagnosis.matches(TABLE, "9.1", {"t.py::x[1]": _close("f(1): out", [1.1, 2.0])}, {"t.py::x[2]"}) == []
    assert diagnosis.matches(TABLE, "9.1", {"t.py::x[1]": _close("g(1): out", [1.0, 2.0])}, {"t.py::x[2]"}) == []
    # b also fails x[2]; a student who passes x[2] did not make mistake b.
    b_like = {"t.py::x[1]": _close("f(1): out", [5.0, 2.0])}
    assert diagnosis.matches(TABLE, "9.1", b_like, {"t.py::x[2]"}) == []
    both = {**b_like, "t.py::x[2]": _close("f(2): out", [0.0])}
    assert diagnosis.matches(TABLE, "9.1", both, set()) == ["b"]
    # Other exercises' bugs are never candidates; a crash (no observation) is never diagnosed.
    assert diagnosis.matches(TABLE, "9.2", one, set()) == []
    assert diagnosis.matches(TABLE, "9.1", {"t.py::x[1]": None}, set()) == []


def test_a_wrong_tensor_is_matched_relative_to_its_largest_value():
    """A bug whose output grows to thousands rounds its small entries at that scale:
    another CPU's kernels move them by more than the grader's atol, and the match holds."""
    bug = {"kind": "close", "check": "f: out", "shape": [3], "values": [4333.0, 0.2982, -0.1306],
           "atol": 1e-4, "rtol": 1e-4}
    other_cpu = {**bug, "values": [4333.0004, 0.2982 + 4.9e-4, -0.1306]}
    assert diagnosis.same(other_cpu, bug)
    assert not diagnosis.same({**bug, "values": [4333.0, 0.2982 + 0.5, -0.1306]}, bug)
    small = {**bug, "values": [0.5, 0.25, 0.125]}
    assert not diagnosis.same({**small, "values": [0.5, 0.25 + 4.9e-4, 0.125]}, small)


def test_a_case_the_table_never_ran_for_a_bug_neither_confirms_nor_rules_it_out():
    """The proof runs a bug on the tests that reach it; a student (and the student edition,
    where a mistake also fails the cases built on it) meets more. Those cases are unknown
    to the table, so they are left out of the comparison; a crash there too."""
    one = {"t.py::x[1]": _close("f(1): out", [1.0, 2.0])}
    more = {**one, "t.py::z[9]": {"kind": "message", "text": "a later exercise's case"}}
    assert diagnosis.matches(TABLE, "9.1", more, {"t.py::x[2]"}) == ["a"]
    assert diagnosis.matches(TABLE, "9.1", {**one, "t.py::z[9]": None}, {"t.py::x[2]"}) == ["a"]
    # Only unknown cases fail: nothing in common with any bug, no diagnosis.
    assert diagnosis.matches(TABLE, "9.1", {"t.py::z[9]": more["t.py::z[9]"]}, set()) == []


def test_two_bugs_that_fail_alike_give_no_diagnosis():
    twin = {**TABLE, "a2": {**TABLE["a"], "hint": "twin"}}
    one = {"t.py::x[1]": _close("f(1): out", [1.0, 2.0])}
    assert diagnosis.matches(twin, "9.1", one, {"t.py::x[2]"}) == ["a", "a2"]
    assert diagnosis.diagnose(twin, "9.1", one, {"t.py::x[2]"}) is None
    proof = diagnosis.proof(twin, twin)
    assert proof["recalled"] == 2 and proof["missed"]["a"] == "fails exactly like a2" and not proof["false_diagnoses"]


def test_the_case_key_is_the_same_for_a_bug_and_for_a_student():
    assert (diagnosis.case_key("tests/test_01_x.py", "test_f[bug-foo-L7-fp32]", "bug-foo")
            == "test_01_x.py::test_f[L7-fp32]")
    assert diagnosis.case_key("/a/tests/test_01_x.py", "test_f[L7-fp32]") == "test_01_x.py::test_f[L7-fp32]"
    assert diagnosis.case_key("tests/test_01_x.py", "test_g[bug-foo]", "bug-foo") == "test_01_x.py::test_g"


@pytest.mark.parametrize("chapter", discover_chapters(), ids=lambda c: c.stem)
def test_every_chapter_has_a_table_for_exactly_its_catalogue(chapter):
    table = diagnosis.load_table(chapter.stem)
    names = {b.name for b in load_catalogue(chapter.stem)}
    assert set(table) == names, f"run `python -m grading.diagnosis --write {chapter.stem}`"
    bugs = {b.name: b for b in load_catalogue(chapter.stem)}
    for name, entry in table.items():
        assert entry["hint"] and entry["section"], name
        # The section is the catalogue's SECTIONS (or the bug's own) as the chapter numbers it now.
        assert entry["section"] == (bugs[name].section or diagnosis.section_of(chapter.stem, entry["exercise"])), \
            f"{name}: the table's section is stale; run `python -m grading.diagnosis --write {chapter.stem}`"


@pytest.mark.parametrize("chapter", discover_chapters(), ids=lambda c: c.stem)
def test_every_hint_of_a_chapter_says_something_no_other_hint_says(chapter):
    """Two bugs with one hint would print the same "known mistake", so the student (and
    ``make bench``'s count of false diagnoses) could not tell which was meant."""
    hints = {}
    for name, entry in diagnosis.load_table(chapter.stem).items():
        hint = entry["hint"].rstrip(".")
        assert hint not in hints, f"{name} and {hints.get(hint)} share the hint {hint!r}"
        hints[hint] = name


@pytest.mark.parametrize("chapter", discover_chapters(), ids=lambda c: c.stem)
def test_every_exercise_is_sent_to_the_section_that_teaches_it(chapter):
    """SECTIONS in the catalogue names an existing section for every exercise of the chapter."""
    exercises = set(owners.owned_names(chapter.exercise).values())
    sections = load_sections(chapter.stem)
    assert exercises <= set(sections), \
        f"tests/catalogue/{chapter.stem}.py: SECTIONS lacks {sorted(exercises - set(sections))}"
    for exercise in sections:
        diagnosis.section_of(chapter.stem, exercise)  # raises on a title the chapter lacks


def _grade(tmp_path, notebook) -> str:
    nbformat.write(notebook, tmp_path / "01_kv_memory.ipynb")
    run = subprocess.run([sys.executable, "-m", "pytest", str(TESTS / "test_01_kv_memory.py"), "--notebooks",
                          str(tmp_path), "-q", "-p", "no:cacheprovider", "-m", "ex1_3"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    return run.stdout


def test_a_catalogue_mistake_is_named_where_the_student_reads(tmp_path):
    bug = next(b for b in load_catalogue("01_kv_memory") if b.name == "gb_for_gib")
    solution = nbformat.read(SOLUTIONS / "01_kv_memory.ipynb", as_version=4)
    out = _grade(tmp_path, bug.apply(solution, "01_kv_memory.ipynb"))
    assert f"Exercise 1.3: {MISTAKE}: {bug.why}" in out, out[-3000:]
    assert "§1." in out.split(MISTAKE)[1].splitlines()[0]


def test_a_mistake_the_catalogue_does_not_know_gets_nothing_extra(tmp_path):
    solution = nbformat.read(SOLUTIONS / "01_kv_memory.ipynb", as_version=4)
    cell = next(c for c in solution.cells if "def convert_bytes" in c.source)
    body = cell.source.split("def convert_bytes", 1)[1]
    returns = [line for line in body.splitlines() if line.strip().startswith("return ")]
    assert returns, "convert_bytes has no return line to perturb"
    line = returns[0]
    cell.source = cell.source.replace(line, line + " * 1.5", 1)  # wrong, but no known mistake
    out = _grade(tmp_path, solution)
    assert "failed" in out and MISTAKE not in out, out[-3000:]


# -- kinds of mistake (grading.alternatives.KINDS): recognised without a catalogue entry ----
def _gqa_reference(q, k):
    """A tiny GQA exercise's reference: out[b, h] = q[b, h] * k[b, h // G] (per query head)."""
    G = q.shape[1] // k.shape[1]
    return q * k.repeat_interleave(G, dim=1)


def _group_reference(q, k):
    """One result per KV head: the sum over its G query heads of q . k."""
    B, H, d = q.shape
    H_kv = k.shape[1]
    return (q.reshape(B, H_kv, H // H_kv, d) * k[:, :, None]).sum(dim=(2, 3))


def _inputs(H=6, H_kv=3):
    import torch

    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, H, 4, generator=g, dtype=torch.float64),
            torch.randn(2, H_kv, 4, generator=g, dtype=torch.float64))


def test_the_modulo_order_gives_each_group_the_heads_h_mod_h_kv():
    order = alternatives.group_modulo_order(6, 3)
    assert order == [0, 3, 1, 4, 2, 5]
    assert [order[p] % 3 for p in range(6)] == [p // 2 for p in range(6)]


@pytest.mark.parametrize("reference,out_axis", [(_gqa_reference, 1), (_group_reference, None)],
                         ids=["per-query-head", "per-kv-head"])
def test_heads_grouped_as_h_mod_h_kv_are_recognised_and_nothing_else(reference, out_axis):
    """`repeat` where the statement has `repeat_interleave` (per query head), and a reshape of
    the heads as (G, H_kv) (per KV head), equal the alternative; a right answer, another
    wrong one and a case where both groupings coincide are not recognised."""
    import torch

    q, k = _inputs()
    B, H, d = q.shape
    H_kv = k.shape[1]
    alternative = alternatives.heads_grouped_modulo(reference, (q, k), H, H_kv, {0: 1}, out_axis)
    if out_axis == 1:
        wrong = q * k.repeat(1, H // H_kv, 1)  # query head h reads KV head h % H_kv
    else:
        wrong = (q.reshape(B, H // H_kv, H_kv, d).transpose(1, 2) * k[:, :, None]).sum(dim=(2, 3))
    agree = lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-12)  # noqa: E731 - a sum over other heads, other order
    assert alternatives.recognise(wrong, [alternative], agree) == "heads_grouped_modulo"
    assert alternatives.recognise(reference(q, k), [alternative], agree) is None
    assert alternatives.recognise(wrong * 2, [alternative], agree) is None
    assert alternatives.heads_grouped_modulo(reference, (q[:, :3], k), 3, 3, {0: 1}, out_axis) is None  # G = 1
    assert alternatives.heads_grouped_modulo(reference, (q, k[:, :1]), 6, 1, {0: 1}, out_axis) is None  # one KV head


def test_an_alternative_that_cannot_be_computed_recognises_nothing():
    from grading.judge.replay import NotRecorded

    def missing():
        raise NotRecorded("the release holds no expected value for this input")

    assert alternatives.recognise(1.0, [alternatives.Alternative("heads_grouped_modulo", missing), None],
                               lambda a, b: True) is None


def test_the_release_recognises_a_kind_from_recorded_values_alone(tmp_path, monkeypatch):
    """`make release` records the alternative's reference call on the solution (which fails
    nothing); the student edition answers it from the records, without the reference."""
    import types

    import torch

    from grading.judge import replay

    module = types.ModuleType("tests.references.ref_99_kinds")
    exec(compile("import torch\n"
                 "def gqa(q, k):\n"
                 "    return q * k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)\n",
                 "ref_99_kinds", "exec"), module.__dict__)
    recorder = replay.Recorder()
    recorder.wrap_module(module)
    monkeypatch.setattr(replay, "_RECORDER", recorder)
    monkeypatch.setattr(alternatives, "RECORDING", True)
    q, k = _inputs()
    alternatives.record_alternatives([alternatives.heads_grouped_modulo(module.gqa, (q, k), 6, 3, {0: 1}, 1)])
    recorder.write(tmp_path, [])
    monkeypatch.setattr(replay, "_RECORDER", None)
    monkeypatch.setattr(alternatives, "RECORDING", False)
    replayed = replay.ReplayModule("tests.references.ref_99_kinds", tmp_path / "99_kinds.npz")
    alternative = alternatives.heads_grouped_modulo(replayed.gqa, (q, k), 6, 3, {0: 1}, 1)
    wrong = q * k.repeat(1, 2, 1)
    assert alternatives.recognise(wrong, [alternative], torch.equal) == "heads_grouped_modulo"


def _message_with(kind):
    return {"kind": "message", "text": "f(...): the indices are wrong", **({"finding": kind} if kind else {})}


def test_a_kind_is_named_where_no_catalogue_bug_matches_and_only_when_the_failures_agree():
    table = {"a": {**TABLE["a"], "section": '§9.2 "Grouped heads"'}}
    failed = {"t.py::x[3]": _message_with("heads_grouped_modulo"), "t.py::x[4]": _message_with(None)}
    found = diagnosis.diagnose_all("99_x", {"9.1": {**failed, "t.py::x[1]": "passed"}}, table)
    assert [d.bug for d in found] == ["kind:heads_grouped_modulo"]
    assert found[0].message().startswith("Your query heads are grouped as h % H_kv")
    assert found[0].message().endswith('See §9.2 "Grouped heads".')
    # A catalogue bug that matches is named before the kind.
    one = {"t.py::x[1]": _close("f(1): out", [1.0, 2.0]), "t.py::x[3]": _message_with("heads_grouped_modulo")}
    assert [d.bug for d in diagnosis.diagnose_all("99_x", {"9.1": {**one, "t.py::x[2]": "passed"}}, TABLE)] == ["a"]
    # Two kinds on one exercise, or a kind nobody defined: nothing is named.
    two = {**failed, "t.py::x[5]": _message_with("some_other_kind")}
    assert diagnosis.diagnose_all("99_x", {"9.1": two}, table) == []


def test_the_proof_checks_kinds_both_ways():
    """A bug that declares a kind must be recognised as it; a bug recognised as a kind it
    does not declare is a false diagnosis."""
    def bug(kind, finding):
        entry = {"exercise": "9.1", "hint": "h", "section": "", "tested": ["t.py::x[1]"],
                 "failed": {"t.py::x[1]": _message_with(finding)}}
        return {**entry, "kind": kind} if kind else entry

    fresh = {"declared": bug("heads_grouped_modulo", "heads_grouped_modulo"),
             "undeclared": bug(None, "heads_grouped_modulo"), "unseen": bug("heads_grouped_modulo", None)}
    proof = diagnosis.proof(fresh, fresh)
    assert proof["kinds_recognised"] == ["declared"]
    assert proof["false_diagnoses"] == [
        "undeclared recognised as the kind heads_grouped_modulo, a mistake it does not make"]
    assert [line.split()[0] for line in proof["unrecognised"]] == ["unseen"]


def test_every_kind_a_catalogue_declares_exists():
    for chapter in discover_chapters():
        for bug in load_catalogue(chapter.stem):
            assert bug.kind is None or bug.kind in diagnosis.KINDS, f"{chapter.stem}: {bug.name} declares {bug.kind}"


def grouped_with_repeat(folder):
    """Chapter 11's solution with 11.2's KV heads repeated by `repeat` (query head h reads KV
    head h % H_kv), a mistake no catalogue bug of 11.2 makes, written into ``folder``."""
    solution = nbformat.read(SOLUTIONS / "11_sparse_attention.ipynb", as_version=4)
    cell = next(c for c in solution.cells if "def h2o_scores" in c.source)
    line = "k_full = k.repeat_interleave(G, dim=1)"
    assert cell.source.count(line) == 1
    cell.source = cell.source.replace(line, "k_full = k.repeat(1, G, 1, 1)")
    nbformat.write(solution, folder / "11_sparse_attention.ipynb")


@pytest.mark.timeout(600)
def test_a_grouping_mistake_no_catalogue_entry_describes_is_named_as_its_kind(tmp_path):
    """11.2 with `repeat` where the statement's grouping is `repeat_interleave`: no catalogue
    bug of 11.2 makes it, and the grader names it by its kind."""
    assert not [b for b in load_catalogue("11_sparse_attention") if b.exercise == "11.2" and b.kind]
    grouped_with_repeat(tmp_path)
    run = subprocess.run([sys.executable, "-m", "pytest", str(TESTS / "test_11_sparse_attention.py"), "--notebooks",
                          str(tmp_path), "-q", "-p", "no:cacheprovider", "-m", "ex11_2"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert "Exercise 11.2: Your query heads are grouped as h % H_kv" in run.stdout, run.stdout[-3000:]
