"""What the contestant of one exercise can reach: never a function its graders compute
expected values with.

A test of exercise N compares the notebook's answer with ``ref.f(...)``. If ``f`` were in
the contestant (the process that runs the student's code), a student could call it and
hand its answer back. The contestant of N is sent only the references that must run
beside the notebook's objects (``grading.judge.substitute.reference_package``), cut to what
they use; every plain function of plain values is answered by the judge instead. These
tests list what a contestant of every exercise of every chapter is sent, and what a
contestant can find in its own memory, and fail if either holds such an ``f``.
"""

from __future__ import annotations

import ast
import json

import pytest

from grading.judge import substitute
from grading.layout import discover_chapters

CHAPTERS = [c for c in discover_chapters() if c.test_file.exists()]


def _exercises(stem: str) -> list[str]:
    table = substitute.chapter_table(stem)
    owners = set(table[0].values()) if table else set()
    return sorted(owners | set(substitute.graded_with(stem)))


CASES = [(c.stem, e) for c in CHAPTERS for e in _exercises(c.stem)]


def _defined(source: str) -> set[str]:
    """Every function and class a module's source defines, at any depth."""
    return {n.name for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def test_the_tests_uses_of_their_references_are_found():
    """Not vacuous: the parse finds what the graders plainly call."""
    assert {"attention_fp64", "tiles_visited"} <= substitute.graded_with("05_flash_attention")["5.5"]
    assert "kept_positions" in substitute.graded_with("04_sliding_window_sinks")["4.5"]
    assert "pages_needed" in substitute.graded_with("02_paged_kv_cache")["2.3"]


@pytest.mark.parametrize("stem,exercise", CASES, ids=[f"{s}-{e}" for s, e in CASES])
def test_a_contestant_is_sent_no_function_its_tests_call(stem, exercise):
    package = substitute.reference_package(stem, exercise)
    expected_from = substitute.graded_with(stem).get(exercise, frozenset())
    if package is None:
        return  # graded as a whole: nothing of the references is sent
    for module in package["modules"]:
        held = _defined(module["source"])
        assert not held & expected_from, (
            f"the contestant of {exercise} is sent {sorted(held & expected_from)} of {module['name']}, "
            "which its tests compute expected values with")
    owned, references = substitute.chapter_table(stem)
    for name in package["asked"]:
        if ":" in name:  # a helper of a reference sent, asked of the judge instead
            assert any(name in m["asked"].values() for m in package["modules"])
        else:
            assert owned.get(name) != exercise, f"{exercise}'s contestant may ask the judge for its own `{name}`"
            assert name in references


def test_the_package_is_plain_data():
    """It crosses to the contestant as JSON: no object of the judge's goes with it."""
    for stem, exercise in CASES:
        package = substitute.reference_package(stem, exercise)
        assert json.loads(json.dumps(package)) == json.loads(json.dumps(package, default=str))


# What a notebook can find in its own process: every function object and module there is.
PROBE = '''
def probe():
    import gc, sys, types, warnings
    warnings.simplefilter("ignore")

    def from_references(obj):
        if isinstance(obj, types.FunctionType):
            return obj.__code__.co_filename.startswith("<reference") or str(obj.__module__).startswith("tests.")
        return isinstance(obj, type) and str(obj.__module__).startswith("tests.")

    found = {obj.__name__ for obj in gc.get_objects() if from_references(obj)}
    for name, module in list(sys.modules.items()):
        if name.startswith("tests."):
            found.update(key for key, value in vars(module).items() if from_references(value))
    return sorted(found)
'''


@pytest.mark.parametrize("stem", ["02_paged_kv_cache", "04_sliding_window_sinks", "05_flash_attention"])
def test_a_memory_walk_in_the_contestant_finds_no_such_function(stem, tmp_path):
    """In a real contestant of each exercise: the functions a notebook can find in its
    own memory that came from the references include none its tests call."""
    from tests.meta.test_hostile_isolation import open_stub_with

    proxy = open_stub_with(stem, PROBE, tmp_path)
    try:
        for exercise in _exercises(stem):
            proxy.use(exercise)
            found = set(proxy.probe())
            expected_from = substitute.graded_with(stem).get(exercise, frozenset())
            assert not found & expected_from, f"{exercise}'s contestant holds {sorted(found & expected_from)}"
    finally:
        proxy.close()
