"""Chapter 7's compile check, decided outside the notebook's process.

The interpreter runs kernels the GPU compiler rejects, so each graded kernel must also
compile for an A100 and an H100 (``gpucompile``: Triton's compiler and ptxas, no GPU
needed). The judge does not ask the notebook's process whether it did: that process runs
the notebook's code, which could answer anything. Instead:

1. The judge reads the kernels' *source* in the notebook's file (:func:`notebook_kernels`:
   the last top-level ``@triton.jit`` definition of each name, in the cells that are run),
   with the references' kernels in place of the other exercises' where an exercise is
   graded alone (7.4's helpers inside the reference flash kernel), and the scalar
   constants a kernel may read, evaluated here without running anything (:func:`_evaluate`).
2. The contestant only says what the notebook's wrapper launches (its block sizes,
   ``num_warps``): a :class:`LaunchRequest`, checked here against the parameters of the
   kernel read in step 1; it must launch the exercise's own kernel.
3. A fresh child in the contestants' sandbox (``grading.proc.zygote.contain``), which never
   ran a cell of the notebook, defines those kernels from their source and compiles them
   (``python -m gpucompile``). Defining them runs nothing of the notebook's: a definition
   whose decorators, defaults or annotations would run code is refused before the child
   starts (:func:`runs_code_when_defined`).

A stub kernel (its source still raises ``NotImplementedError``) fails on its stub message,
read from the text. What is still trusted: Triton's compiler itself, which the child runs
on the notebook's kernel source (it parses the kernel, and runs no statement of it).
"""

from __future__ import annotations

import ast
import json
import math
import operator
from dataclasses import dataclass, field

from grading.compare import GradingFailure
from grading.judge.triton_child import REFERENCE_KERNELS, compile_outside
from grading.layout import ROOT, cell_source

MODULES = {"triton": "triton", "triton.language": "triton.language", "math": "math"}  # a kernel may name these
NUM_WARPS = (1, 2, 4, 8, 16, 32)
NUM_STAGES = range(1, 9)


@dataclass
class KernelSource:
    """One ``@triton.jit`` function as written: its file (``name.ipynb#cell-N``, as the
    contestant names a cell), its first line there (its first decorator's), its text, and
    its parameters."""

    file: str
    first: int
    source: str
    params: list[str]
    node: ast.FunctionDef = field(repr=False)


@dataclass
class Kernels:
    """What the notebook's text defines for its kernels: the ``@triton.jit`` functions, the
    modules it imports under a name a kernel may use, and its plain constants."""

    functions: dict[str, KernelSource] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    values: dict[str, dict] = field(default_factory=dict)  # name -> {"plain": v} or {"constexpr": v}


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr == "jit" and isinstance(target.value, ast.Name)
            and target.value.id == "triton") or (isinstance(target, ast.Name) and target.id == "jit")


def _is_name_chain(node: ast.expr | None) -> bool:
    """``tl.constexpr``, ``int``: evaluating it only looks names up."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node is None or isinstance(node, ast.Name)


def _literal(node: ast.expr | None) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def runs_code_when_defined(node: ast.FunctionDef) -> str | None:
    """What in the definition of ``node`` would run code when the ``def`` runs (a decorator
    other than ``triton.jit`` with literal arguments, a default that is not a literal, an
    annotation that is not a name), or None: defining it runs nothing of the notebook's."""
    for decorator in node.decorator_list:
        if not _is_jit(decorator) or (isinstance(decorator, ast.Call) and not (
                not decorator.args and all(_literal(k.value) for k in decorator.keywords))):
            return f"the decorator `@{ast.unparse(decorator)[:80]}`"
    arguments = node.args
    for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
        if not _literal(default):
            return f"the default value `{ast.unparse(default)[:80]}`"
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    for annotation in [a.annotation for a in every if a is not None] + [node.returns]:
        if not _is_name_chain(annotation):
            return f"the annotation `{ast.unparse(annotation)[:80]}`"
    return None


def _params(node: ast.FunctionDef) -> list[str]:
    return [a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]]


def _code_cells(text: str):
    """(cell index, code) of the cells a contestant runs: code cells not tagged
    ``skip-grading``, IPython lines blanked as the loader does."""
    from grading.notebook.loader import SKIP_TAG, strip_ipython

    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError, RecursionError):
        return
    for index, cell in enumerate(cells if isinstance(cells, list) else []):
        if not (isinstance(cell, dict) and cell.get("cell_type") == "code"):
            continue
        tags = (cell.get("metadata") or {}).get("tags") if isinstance(cell.get("metadata"), dict) else None
        if isinstance(tags, list) and SKIP_TAG in tags:
            continue
        yield index, strip_ipython(cell_source(cell))[0]


SCALARS = (bool, int, float, str, type(None))  # the constants a kernel may read (and JSON carries)
MATH = {"sqrt": math.sqrt, "log": math.log, "log2": math.log2, "log10": math.log10, "exp": math.exp}
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _evaluate(node: ast.expr, known: dict):
    """The value of a constant expression: scalar literals, the constants read so far
    (``known``), arithmetic, ``math.pi``, ``math.e`` and ``math.sqrt``/``log``/``exp`` of
    those. Anything else (a call of the notebook's own, an attribute of an object) raises
    ValueError: this reads values, it runs nothing of the notebook's."""
    if isinstance(node, ast.Constant) and isinstance(node.value, SCALARS):
        return node.value
    if isinstance(node, ast.Name) and node.id in known:
        return known[node.id][next(iter(known[node.id]))]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math" \
            and node.attr in ("pi", "e"):
        return getattr(math, node.attr)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _number(-_number(_evaluate(node.operand, known)) if isinstance(node.op, ast.USub)
                       else _evaluate(node.operand, known))
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = _number(_evaluate(node.left, known)), _number(_evaluate(node.right, known))
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("an exponent too large for a constant")
        return _number(OPERATORS[type(node.op)](left, right))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "math" and node.func.attr in MATH and len(node.args) == 1 and not node.keywords):
        return MATH[node.func.attr](_number(_evaluate(node.args[0], known)))
    raise ValueError("not a constant expression")


def _number(value):
    """``value`` when it is an int or a float a kernel can hold (an int within 64 bits):
    so a chain of constants cannot grow without bound in the judge."""
    if type(value) not in (int, float) or (type(value) is int and abs(value) >= 2**64):
        raise ValueError("not a number a kernel can hold")
    return value


def _constant(node: ast.expr, known: dict) -> dict | None:
    """``{"plain": v}`` for a constant expression (:func:`_evaluate`), ``{"constexpr": v}``
    for ``tl.constexpr(expression)``; None for anything else."""
    wrapped = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "constexpr"
               and len(node.args) == 1 and not node.keywords)
    try:
        value = _evaluate(node.args[0] if wrapped else node, known)
    except (ValueError, TypeError, ArithmeticError, RecursionError):
        return None
    return {"constexpr" if wrapped else "plain": value} if isinstance(value, SCALARS) else None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def _stored_names(node: ast.stmt) -> set[str]:
    """The top-level names a statement binds: not the locals of a function or class it
    defines, nor a comprehension's variables (scopes of their own)."""
    names, todo = set(), [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
        elif isinstance(sub, ast.alias):
            names.add((sub.asname or sub.name).split(".")[0])
        if isinstance(sub, _SCOPES):
            names.update([sub.name] if isinstance(sub, _SCOPES[:3]) else [])
            continue
        todo.extend(ast.iter_child_nodes(sub))
    return names


def _read_statement(kernels: Kernels, node: ast.stmt, lines: list[str], file: str) -> None:
    """What one top-level statement defines, in order: a later binding replaces an earlier one."""
    assigned = isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
    value = _constant(node.value, kernels.values) if assigned else None  # before it rebinds (``N = N * 2``)
    for name in _stored_names(node):
        for table in (kernels.functions, kernels.modules, kernels.values):
            table.pop(name, None)
    if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        source = "".join(lines[first - 1: node.end_lineno])
        kernels.functions[node.name] = KernelSource(file, first, source, _params(node), node)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            if isinstance(node, ast.ImportFrom):
                module, bound = f"{node.module}.{alias.name}", alias.asname or alias.name
            else:
                module = alias.name if alias.asname else alias.name.split(".")[0]
                bound = alias.asname or module
            if module in MODULES:
                kernels.modules[bound] = MODULES[module]
    elif assigned:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if value is not None and len(targets) == 1 and isinstance(targets[0], ast.Name):
            kernels.values[targets[0].id] = value


def notebook_kernels(text: str, display: str) -> Kernels:
    """The kernels, modules and constants the notebook's JSON ``text`` defines at top level,
    read without running it; cells that do not parse are skipped (the contestant reports them)."""
    kernels = Kernels()
    for index, source in _code_cells(text):
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        lines = source.splitlines(True)
        for node in tree.body:
            _read_statement(kernels, node, lines, f"{display}#cell-{index}")
    return kernels


def reference_kernels() -> tuple[dict, dict[str, KernelSource]]:
    """The references' module-level code without its functions (run first in the child:
    their constants), and their ``@triton.jit`` functions."""
    text = REFERENCE_KERNELS.read_text()
    tree = ast.parse(text)
    lines = text.splitlines(True)
    file = str(REFERENCE_KERNELS.relative_to(ROOT))
    functions = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            functions[node.name] = KernelSource(file, first, "".join(lines[first - 1: node.end_lineno]),
                                                _params(node), node)
    tree.body = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return {"file": file, "source": ast.unparse(tree)}, functions


# -- what the wrapper launches, as the contestant says ---------------------------------------------
@dataclass(frozen=True)
class LaunchRequest:
    """One launch the notebook's wrapper made, captured in the contestant
    (``gpucompile.chapter07.launch_request``): the kernel's name, the Triton type of each
    runtime argument, the value of each constexpr, the arguments marked divisible by 16,
    the target and the launch options."""

    kernel: str
    signature: dict
    constexprs: dict
    attrs: dict
    arch: str
    num_warps: int
    num_stages: int

    @classmethod
    def from_json(cls, data) -> "LaunchRequest":
        """The record, or GradingFailure saying what is off its schema (it came from the
        notebook's process)."""
        if not (isinstance(data, dict) and set(data) == set(cls.__dataclass_fields__) and _well_typed(data)):
            raise GradingFailure(f"the notebook's process described its kernel's launch in a form the grader does "
                                 f"not read: {json.dumps(data, default=str)[:300]}")
        return cls(**data)

    def problem_with(self, params: list[str]) -> str | None:
        """Why this launch does not fit a kernel whose parameters are ``params``, or None."""
        given = [*self.signature, *self.constexprs]
        if sorted(given) != sorted(params) or not set(self.attrs) <= set(self.signature):
            return (f"the launch of `{self.kernel}` that your wrapper made names the arguments {sorted(given)}, "
                    f"and the kernel in your notebook's file takes {params}")
        return None


def _well_typed(data: dict) -> bool:
    from gpucompile import ARCHS

    tables = (data["signature"], data["constexprs"], data["attrs"])
    return (isinstance(data["kernel"], str) and data["kernel"].isidentifier() and data["arch"] in ARCHS
            and type(data["num_warps"]) is int and data["num_warps"] in NUM_WARPS
            and type(data["num_stages"]) is int and data["num_stages"] in NUM_STAGES
            and all(isinstance(t, dict) and all(isinstance(k, str) and k.isidentifier() for k in t) for t in tables)
            and all(isinstance(t, str) and len(t) <= 32 for t in data["signature"].values())
            and all(type(v) in SCALARS or _is_dtype(v) for v in data["constexprs"].values())
            and all(isinstance(marks, list) and all(isinstance(m, list) and len(m) == 2 and isinstance(m[0], str)
                                                    and type(m[1]) is int for m in marks)
                    for marks in data["attrs"].values()))


def _is_dtype(value) -> bool:
    """A Triton dtype passed as a constexpr, as the contestant writes it: ``{"tl_dtype": "fp16"}``."""
    return (isinstance(value, dict) and set(value) == {"tl_dtype"} and isinstance(value["tl_dtype"], str)
            and value["tl_dtype"].isidentifier())


# -- the compile, in a child of its own ------------------------------------------------------------
def kernels_for(text: str, display: str, alone: str | None) -> Kernels:
    """The notebook's kernels, with the references' in place of the kernels other exercises
    own where exercise ``alone`` is graded alone (as the contestant swaps them)."""
    from gpucompile.chapter07 import GRADED_KERNELS

    kernels = notebook_kernels(text, display)
    if alone is None or not REFERENCE_KERNELS.exists():
        return kernels
    _, references = reference_kernels()
    for exercise, names in GRADED_KERNELS.items():
        for name in names if exercise != alone else ():
            if name in references:
                kernels.functions[name] = references[name]
    return kernels


def stub_or_missing(kernels: Kernels, names: tuple[str, ...]) -> None:
    """Raise NotImplementedError with the stub's message where one of ``names`` is still a
    stub, GradingFailure where one is no ``@triton.jit`` function of the notebook's file."""
    for name in names:
        found = kernels.functions.get(name)
        if found is None:
            raise GradingFailure(f"`{name}` is not a `@triton.jit` function of your notebook (its last top-level "
                                 f"definition, in a cell the grader runs): the grader compiles that source")
        if "raise NotImplementedError(" in found.source:
            message = found.source.split("raise NotImplementedError(", 1)[1].split(")")[0].strip().strip("\"'")
            raise NotImplementedError(message)


def compile_job(kernels: Kernels, request: LaunchRequest) -> dict:
    """The child's job (``gpucompile.child_main``) for ``request``: every kernel of the
    file, each checked to run nothing of the notebook's when it is defined."""
    kernel = kernels.functions.get(request.kernel)
    if kernel is None:
        raise GradingFailure(f"your wrapper launched `{request.kernel}`, which is not a `@triton.jit` function of "
                             f"your notebook's file")
    problem = request.problem_with(kernel.params)
    if problem:
        raise GradingFailure(problem)
    for name, found in kernels.functions.items():
        runs = runs_code_when_defined(found.node)
        if runs:
            raise GradingFailure(f"`{name}` runs code when it is defined ({runs}): the grader compiles your kernels "
                                 f"from their source alone; keep the definition to `@triton.jit` and plain values")
    # The kernel and the jitted functions it names (Triton finds its callees by name): the
    # file's other kernels change nothing of this compile, so they stay out of the job.
    needed = _reachable(kernels.functions, request.kernel)
    functions = {n: f for n, f in kernels.functions.items() if n in needed}
    setup = [{"file": "grading", "source": "from triton import jit"}]
    if any(f.file.endswith(REFERENCE_KERNELS.name) for f in functions.values()):
        setup.append(reference_kernels()[0])
    return {"kernel": request.kernel, "setup": setup, "modules": kernels.modules, "values": kernels.values,
            "functions": {n: {"file": f.file, "first": f.first, "source": f.source} for n, f in functions.items()},
            "signature": request.signature, "constexprs": request.constexprs, "attrs": request.attrs,
            "arch": request.arch, "num_warps": request.num_warps, "num_stages": request.num_stages}


def _reachable(functions: dict[str, KernelSource], start: str) -> set[str]:
    """``start`` and every function of ``functions`` it names, through any chain of names."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        todo += [n.id for n in ast.walk(functions[name].node) if isinstance(n, ast.Name)]
    return seen


def check_compile(text: str, display: str, exercise: str, alone: str | None, launched, timeout: float) -> None:
    """Exercise ``exercise``'s kernel, read in the notebook's JSON ``text`` (named
    ``display``), compiled as the launch that ``launched()`` returns (plain values from the
    contestant, asked only once the text shows no stub) says; ``alone``: the exercise graded
    alone, or None. Raises NotImplementedError for a stub and GradingFailure with the
    compiler's words (or why it could not compile)."""
    from gpucompile.chapter07 import GRADED_CASES, GRADED_KERNELS

    kernels = kernels_for(text, display, alone)
    stub_or_missing(kernels, GRADED_KERNELS[exercise])
    launch = LaunchRequest.from_json(launched())
    expected = GRADED_CASES[exercise].split("-")[0]
    if launch.kernel != expected:
        raise GradingFailure(f"the wrapper of Exercise {exercise} launched `{launch.kernel}`, not `{expected}`: "
                             f"the grader compiles the kernel the exercise asks for")
    error = compile_outside(compile_job(kernels, launch), timeout)
    if error is not None:
        raise GradingFailure(f"{error}\n  (the interpreter runs a kernel the GPU compiler may reject; compiled as "
                             f"on a GPU: bf16, {launch.constexprs}, num_warps={launch.num_warps})")
