"""Every graded rule a statement lists names the catalogue bugs that break it
(grading.notebook.rules): the check ``pytest --prove`` runs, on the chapters and on probes."""

from __future__ import annotations

import nbformat
import pytest

from grading.layout import discover_chapters
from grading.notebook import rules
from grading.notebook.catalogue import Bug, load_rules

STEMS = [c.stem for c in discover_chapters()]

STATEMENT = '''# Exercise 9.1: count the pages.
def pages(n, page_size):
    """ceil(n / page_size).

    Graded rules:
    - raises ValueError naming ``n`` when it is
      negative
    - returns an int

    More prose after the section."""
    ### BEGIN SOLUTION
    return -(-n // page_size)
    ### END SOLUTION
'''
BUGS = [Bug("floor", "9.1", "floors", old="-(-n // page_size)", new="n // page_size"),
        Bug("float", "9.1", "a float", old="-(-n // page_size)", new="n / page_size"),
        Bug("other", "9.2", "another exercise's", old="x", new="y")]
BULLETS = ["raises ValueError naming ``n`` when it is negative", "returns an int"]


def _notebook(source: str = STATEMENT):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Exercises"), nbformat.v4.new_code_cell(source)]
    return nb


def _problems(table, stated=None, must=True):
    stated = rules.statement_rules(_notebook()) if stated is None else stated
    return rules.problems(stated, table, BUGS, {"9.1"}, must)


def test_a_statement_s_bullets_are_read_whole_and_in_order():
    assert rules.statement_rules(_notebook()) == {"9.1": BULLETS}
    assert rules.parse_rules("No rules here.\n\n- a bullet, but not under the heading") == []


def test_a_table_that_names_a_bug_for_every_rule_proves_the_statement():
    assert _problems({"9.1": {BULLETS[0]: ("floor",), BULLETS[1]: ("float", "floor")}}) == []


@pytest.mark.parametrize("table, said", [
    ({"9.1": {BULLETS[0]: ("floor",)}}, "has no entry"),  # the probe: a rule with no bug
    ({"9.1": {BULLETS[0]: ("floor",), BULLETS[1]: ()}}, "names no catalogue bug"),
    ({"9.1": {BULLETS[0]: ("floor",), BULLETS[1]: "float"}}, "names no catalogue bug"),
    ({"9.1": {BULLETS[0]: ("floor",), BULLETS[1]: ("missing",)}}, "not in BUGS"),
    ({"9.1": {BULLETS[0]: ("floor",), BULLETS[1]: ("other",)}}, "a bug of Exercise 9.2"),
    ({"9.1": {BULLETS[0]: ("floor",), BULLETS[1]: ("float",), "returns a float": ("float",)}}, "not a bullet"),
    ({"9.1": {BULLETS[0]: ("floor",), BULLETS[1]: ("float",)}, "9.2": {"x": ("other",)}}, "lists no rules"),
], ids=["rule-without-bug", "empty-entry", "string-entry", "unknown-bug", "other-exercise", "not-a-bullet",
        "no-statement"])
def test_the_check_fails_on_a_table_that_does_not_prove_the_statement(table, said):
    found = _problems(table)
    assert any(said in line for line in found), found


def test_a_chapter_that_must_declare_rules_fails_without_them_and_without_bullets():
    assert "declares no RULES" in _problems(None)[0]
    assert _problems(None, must=False) == []
    assert any("lists no `Graded rules:`" in line for line in _problems({}, stated={}))


def test_rules_in_a_function_without_an_exercise_cannot_be_read():
    helper = 'def helper():\n    """Graded rules:\n    - nothing"""\n'
    with pytest.raises(rules.RuleError, match="no exercise"):
        rules.statement_rules(_notebook(helper + "\n" + STATEMENT))


def test_the_chapters_that_must_declare_rules_exist():
    assert rules.MUST_DECLARE <= set(STEMS), sorted(rules.MUST_DECLARE - set(STEMS))
    assert {"12_serving", "13_mla", "14_speculative_decoding"} <= rules.MUST_DECLARE


@pytest.mark.parametrize("stem", sorted(s for s in STEMS if s in rules.MUST_DECLARE or load_rules(s) is not None))
def test_every_stated_rule_names_the_bugs_that_break_it(stem):
    """What ``--prove`` checks for the chapter, without running it: its statements' rules
    and its catalogue's RULES agree (each bug's rejection is proven by ``--prove``)."""
    found = rules.chapter_problems(stem)
    assert not found, f"{stem}:\n  " + "\n  ".join(found)
