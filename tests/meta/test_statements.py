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

The same holds for a result's type and precision: a grader that fails
on ``not isinstance(got, int)``, on ``got.dtype != torch.int64`` or on
``assert_close(..., dtype=torch.float64)``, or that compares with a relative tolerance
below float32's epsilon (``rtol=1e-12``, ``abs(got - want) > 1e-12 * want``), needs the
docstring to state the type, the dtype, or the precision (float64, or "exact").
"""

from __future__ import annotations

import ast
import builtins
import importlib
import itertools
import re
import textwrap
import types
from dataclasses import dataclass

import pytest

from grading.layout import EXERCISE_ID, cell_source, discover_chapters, exercise_of_marker
from grading.notebook.loader import read_notebook
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
                    init = next((c for c in child.body if isinstance(c, ast.FunctionDef) and c.name == "__init__"),
                                None)
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
    """The notebook starts with the exercise. The shared validation
    helpers sit in one cell after the setup, hidden in the book and collapsed in Jupyter,
    with one name per check (the integer check is ``_check_int`` in every notebook)."""
    for chapter in CHAPTERS:
        cells = []
        for index, cell in enumerate(read_notebook(chapter.solution).cells):
            if cell.cell_type != "code":
                continue
            tree = ast.parse(cell_source(cell))
            helpers = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_check")]
            assert "_check_count" not in helpers, \
                f"{chapter.solution.name} cell {index}: the integer check is `_check_int`"
            if helpers:
                cells.append(index)
                assert "hide-cell" in cell.metadata.get("tags", []), \
                    f"{chapter.solution.name} cell {index}: tag it hide-cell"
                assert cell.metadata.get("jupyter", {}).get("source_hidden"), \
                    f"{chapter.solution.name} cell {index}: collapse it"
        assert len(cells) <= 1, f"{chapter.solution.name}: validation helpers in cells {cells}; keep them in one cell"


# -- return types and stated precision -----------------------------
#
# A grader that checks the Python type of a result (``isinstance(got, int)``), a tensor's
# dtype (``got.dtype != torch.int64``, ``assert_close(..., dtype=torch.float64)``) or
# compares with a tolerance no float32 computation meets (``rtol=1e-12``,
# ``abs(got - want) > 1e-12 * want``) grades a rule too: the docstring must state the
# type, the dtype, or the precision (float64, or "exact").

PYTHON_TYPES = {"int", "float", "bool", "str"}  # tensors, tuples: the docstring's shapes say so
TIGHT = 2.0 ** -23  # float32's machine epsilon (1.2e-7): a relative tolerance below it is tighter than float32 gives
# what a docstring may write for each rule
WORDS = {
    "int": r"\bint\b|\bints\b|\binteger",
    "float": r"\bfloat\b|\bfloats\b|\bfloat64\b",
    "bool": r"\bbool\b|\bTrue\b|\bFalse\b|\bboolean",
    "str": r"\bstr\b|\bstring",
    "int64": r"\bint64\b|\btorch\.long\b|\blong\b",
    "int32": r"\bint32\b|\btorch\.int\b",
    "int8": r"\bint8\b",
    "uint8": r"\buint8\b",
    "float64": r"\bfloat64\b|\bfp64\b|\bdouble\b",
    "float32": r"\bfloat32\b|\bfp32\b",
    "float16": r"\bfloat16\b|\bfp16\b|\bhalf\b",
    "bfloat16": r"\bbfloat16\b|\bbf16\b",
    "precision": r"\bfloat64\b|\bfp64\b|\bdouble\b|\b[Ee]xact",
}
DTYPE_NAMES = {"long": "int64", "int": "int32", "double": "float64", "float": "float32", "half": "float16"}


@dataclass(frozen=True)
class TypeRule:
    exercise: str
    test: str
    target: str | None  # the notebook function whose result is checked, where the grader says
    rule: str  # a key of WORDS
    why: str  # the grader's check, as written


def _torch_dtype(node) -> str | None:
    """``torch.int64`` -> "int64" (``torch.long`` -> "int64"); None for anything else."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        name = DTYPE_NAMES.get(node.attr, node.attr)
        return name if name in WORDS else None
    return None


def _failing_tests(body) -> list[ast.AST]:
    """The conditions a grader fails on: an ``assert``'s, or an ``if``'s whose body raises."""
    out = []
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Assert):
            out.append(node.test)
        elif isinstance(node, ast.If) and any(isinstance(n, ast.Raise) for s in node.body for n in ast.walk(s)):
            out.append(node.test)
    return out


def _negated_checks(body) -> list[ast.AST]:
    """The ``isinstance(...)`` / ``type(x) is T`` tests a grader fails on (under ``not`` in
    a failing condition, or an assert's own), and every comparison in a failing condition."""
    out = []
    asserted = {id(n.test) for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Assert)}
    for test in _failing_tests(body):
        out += [n for n in ast.walk(test) if isinstance(n, ast.Compare)]
        negated = [n.operand for n in ast.walk(test) if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)]
        for scope in negated + ([test] if id(test) in asserted else []):
            out += [n for n in ast.walk(scope) if isinstance(n, ast.Call)]
    return out


def _origin(node, locals_) -> str | None:
    """The notebook function a checked value comes from: the last attribute called on the way
    (``got = nb.f(x)`` -> "f", ``nb.f(x)`` -> "f"); None where the grader does not say."""
    seen = set()
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            if node.id in locals_ and node.id not in seen:
                seen.add(node.id)
                stack.append(locals_[node.id])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            if isinstance(base, ast.Name) and base.id in ("nb",):
                return node.func.attr
            stack.append(base)
            stack += node.args
        elif isinstance(node, ast.Call):
            stack += node.args
        elif isinstance(node, (ast.Subscript, ast.Attribute)):
            stack.append(node.value)
        elif isinstance(node, ast.BinOp):  # abs(got - expected): the notebook's side first
            stack += [node.right, node.left]
        elif isinstance(node, ast.UnaryOp):
            stack.append(node.operand)
    return None


def _rules_in(node, resolver: Resolver, locals_) -> list[tuple[str | None, str, str]]:
    """(target, rule, why) for every type, dtype and precision check in one grader function."""
    out = []

    for check in _negated_checks(node.body):
        if isinstance(check, ast.Call) and getattr(check.func, "id", None) == "isinstance" and len(check.args) == 2:
            kinds = check.args[1].elts if isinstance(check.args[1], ast.Tuple) else [check.args[1]]
            named = [k.id for k in kinds if isinstance(k, ast.Name) and k.id in PYTHON_TYPES]
            if named and len(named) == len(kinds):  # isinstance(x, (int, float)): either one, stated
                out.append((_origin(check.args[0], locals_), " or ".join(named), ast.unparse(check)))
        elif isinstance(check, ast.Compare) and isinstance(check.left, ast.Call) and \
                getattr(check.left.func, "id", None) == "type" and isinstance(check.ops[0], (ast.Is, ast.Eq)):
            kind = check.comparators[0]
            if isinstance(kind, ast.Name) and kind.id in PYTHON_TYPES:
                out.append((_origin(check.left.args[0], locals_), kind.id, ast.unparse(check)))
    failing = {id(n) for test in _failing_tests(node.body) for n in ast.walk(test)}
    for sub in (n for stmt in node.body for n in ast.walk(stmt)):
        if isinstance(sub, ast.Compare) and id(sub) not in failing:
            continue
        if (isinstance(sub, ast.Compare) and len(sub.ops) == 1
                and isinstance(sub.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot))):
            left, right = sub.left, sub.comparators[0]
            for a, b in ((left, right), (right, left)):
                if isinstance(a, ast.Attribute) and a.attr == "dtype" and _torch_dtype(b):
                    out.append((_origin(a.value, locals_), _torch_dtype(b), ast.unparse(sub)))
        elif (isinstance(sub, ast.Compare) and len(sub.ops) == 1
                and isinstance(sub.ops[0], (ast.Gt, ast.Lt, ast.GtE, ast.LtE))):
            sides = [sub.left, sub.comparators[0]]
            for a, b in (sides, sides[::-1]):
                absolute = [n for n in ast.walk(a) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "abs"]
                tight = [n for n in ast.walk(b) if isinstance(n, ast.Constant) and isinstance(n.value, float)
                         and 0 < n.value < TIGHT]
                if absolute and tight:
                    out.append((_origin(absolute[0].args[0], locals_), "precision", ast.unparse(sub)))
        elif isinstance(sub, ast.Call) and getattr(sub.func, "id", getattr(sub.func, "attr", None)) == "assert_close":
            keywords = {k.arg: k.value for k in sub.keywords}
            target = _origin(sub.args[0], locals_) if sub.args else None
            why = ast.unparse(sub)
            if "dtype" in keywords and _torch_dtype(keywords["dtype"]):
                out.append((target, _torch_dtype(keywords["dtype"]), why))
            try:
                atol = resolver.value(keywords["atol"]) if "atol" in keywords else None
                rtol = resolver.value(keywords["rtol"]) if "rtol" in keywords else 0.0
                dtype = resolver.value(keywords["dtype"]) if "dtype" in keywords else None
            except Unresolved:
                continue
            if dtype is not None and dtype != importlib.import_module("torch").float64:
                continue  # a float32 (or lower) result: its tolerance is the dtype's, stated by the dtype rule
            if isinstance(atol, (int, float)) and isinstance(rtol, (int, float)) and 0 < rtol < TIGHT:
                out.append((target, "precision", f"{why} (rtol={rtol:g})"))
    return out


def grader_type_rules(chapter) -> list[TypeRule]:
    """Every type, dtype and precision rule of a chapter's graders, with the exercise it belongs
    to: a test's ``exN_M`` marker, or, in a helper, the markers of the tests that call it."""
    module = importlib.import_module(f"tests.test_{chapter.stem}")
    tree = ast.parse(chapter.test_file.read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    calls = {name: {c.func.id for c in ast.walk(ast.Module(body=f.body, type_ignores=[]))
                    if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in functions}
             for name, f in functions.items()}
    owners: dict[str, set[str]] = {name: set() for name in functions}
    for name in functions:
        if not name.startswith("test_"):
            continue
        marks = [exercise_of_marker(m.name) for m in getattr(getattr(module, name), "pytestmark", [])]
        exercise = next((e for e in marks if e), None)
        if exercise is None:
            continue
        todo, done = [name], set()
        while todo:
            current = todo.pop()
            if current in done:
                continue
            done.add(current)
            owners[current].add(exercise)
            todo += calls[current]
    out = []
    for name, node in functions.items():
        locals_ = _assignments(ast.Module(body=node.body, type_ignores=[]))
        if name.startswith("test_") and "nb" in [a.arg for a in node.args.args]:
            found = set()
            for binding in _bindings(getattr(module, name)):
                found.update(_rules_in(node, Resolver(module, node, binding), locals_))
        else:  # a helper: its module's constants resolve, its parameters do not
            resolver = Resolver(module, node, {})
            for parameter in node.args.args:
                resolver.env.pop(parameter.arg, None)
            found = set(_rules_in(node, resolver, locals_))
        for exercise in owners[name]:
            out += [TypeRule(exercise, name, target, rule, why) for target, rule, why in found]
    return sorted(set(out), key=lambda r: (r.exercise, r.test, r.target or "", r.rule, r.why))


def states(doc: str, rule: str) -> bool:
    """The docstring says the rule: for "int or float", either type."""
    return any(re.search(WORDS[r], doc) is not None for r in rule.split(" or "))


def unstated_types(chapter, rules=None, definitions=None) -> list[str]:
    definitions = notebook_definitions(chapter.solution) if definitions is None else definitions
    problems = []
    for r in grader_type_rules(chapter) if rules is None else rules:
        own = [d for d in definitions if r.exercise in d.exercises]
        matches = [d for d in own if d.name == r.target] or [d for d in definitions if d.name == r.target] or own
        if not matches:
            problems.append(f"{r.test}: no cell of exercise {r.exercise} defines a function")
            continue
        if not any(states(d.docstring, r.rule) for d in matches):
            said = "the precision (float64, or exact)" if r.rule == "precision" else f"the type {r.rule}"
            problems.append(f"Exercise {r.exercise}, `{r.target or 'its functions'}` ({r.test}): the grader checks "
                            f"`{r.why}`; its docstring does not state {said}")
    return sorted(set(problems))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_every_checked_type_and_precision_is_in_the_docstring(chapter):
    problems = unstated_types(chapter)
    assert not problems, f"{chapter.solution.name}:\n  " + "\n  ".join(problems)


def test_the_type_check_sees_the_graders():
    """The check must not pass by finding nothing: these rules are graded today, in a
    test (1.1's int, 10.3's rtol 1e-12, 10.4's ``torch.long``) or in a helper the tests
    call (4.2's int64 positions, in ``_check_contents``)."""
    found = {(r.exercise, r.target, r.rule) for c in CHAPTERS for r in grader_type_rules(c)}
    for rule in [("1.1", "kv_bytes_per_token", "int"), ("1.3", "convert_bytes", "float"),
                 ("10.3", "load_imbalance", "precision"), ("10.4", "shard_positions", "int64"),
                 ("4.2", None, "int64"), ("11.2", "h2o_scores", "float64"), ("11.2", "h2o_scores", "precision")]:
        assert rule in found, f"the check does not see {rule}"


GRADER = '''
def test_x(nb):
    got = nb.count(3)
    if not isinstance(got, int):
        raise GradingFailure("a count is an int")
    positions = nb.positions(3)
    if not isinstance(positions, torch.Tensor) or positions.dtype != torch.long:
        raise GradingFailure("expected int64")
    assert_close(nb.ratio(1), 1.0, "ratio", atol=1e-12, rtol=1e-12)
    assert_close(nb.approx(1), 1.0, "approx", atol=ATOL, rtol=ATOL)
    if abs(nb.share(1) - 0.5) > 1e-12 * 0.5:
        raise GradingFailure("share")
    expected = nb.other(1)
    if isinstance(expected, float):  # a branch, not a rule
        raise GradingFailure("")
    scale = nb.scales(1)
    if scale.dtype == torch.float16:  # a branch on the input, not in a failing condition
        scale = scale.float()
'''


def test_the_type_check_can_fail():
    """A synthetic grader: its rules are found (and its branches are not), and a docstring
    that does not state a rule is flagged, one that does is not."""
    module = types.ModuleType("fake_grader")
    module.torch, module.ATOL = importlib.import_module("torch"), 1e-5
    node = ast.parse(GRADER).body[0]
    found = {(target, rule) for target, rule, _ in _rules_in(node, Resolver(module, node, {}), _assignments(node))}
    assert found == {("count", "int"), ("positions", "int64"), ("ratio", "precision"), ("share", "precision")}

    def problems(rule, target, doc):
        return unstated_types(None, [TypeRule("9.9", "test_x", target, rule, "a check")],
                              [Definition(target, doc, {"9.9"})])

    assert problems("int", "count", "The number of pages. Raises ValueError naming ``n``.")
    assert not problems("int", "count", "The number of pages, as an int.")
    assert problems("int64", "positions", "The positions kept, oldest first.")
    assert not problems("int64", "positions", "The positions kept: (N,) int64.")
    assert problems("precision", "ratio", "max over min of the work, a float.")
    assert not problems("precision", "ratio", "max over min of the work, a float exact to float64.")
    assert not problems("precision", "ratio", "The number of whole pages, exactly.")
    assert problems("int or float", "ratio", "The attention factor.")
    assert not problems("int or float", "ratio", "The attention factor, a float.")
