"""The graded rules of each exercise's statement, and the catalogue bugs that break them.

A statement says *what* an exercise computes; the rules a grader enforces (an exception,
a return type, a tie-break, a unit, an input left unmodified) are listed in the docstring
of the exercise's function, under a line ``Graded rules:``, one ``- `` bullet each::

    def schedule_step(running, waiting, free_pages, page_size, token_budget=None):
        \"\"\"The requests that run in this step ...

        Graded rules:
        - every granted token counts against token_budget, a decode's single token included
        - ties in arrival go to the lower id
        \"\"\"

A bullet may wrap: its lines are joined with single spaces, and that is its text. The
section ends at a blank line or at a line that is neither a bullet nor a continuation.

The chapter's catalogue (``tests/catalogue/NN_topic.py``) maps each bullet, verbatim, to
the bugs that break it: ``RULES = {"12.5": {"every granted token ...": ("step_decodes_outside_budget",)}}``.
``pytest --prove`` already proves that every bug is rejected; :func:`problems` proves
that every stated rule has such a bug, so a rule no grader can catch does not go unseen.
"""

from __future__ import annotations

import ast
import textwrap

from grading.layout import SOLUTIONS, cell_source
from grading.notebook.catalogue import load_catalogue, load_rules
from grading.notebook.loader import read_notebook
from grading.notebook.regions import exercises_in, find_regions

HEADING = "Graded rules:"
# The chapters whose catalogue must declare RULES; a chapter joins once its statements
# list their graded rules.
MUST_DECLARE = frozenset({"12_serving", "13_mla", "14_speculative_decoding"})


class RuleError(ValueError):
    """A statement's rules cannot be read: a section outside any exercise's function,
    or one function holding the regions of two exercises."""


def parse_rules(docstring: str) -> list[str]:
    """The bullets under ``Graded rules:`` in ``docstring``, each as one line of text
    (continuation lines joined with single spaces); [] when there is no such section."""
    lines = textwrap.dedent(docstring).splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == HEADING]
    if not starts:
        return []
    bullets: list[str] = []
    for line in lines[starts[0] + 1:]:
        stripped = line.strip()
        if stripped.startswith("- "):
            bullets.append(stripped[2:].strip())
        elif stripped and bullets and line[:1].isspace():
            bullets[-1] += " " + stripped
        else:
            break
    return bullets


def _definitions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node


def statement_rules(notebook, name: str = "notebook") -> dict[str, list[str]]:
    """Exercise id -> the graded rules its statement lists, in order, read from the
    docstrings of the solution notebook's code cells (``notebook``: an nbformat node).
    A docstring's rules belong to the exercise whose solution region lies inside that
    function or class. Raises :class:`RuleError` for rules in a definition that holds no
    region or the regions of two exercises."""
    out: dict[str, list[str]] = {}
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        source = cell_source(cell)
        where = f"{name} cell {index}"
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        regions = find_regions(source, where)
        for node in _definitions(tree):
            bullets = parse_rules(ast.get_docstring(node) or "")
            if not bullets:
                continue
            # ast counts lines from 1, regions from 0
            inside = {r.exercise for r in regions if node.lineno <= r.start + 1 <= node.end_lineno}
            if len(inside) != 1:
                raise RuleError(f"{where}: `{node.name}` lists graded rules but holds the regions of "
                                f"{sorted(inside) or 'no exercise'}; put them in one exercise's function")
            out.setdefault(inside.pop(), []).extend(bullets)
    return out


def problems(stated: dict[str, list[str]], rules: dict | None, bugs, exercises, must_declare: bool) -> list[str]:
    """Why a chapter's rule table does not prove its statements; [] when it does.

    ``stated``: :func:`statement_rules`; ``rules``: the catalogue's ``RULES`` (None when it
    declares none); ``bugs``: its ``BUGS``; ``exercises``: the notebook's exercise ids;
    ``must_declare``: the chapter is in :data:`MUST_DECLARE`. A rule with no entry, an
    entry naming no bug, a bug that does not exist or belongs to another exercise, an
    entry that is no bullet of the statement, and (where RULES is declared) an exercise
    whose statement lists no rule are problems."""
    if rules is None:
        return ["the catalogue declares no RULES (every exercise's graded rules -> the bugs that break them)"] \
            if must_declare else []
    exercise_of = {b.name: b.exercise for b in bugs}
    out = []
    for exercise in sorted(set(exercises) - set(stated)):
        out.append(f"Exercise {exercise}: its statement lists no `{HEADING}`")
    for exercise, bullets in sorted(stated.items()):
        table = rules.get(exercise, {})
        for bullet in bullets:
            if bullet not in table:
                out.append(f"Exercise {exercise}: the rule {bullet!r} has no entry in RULES")
        for rule, names in sorted(table.items()):
            out += _entry_problems(exercise, rule, names, bullets, exercise_of)
    for exercise in sorted(set(rules) - set(stated)):
        out += [f"Exercise {exercise}: RULES has {rule!r}, but the statement lists no rules"
                for rule in sorted(rules[exercise])]
    return out


def _entry_problems(exercise: str, rule: str, names, bullets: list[str], exercise_of: dict[str, str]) -> list[str]:
    out = []
    if rule not in bullets:
        out.append(f"Exercise {exercise}: RULES has {rule!r}, which is not a bullet of its statement")
    if isinstance(names, str) or not names:
        out.append(f"Exercise {exercise}: the rule {rule!r} names no catalogue bug (a tuple of bug names)")
        return out
    for bug in names:
        if bug not in exercise_of:
            out.append(f"Exercise {exercise}: the rule {rule!r} names {bug!r}, which is not in BUGS")
        elif exercise_of[bug] != exercise:
            out.append(f"Exercise {exercise}: the rule {rule!r} names {bug!r}, a bug of Exercise {exercise_of[bug]}")
    return out


def chapter_problems(stem: str) -> list[str]:
    """:func:`problems` for the chapter ``stem``, read from its solution notebook and its
    catalogue; a statement that cannot be read is one problem."""
    name = f"{stem}.ipynb"
    notebook = read_notebook(SOLUTIONS / name)
    try:
        stated = statement_rules(notebook, name)
    except RuleError as exc:
        return [str(exc)]
    exercises = {e for i, c in enumerate(notebook.cells) if c.cell_type == "code"
                 for e in exercises_in(cell_source(c), f"{name} cell {i}")}
    return problems(stated, load_rules(stem), load_catalogue(stem), exercises, stem in MUST_DECLARE)
