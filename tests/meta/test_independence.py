"""Each exercise is graded where its code lives (issue 16, grading.substitute).

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
import inspect

import nbformat
import pytest

from grading import substitute
from grading.catalogue import load_catalogue
from grading.compare import GradingFailure
from grading.layout import cell_source, discover_chapters

CHAPTERS = discover_chapters()

# Chapters whose exercises call each other but whose references are not written yet,
# and why. Declaring SUBSTITUTES in the reference module takes a chapter off this list.
NOT_YET = {
    "07_triton_kernels": "kernels are graded in a child process (grading.isolation), where the swap does not reach; "
                         "7.3's kernel calls 7.4's causal_loop_end and causal_mask",
    "10_context_parallel": "10.2 calls merge_attention (10.1), 10.6 ring_step and shard_positions; 10.6 runs the "
                           "notebook in gloo processes (distlab run_on_ranks), where the swap does not reach",
}

# Chapters whose exercises never reach each other, so that nothing needs swapping:
# test_exercises_reach_no_other_exercise proves it from the code and the graders.
BY_CONSTRUCTION = {"08_model_lab"}


def opted_in(chapter) -> bool:
    return substitute.chapter_table(chapter.stem) is not None


def _owned(chapter) -> dict[str, str]:
    table = substitute.chapter_table(chapter.stem)
    return table[0] if table else substitute.owned_names(chapter.exercise)


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
           {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def test_every_chapter_is_graded_per_exercise_or_says_why_not():
    for chapter in CHAPTERS:
        if opted_in(chapter) or chapter.stem in BY_CONSTRUCTION:
            assert chapter.stem not in NOT_YET, f"{chapter.stem} is graded per exercise: take it off NOT_YET"
        else:
            assert chapter.stem in NOT_YET, (
                f"{chapter.stem}: declare SUBSTITUTES in {chapter.reference.name} (grading.substitute) "
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
            got = list(inspect.signature(reference).parameters)
            assert got == expected, f"{chapter.reference.name}: `{name}` takes {got}; the exercise takes {expected}"


def _outside(tree: ast.Module, owned: set[str]) -> str:
    """The module's code without the functions and methods in ``owned``."""
    body = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in owned:
            continue
        if isinstance(node, ast.ClassDef):
            node.body = [m for m in node.body if not (isinstance(m, ast.FunctionDef) and f"{node.name}.{m.name}" in owned)]
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
            if a.cell_type == "code" and _outside(ast.parse(cell_source(a)), mine) != _outside(ast.parse(cell_source(b)), mine):
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
    with substitute.graded_alone(namespace, "99_test", "9.1"):
        cache = namespace["Cache"]()
        assert cache.own() == "student"  # the graded exercise stays the student's
        assert cache.helper() == namespace["helper"](None) == "reference helper"  # attached to the class too
        with pytest.raises(GradingFailure, match="grader error.*`other` of Exercise 9.3"):
            namespace["other"]()
    assert Cache().helper() == "student helper" and namespace["other"]() == "student other"
    with substitute.graded_alone(namespace, "99_test", "9.2"):
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
    owned = substitute.owned_names(chapter.exercise)
    assert owned["BlockAllocator.allocate"] == "2.2" and owned["append"] == "2.3" and owned["free"] == "2.5"
    assert "PagedKVCache.__init__" not in owned and "waste_fraction" not in owned
    importlib.import_module("grading.plugin")  # the fixture's home imports cleanly
