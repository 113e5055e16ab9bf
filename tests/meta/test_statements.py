"""Every graded rule is stated where the student reads it.

A grader that expects an exception (``grading.compare.assert_raises(fn, ..., exc=E,
names="arg")``, or ``with pytest.raises(E)``) grades a rule the student has to know:
"raise E naming ``arg``". The student reads the exercise's docstring, which the stub
keeps. So, for every such expectation, the docstring of the function the grader calls
(in the solution notebook, which generates the stub) must name the exception type and,
in the same paragraph, the argument.

Both sides are read structurally, never by matching text in the source:

- the graders with :mod:`ast` (which calls expect an exception, with which ``exc``,
  ``names`` and callable), their parameters from the ``pytest.mark.parametrize`` marks
  of the imported test functions (so cases built by helper functions are seen as
  pytest sees them), and locals by evaluating their assignments in the test module;
- the notebooks with :mod:`ast` per code cell of the stub the student gets (each
  ``def``/``class``, its docstring, and the exercise whose ``NotImplementedError`` it raises).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import itertools
import re
import textwrap
from dataclasses import dataclass

import pytest

from grading.layout import EXERCISE_ID, cell_source, discover_chapters, exercise_of_marker
from grading.loader import read_notebook
from grading.stubs import make_stub

CHAPTERS = [c for c in discover_chapters() if c.number != 7]  # Chapter 7 is being rewritten on another branch
DEFAULT_EXC = ("ValueError", "TypeError")  # assert_raises's default


@dataclass(frozen=True)
class Expectation:
    exercise: str
    test: str
    target: str | None  # the function, method or class the grader calls (None: any of the exercise's)
    excs: tuple[str, ...]  # the docstring must name one of these
    names: str | None  # the argument the message must name


class Unresolved(Exception):
    pass


@dataclass(frozen=True)
class Callee:
    name: str


# -- the graders --------------------------------------------------------------------


def _bindings(function):
    """Each combination of the test's parametrize cases, as {argname: value}."""
    axes = []
    for mark in getattr(function, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        argnames, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        cases = []
        for value in values:
            value = getattr(value, "values", value)  # pytest.param(...)
            if len(names) == 1 and not (hasattr(value, "__len__") and len(value) == 1 and isinstance(value, tuple)):
                value = (value,)
            cases.append(dict(zip(names, value)))
        axes.append(cases)
    for combo in itertools.product(*axes):
        merged = {}
        for part in combo:
            merged.update(part)
        yield merged


def _assignments(tree) -> dict[str, ast.AST]:
    """Local name -> the expression that assigns it (tuple targets keep their position)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value
                elif isinstance(target, ast.Tuple):
                    for i, element in enumerate(target.elts):
                        if isinstance(element, ast.Name):
                            out[element.id] = ast.Subscript(node.value, ast.Constant(i), ast.Load())
    return out


class Resolver:
    def __init__(self, module, function_tree, binding):
        self.env = {**vars(builtins), **vars(module), **binding}
        self.binding = binding
        self.locals = _assignments(function_tree)

    def value(self, node):
        """The value of a grader expression that does not involve the notebook."""
        if isinstance(node, ast.Name) and node.id not in self.binding and node.id in self.locals:
            return self.value(self.locals[node.id])
        if isinstance(node, ast.Tuple):
            return tuple(self.value(e) for e in node.elts)
        if isinstance(node, ast.Subscript):
            return self.value(node.value)[self.value(node.slice)]
        try:
            code = compile(ast.fix_missing_locations(ast.Expression(body=node)), "<grader>", "eval")
            return eval(code, dict(self.env))
        except Exception as exc:
            raise Unresolved(f"cannot evaluate `{ast.unparse(node)}`: {exc}") from None

    def callee(self, node) -> Callee | None:
        """The notebook function, method or class a grader calls: ``nb.f``, ``cache.append``,
        ``getattr(nb, name)``, or a local bound to one of these."""
        if isinstance(node, ast.Name) and node.id in self.locals:
            return self.callee(self.locals[node.id])
        if isinstance(node, ast.Attribute):
            return Callee(node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            return Callee(self.value(node.args[1]))
        if isinstance(node, ast.Call):  # a factory such as make_cache(nb): any of the exercise's
            return None
        raise Unresolved(f"cannot tell which notebook function `{ast.unparse(node)}` is")


def _exc_names(value) -> tuple[str, ...]:
    values = value if isinstance(value, tuple) else (value,)
    return tuple(v.__name__ if isinstance(v, type) else str(v) for v in values)


def grader_expectations(chapter) -> list[Expectation]:
    module = importlib.import_module(f"tests.test_{chapter.stem}")
    tree = ast.parse(chapter.test_file.read_text())
    out = []
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        if "nb" not in [a.arg for a in node.args.args]:
            continue
        function = getattr(module, node.name)
        exercises = [exercise_of_marker(m.name) for m in getattr(function, "pytestmark", [])]
        exercise = next((e for e in exercises if e), None)
        calls = []
        for call in ast.walk(node):
            if not isinstance(call, ast.Call):
                continue
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
            if name == "assert_raises":
                keywords = {k.arg: k.value for k in call.keywords}
                calls.append((call.args[0], keywords.get("exc"), keywords.get("names")))
            elif name == "raises" and isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "pytest":
                keywords = {k.arg: k.value for k in call.keywords}
                calls.append((None, call.args[0], keywords.get("match")))
        if not calls:
            continue
        assert exercise, f"{chapter.test_file.name}::{node.name} expects an exception but has no exN_M marker"
        for binding in _bindings(function):
            resolver = Resolver(module, node, binding)
            for target, exc, names in calls:
                callee = resolver.callee(target) if target is not None else None
                excs = _exc_names(resolver.value(exc)) if exc is not None else DEFAULT_EXC
                name = resolver.value(names) if names is not None else None
                out.append(Expectation(exercise, node.name, callee.name if callee else None, excs, name))
    return sorted(set(out), key=lambda e: (e.exercise, e.test, e.target or "", e.excs, e.names or ""))


# -- the notebooks ------------------------------------------------------------------


@dataclass
class Definition:
    name: str
    docstring: str
    exercises: set[str]  # exercises whose solution region lies inside it


def notebook_definitions(path) -> list[Definition]:
    """Every function, method and class of the notebook *as the student gets it* (the
    stub that ``grading.stubs`` makes from the solution: a docstring inside the solution
    region would be gone), with its docstring and the exercises it belongs to (the
    ``raise NotImplementedError("Exercise N.M: ...")`` the stub puts in it). A method's
    docstring includes its class's; a class's includes its ``__init__``'s."""
    out = []
    for cell in make_stub(read_notebook(path), path.name).cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell_source(cell))
        except SyntaxError:
            continue

        def exercises(node):
            return {m.group(1) for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    for m in [EXERCISE_ID.match(n.value)] if m}

        def visit(node, outer_doc=""):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(child) or ""
                    out.append(Definition(child.name, doc + "\n\n" + outer_doc, exercises(child)))
                elif isinstance(child, ast.ClassDef):
                    doc = ast.get_docstring(child) or ""
                    init = next((c for c in child.body if isinstance(c, ast.FunctionDef) and c.name == "__init__"), None)
                    init_doc = (ast.get_docstring(init) or "") if init else ""
                    out.append(Definition(child.name, doc + "\n\n" + init_doc, exercises(child)))
                    visit(child, doc)
        visit(tree)
    return out


def paragraphs(docstring: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", textwrap.dedent(docstring)) if p.strip()]


def stated(doc: str, excs: tuple[str, ...], names: str | None) -> bool:
    """One paragraph names one of the exception types and (if any) the argument."""
    for paragraph in paragraphs(doc):
        if any(re.search(rf"\b{re.escape(e)}\b", paragraph) for e in excs):
            if names is None or re.search(rf"(?<![\w.]){re.escape(names)}\b", paragraph):
                return True
    return False


def unstated(chapter) -> list[str]:
    definitions = notebook_definitions(chapter.solution)
    problems = []
    for e in grader_expectations(chapter):
        own = [d for d in definitions if e.exercise in d.exercises]
        if e.target is not None:
            matches = [d for d in own if d.name == e.target] or [d for d in definitions if d.name == e.target]
        else:
            matches = own
        if not matches:
            problems.append(f"{e.test}: the grader calls `{e.target}`, which no cell of exercise {e.exercise} defines")
            continue
        if not any(stated(d.docstring, e.excs, e.names) for d in matches):
            rule = " or ".join(e.excs) + (f" naming `{e.names}`" if e.names else "")
            problems.append(f"Exercise {e.exercise}, `{e.target or 'its functions'}` ({e.test}): "
                            f"the grader expects {rule}; its docstring does not say so in one paragraph")
    return sorted(set(problems))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_every_expected_exception_is_in_the_docstring(chapter):
    problems = unstated(chapter)
    assert not problems, f"{chapter.solution.name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_the_statement_check_sees_the_graders(chapter):
    """The check must not pass by finding nothing: every chapter has bad-input tests."""
    assert grader_expectations(chapter), f"{chapter.test_file.name}: no expected exception found"


def test_the_statement_check_can_fail():
    doc = "Bytes per token.\n\nRaises TypeError naming ``head_dim`` for a float."
    assert stated(doc, ("TypeError",), "head_dim")
    assert not stated(doc, ("ValueError",), "head_dim")
    assert not stated(doc, ("TypeError",), "num_layers")
    assert not stated("Raises TypeError.\n\nhead_dim is an int.", ("TypeError",), "head_dim")


def test_validation_helpers_live_in_one_hidden_cell():
    """Issue 16, item 7: the notebook starts with the exercise. The shared validation
    helpers sit in one cell after the setup, hidden in the book and collapsed in Jupyter,
    with one name per check (the integer check is ``_check_int`` in every notebook)."""
    for chapter in CHAPTERS:
        cells = []
        for index, cell in enumerate(read_notebook(chapter.solution).cells):
            if cell.cell_type != "code":
                continue
            tree = ast.parse(cell_source(cell))
            helpers = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_check")]
            assert "_check_count" not in helpers, f"{chapter.solution.name} cell {index}: the integer check is `_check_int`"
            if helpers:
                cells.append(index)
                assert "hide-cell" in cell.metadata.get("tags", []), f"{chapter.solution.name} cell {index}: tag it hide-cell"
                assert cell.metadata.get("jupyter", {}).get("source_hidden"), f"{chapter.solution.name} cell {index}: collapse it"
        assert len(cells) <= 1, f"{chapter.solution.name}: validation helpers in cells {cells}; keep them in one cell"
