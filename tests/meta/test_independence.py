"""Each exercise is graded where its code lives (grading.judge.substitute).

``pytest --prove`` runs the dynamic half for every chapter that declares
``SUBSTITUTES`` in its reference module: each test of exercise N.M also runs on the
stubs with only N.M solved (variant ``alone-N.M``, must pass: full points for that
exercise alone), and a catalogue bug of one exercise that fails a test of another
fails the run. Because bugs run only against the tests their ``tests=`` names, this
file adds the static half that covers every bug: a bug changes nothing outside the
functions of its own exercise, which the other exercises' tests never see (they get
the references). Together: a bug in one exercise costs no points elsewhere.

A chapter whose exercises never reach each other (BY_CONSTRUCTION) needs no swap; the
static check here proves it from the solution's code and the graders' calls.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import math
from pathlib import Path

import nbformat
import pytest
import torch

from distlab import run_on_ranks
from grading.compare import GradingFailure
from grading.contestant.swap import Beside, Calling, calling, swap_in_force
from grading.judge import substitute
from grading.layout import cell_source, chapter_of_test_file, discover_chapters
from grading.notebook import owners
from grading.notebook.catalogue import load_catalogue

CHAPTERS = discover_chapters()

# Chapters whose exercises call each other but whose references are not written yet,
# and why. Declaring SUBSTITUTES in the reference module takes a chapter off this list.
# Empty: every chapter declares SUBSTITUTES or is graded alone by construction.
NOT_YET: dict[str, str] = {}

# Chapters whose exercises never reach each other, so that nothing needs swapping:
# test_exercises_reach_no_other_exercise proves it from the code and the graders.
BY_CONSTRUCTION = {"08_model_lab"}


def opted_in(chapter) -> bool:
    return substitute.chapter_table(chapter.stem) is not None


def _owned(chapter) -> dict[str, str]:
    table = substitute.chapter_table(chapter.stem)
    return table[0] if table else owners.owned_names(chapter.exercise)


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
           {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def test_every_chapter_is_graded_per_exercise_or_says_why_not():
    for chapter in CHAPTERS:
        if opted_in(chapter) or chapter.stem in BY_CONSTRUCTION:
            assert chapter.stem not in NOT_YET, f"{chapter.stem} is graded per exercise: take it off NOT_YET"
        else:
            assert chapter.stem in NOT_YET, (
                f"{chapter.stem}: declare SUBSTITUTES in {chapter.reference.name} (grading.judge.substitute) "
                f"or say in NOT_YET why its exercises are not graded alone")


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c.stem in BY_CONSTRUCTION], ids=lambda c: c.stem)
def test_exercises_reach_no_other_exercise(chapter):
    """No exercise's code names a function or method another exercise owns, and no test
    of an exercise calls one through ``nb``: a mistake can cost points only where it is."""
    owned = _owned(chapter)
    assert len(set(owned.values())) > 1, f"{chapter.stem}: fewer than two exercises found"
    short = {name.split(".")[-1]: exercise for name, exercise in owned.items()}
    functions = _solution_functions(chapter)
    reaches = [f"`{name}` (Exercise {exercise}) names `{used}` of Exercise {short[used]}"
               for name, exercise in owned.items() if name in functions
               for used in sorted(_names_used(functions[name])) if used in short and short[used] != exercise]
    for node in ast.parse(chapter.test_file.read_text()).body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
            continue
        marks = [ast.unparse(d).removeprefix("pytest.mark.ex").replace("_", ".") for d in node.decorator_list]
        reaches += [f"{node.name} (Exercise {mark}) calls nb.{n.attr} of Exercise {short[n.attr]}"
                    for mark in marks if mark in set(owned.values())
                    for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                    and n.value.id == "nb" and n.attr in short and short[n.attr] != mark]
    assert not reaches, "\n".join(reaches)


def _solution_functions(chapter) -> dict[str, ast.FunctionDef]:
    """Top-level functions and methods of the solution notebook, by qualified name."""
    out = {}
    for cell in nbformat.read(chapter.solution, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell_source(cell)).body:
            if isinstance(node, ast.FunctionDef):
                out[node.name] = node
            elif isinstance(node, ast.ClassDef):
                out[node.name] = node
                out.update({f"{node.name}.{m.name}": m for m in node.body if isinstance(m, ast.FunctionDef)})
    return out


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if opted_in(c)], ids=lambda c: c.stem)
def test_references_have_the_exercises_names_and_parameters(chapter):
    owned, references = substitute.chapter_table(chapter.stem)
    classes = {name.split(".")[0] for name in owned if "." in name}
    functions = _solution_functions(chapter)
    for name, reference in references.items():
        assert name in owned or name in classes, f"{chapter.reference.name}: SUBSTITUTES names `{name}`, no exercise's"
        if isinstance(functions.get(name), ast.FunctionDef):
            expected = [a.arg for a in functions[name].args.args]
            got = _parameters(reference)
            assert got == expected, f"{chapter.reference.name}: `{name}` takes {got}; the exercise takes {expected}"


def _parameters(reference) -> list[str]:
    """The parameter names of a declared reference. One named "module:function" is read
    from its source (importing it would import Triton here, before any notebook)."""
    while isinstance(reference, (Calling, Beside)):
        reference = reference.reference
    if not isinstance(reference, str):
        return list(inspect.signature(reference).parameters)
    module, _, function = reference.partition(":")
    source = Path(importlib.util.find_spec(module).origin).read_text()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == function)
    return [a.arg for a in node.args.args]


def _outside(tree: ast.Module, owned: set[str]) -> str:
    """The module's code without the functions and methods in ``owned``."""
    body = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in owned:
            continue
        if isinstance(node, ast.ClassDef):
            node.body = [m for m in node.body
                         if not (isinstance(m, ast.FunctionDef) and f"{node.name}.{m.name}" in owned)]
        body.append(node)
    tree.body = body
    return ast.dump(tree)


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if opted_in(c) or c.stem in BY_CONSTRUCTION],
                         ids=lambda c: c.stem)
def test_a_catalogue_bug_changes_only_its_own_exercise(chapter):
    """What the other exercises' tests see of a bugged notebook is the solution's."""
    owned = _owned(chapter)
    solution = nbformat.read(chapter.solution, as_version=4)
    leaks = []
    for bug in load_catalogue(chapter.stem):
        mine = {name for name, exercise in owned.items() if exercise == bug.exercise}
        bugged = bug.apply(solution, chapter.solution.name)
        for index, (a, b) in enumerate(zip(solution.cells, bugged.cells)):
            if (a.cell_type == "code"
                    and _outside(ast.parse(cell_source(a)), mine) != _outside(ast.parse(cell_source(b)), mine)):
                leaks.append(f"{bug.name} (Exercise {bug.exercise}) changes cell {index} outside {sorted(mine)}")
    assert not leaks, "\n".join(leaks)


def test_the_swap_reaches_classes_and_is_undone(monkeypatch):
    class Cache:
        def own(self):
            return "student"

    def helper(self):
        return "student helper"

    Cache.helper = helper
    namespace = {"Cache": Cache, "helper": helper, "other": lambda: "student other"}
    owned = {"Cache.own": "9.1", "helper": "9.2", "other": "9.3"}
    monkeypatch.setitem(substitute._TABLES, "99_test", (owned, {"helper": lambda self: "reference helper"}))
    with substitute.swap_for(namespace, "99_test", "9.1"):
        cache = namespace["Cache"]()
        assert cache.own() == "student"  # the graded exercise stays the student's
        assert cache.helper() == namespace["helper"](None) == "reference helper"  # attached to the class too
        with pytest.raises(GradingFailure, match="grader error.*`other` of Exercise 9.3"):
            namespace["other"]()
    assert Cache().helper() == "student helper" and namespace["other"]() == "student other"
    with substitute.swap_for(namespace, "99_test", "9.2"):
        with pytest.raises(GradingFailure, match="`Cache.own` of Exercise 9.1"):
            Cache().own()
    assert Cache().own() == "student" and "own" in Cache.__dict__


def test_only_solved_keeps_one_exercise():
    chapter = next(c for c in CHAPTERS if c.stem == "02_paged_kv_cache")
    solution = nbformat.read(chapter.solution, as_version=4)
    sources = "\n".join(cell_source(c) for c in substitute.only_solved(solution, "2.3").cells)
    assert "Exercise 2.1: return the number of pages" in sources and "copy_last" in sources
    assert "return -(-num_tokens // page_size)" not in sources


def test_owned_names_follow_the_stub_lines():
    chapter = next(c for c in CHAPTERS if c.stem == "02_paged_kv_cache")
    owned = owners.owned_names(chapter.exercise)
    assert owned["BlockAllocator.allocate"] == "2.2" and owned["append"] == "2.3" and owned["free"] == "2.5"
    assert "PagedKVCache.__init__" not in owned and "waste_fraction" not in owned
    importlib.import_module("grading.judge.plugin")  # the fixture's home imports cleanly


def _helper(x):
    return "reference helper"


def _caller(x):
    return f"reference caller over {_helper(x)}"


def test_a_reference_declared_calling_uses_the_notebooks_names(monkeypatch):
    """calling(): the reference of one exercise calls the graded exercise's own code."""
    namespace = {"_helper": lambda x: "student helper", "_caller": lambda x: "student caller"}
    owned = {"_helper": "9.1", "_caller": "9.2"}
    references = {"_helper": _helper, "_caller": calling(f"{__name__}:_caller", "_helper")}
    monkeypatch.setitem(substitute._TABLES, "99_test", (owned, references))
    with substitute.swap_for(namespace, "99_test", "9.1"):  # the helper is graded inside the reference caller
        assert namespace["_caller"](0) == "reference caller over student helper"
        assert swap_in_force() == {"chapter": "99_test", "exercise": "9.1"}
    with substitute.swap_for(namespace, "99_test", "9.2"):
        assert namespace["_caller"](0) == "student caller" and namespace["_helper"](0) == "reference helper"
    assert swap_in_force() is None and namespace["_caller"](0) == "student caller"


# -- the swap in processes that load the notebook themselves -----------------------------------
# Named, not discovered: a judge imports this module with solutions/ (which discovery
# looks for) hidden from it.
CH10 = chapter_of_test_file("test_10_context_parallel.py")
ALONE_10_2 = {"chapter": CH10.stem, "exercise": "10.2"}  # merge_attention (10.1) is the reference's


def _empty_rows():
    return torch.zeros(1, 2, 4), torch.full((1, 2), -math.inf)


def test_a_contestant_holds_the_other_exercises_references_only():
    """The contestant of Exercise 2.1 is sent the references of 2.2 to 2.6, never 2.1's
    (``pages_needed`` and its checked wrapper are taken out of the source it gets)."""
    package = substitute.reference_package("02_paged_kv_cache", "2.1")
    (module,) = package["modules"]
    assert {"pages_needed", "checked_pages_needed"} <= set(module["removed"])
    assert "def pages_needed" not in module["source"] and "def checked_pages_needed" not in module["source"]
    assert "def cache_append" in module["source"]


def test_the_swap_reaches_the_contestant(monkeypatch):
    """On the stubs (10.1 unsolved), 10.2's contestant calls the reference merge_attention,
    for a call the solution made in the test running (grading.judge.answers)."""
    from grading.judge import answers, expected, open_notebook

    nb = open_notebook(CH10.exercise, CH10.stem, trusted=True)
    out, lse = _empty_rows()
    made = {"a test": frozenset({("merge_attention", expected.ask_key("merge_attention", (out, lse, out, lse), {}))})}
    monkeypatch.setattr(answers, "answered_calls", lambda stem: made)
    try:
        nb.use("10.2")
        with answers.running("a test"):
            got_out, got_lse = nb.merge_attention(out, lse, out, lse)
        assert torch.equal(got_out, out) and torch.equal(got_lse, lse)
        nb.use("10.1")
        with pytest.raises(NotImplementedError):
            nb.merge_attention(out, lse, out, lse)
    finally:
        nb.close()


def test_the_swap_reaches_every_gloo_rank():
    out, lse = _empty_rows()
    calls = [[((out, lse, out, lse), {})] for _ in range(2)]
    with_swap = run_on_ranks(CH10.exercise, "merge_attention", 2, calls, swap=ALONE_10_2)
    assert [r.status for r in with_swap] == ["ok", "ok"], [r.message for r in with_swap]
    assert torch.equal(with_swap[1].calls[0].value[1], lse)
    without = run_on_ranks(CH10.exercise, "merge_attention", 2, calls, swap=None)
    # Without the swap each rank reaches the stub. The first rank to raise leaves the gloo
    # group, and its peer, still inside a collective, may die of the closed connection
    # instead (seen once in CI on a loaded 2-core machine): a crash is no answer, an ok is.
    statuses = [r.status for r in without]
    assert "not implemented" in statuses and set(statuses) <= {"not implemented", "crashed"}, \
        [r.message for r in without]
