"""Whether a Chapter 7 answer was computed by a Triton kernel, ruled on in the judge.

Chapter 7's exercises are kernels: ``vector_add`` written as ``x + y`` in PyTorch computes
the right values and is not the exercise. Two pieces of evidence, each required:

1. The notebook's text, read here (the judge holds it and runs none of it): the graded
   wrapper, or a function of the notebook it calls, launches the exercise's kernel,
   ``add_kernel[grid](...)``, and that kernel is a ``@triton.jit`` function the notebook
   defines (:func:`static_launch_problem`). The wrapper is the notebook's last top-level
   ``def`` of its name; a later cell that binds the name otherwise (``vector_add = ...``)
   leaves no wrapper to read.
2. What the call did, observed in the contestant while the kernel ran through the
   interpreter (:mod:`grading.contestant.triton_bounds`): every element of each tensor the call
   returned holds the bytes that a store of that kernel's launch last wrote there
   (:func:`dynamic_launch_problem`). This catches a launch in dead code, and a kernel that
   ran but whose result the wrapper threw away or overwrote in PyTorch.

The second piece fails closed. A contestant spawned to keep the record
(``Spawn.bounds_checked``) that answers a call without it, or with one off its schema, is
stopped as "tampered" (grading.judge.session), and a record that names fewer returned
tensors than the call returned fails the case: a notebook that suppresses the record earns
nothing for it.

The residual trust, stated: the record's content is kept in the contestant, a process
the notebook's code shares, so a notebook that patches grading.contestant.triton_bounds
could still write a consistent false one; the first piece cannot be forged that way, but
reading the text cannot prove that the launch runs. A kernel that copies a result computed
in PyTorch into its output passes both; the value tests of a kernel that computes nothing
cannot tell it from one that does. Compiled launches on a GPU are not observed: there only
the first piece is checked. The compile check does not depend on the contestant at all
(grading.judge.triton_compile).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field

from grading.layout import cell_source


def _code_cells(text: str) -> list[str]:
    """The notebook's code cells (its JSON ``text``), IPython lines blanked as the loader does."""
    from grading.notebook.loader import strip_ipython

    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        return []
    return [strip_ipython(cell_source(c))[0] for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"]


def _is_jit(decorator: ast.expr) -> bool:
    """``@triton.jit``, ``@jit``, ``@triton.jit(...)``."""
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    return (isinstance(decorator, ast.Attribute) and decorator.attr == "jit") or (
        isinstance(decorator, ast.Name) and decorator.id == "jit")


def _bound_names(node: ast.stmt) -> list[str]:
    """The top-level names a statement binds other than by ``def``."""
    names = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.append(sub.id)
        elif isinstance(sub, ast.alias):
            names.append((sub.asname or sub.name).split(".")[0])
        elif isinstance(sub, ast.ClassDef):
            names.append(sub.name)
    return names


def top_level_functions(text: str) -> dict[str, ast.FunctionDef | None]:
    """Name -> the last top-level ``def`` of it in the notebook, in cell order; None where a
    later statement binds the name some other way. Cells that do not parse are skipped."""
    functions: dict[str, ast.FunctionDef | None] = {}
    for source in _code_cells(text):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                functions[node.name] = node
            else:
                for name in _bound_names(node):
                    functions[name] = None
    return functions


def jit_functions(text: str) -> set[str]:
    """The names whose last top-level definition is a ``@triton.jit`` function."""
    return {name for name, node in top_level_functions(text).items()
            if node is not None and any(_is_jit(d) for d in node.decorator_list)}


def launched_kernels(text: str, wrapper: str) -> set[str]:
    """The ``@triton.jit`` functions of the notebook that ``wrapper`` launches
    (``kernel[grid](...)``), directly or through the notebook's other plain functions it calls."""
    functions = top_level_functions(text)
    jitted = {name for name, node in functions.items()
              if node is not None and any(_is_jit(d) for d in node.decorator_list)}
    launched: set[str] = set()
    seen: set[str] = set()
    todo = [wrapper]
    while todo:
        name = todo.pop()
        node = functions.get(name)
        if name in seen or node is None or name in jitted:
            continue
        seen.add(name)
        for sub in ast.walk(node):
            if not isinstance(sub, ast.Call):
                continue
            func = sub.func
            if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in jitted:
                launched.add(func.value.id)
            elif isinstance(func, ast.Name) and func.id in functions:
                todo.append(func.id)
    return launched


def static_launch_problem(text: str, wrapper: str, kernel: str) -> str | None:
    """Why the notebook's text shows no launch of ``kernel`` by ``wrapper``, or None."""
    functions = top_level_functions(text)
    if functions.get(wrapper) is None:
        return (f"the grader reads `{wrapper}` in your notebook to see which Triton kernel it launches, and finds "
                f"no top-level `def {wrapper}(...)` that is still `{wrapper}` at the end of the notebook")
    if kernel not in jit_functions(text):
        return (f"`{kernel}` is not a `@triton.jit` function of your notebook: this exercise is a Triton kernel, "
                f"and `{wrapper}` must compute its result by launching `{kernel}[grid](...)`")
    if kernel not in launched_kernels(text, wrapper):
        return (f"`{wrapper}` never launches `{kernel}` (no `{kernel}[grid](...)` in it or in the functions it "
                f"calls): this exercise is a Triton kernel, and a result computed with PyTorch operations earns "
                f"no points, even when its values are right")
    return None


def jit_problem(text: str, names: tuple[str, ...]) -> str | None:
    """Why one of ``names`` is not a ``@triton.jit`` function of the notebook, or None."""
    jitted = jit_functions(text)
    missing = [n for n in names if n not in jitted]
    if missing:
        return (f"{', '.join(f'`{n}`' for n in missing)} must be `@triton.jit` function(s) of your notebook: the "
                f"grader's kernel calls them as Triton code")
    return None


@dataclass
class Launches:
    """What the contestant saw one call's launches do (grading.contestant.triton_bounds ``evidence``)."""

    launches: list[str] = field(default_factory=list)
    launch_count: int = 0
    complete: bool = True
    outputs: list[dict] = field(default_factory=list)  # {"elements", "written", "kernels"} per returned tensor

    @classmethod
    def from_json(cls, data) -> "Launches | None":
        """None for anything but the evidence's exact shape (it came from the notebook's process)."""
        if not isinstance(data, dict) or set(data) != {"launches", "launch_count", "complete", "outputs"}:
            return None
        launches, count, complete, outputs = data["launches"], data["launch_count"], data["complete"], data["outputs"]
        if not (isinstance(launches, list) and all(isinstance(k, str) for k in launches[:100])
                and type(count) is int and type(complete) is bool and isinstance(outputs, list)):
            return None
        clean = []
        for out in outputs[:8]:
            if not (isinstance(out, dict) and type(out.get("elements")) is int and type(out.get("written")) is int
                    and isinstance(out.get("kernels"), list) and all(isinstance(k, str) for k in out["kernels"][:10])):
                return None
            clean.append({"elements": out["elements"], "written": out["written"], "kernels": out["kernels"][:10]})
        return cls([k[:200] for k in launches[:100]], count, complete, clean)


def dynamic_launch_problem(launches: Launches | None, wrapper: str, kernel: str, what: tuple[str, ...]) -> str | None:
    """Why the call's returned tensors (named ``what``, in order) were not written by ``kernel``, or None.
    ``launches`` is None where nothing was observed (a compiled launch on a GPU): then
    nothing is ruled. An interpreted call always has a record (the session fails closed)."""
    if launches is None:
        return None
    if len(launches.outputs) < len(what):  # the value checks passed, so the call returned them all
        return (f"`{wrapper}` returned {', '.join(what)}, but the record of what its kernels wrote names "
                f"{len(launches.outputs)} tensor(s): this exercise is a Triton kernel, and `{kernel}` must compute "
                f"each of them")
    for name, out in zip(what, launches.outputs):
        if out["elements"] == 0:
            continue
        if kernel not in launches.launches:
            ran = f"it launched {', '.join(sorted(set(launches.launches)))}" if launches.launches else \
                "it launched no Triton kernel at all"
            return (f"`{wrapper}` returned the right values, but {ran}: this exercise is a Triton kernel, "
                    f"and `{kernel}` must compute {name}; a result computed with PyTorch operations earns no points")
        if out["written"] < out["elements"] and launches.complete:
            return (f"`{wrapper}` launched `{kernel}`, but {out['elements'] - out['written']} of the "
                    f"{out['elements']} elements of {name} are not what its stores wrote: return the tensor the "
                    f"kernel stored into, not a result computed or changed with PyTorch operations")
        if out["written"] and kernel not in out["kernels"]:
            return (f"`{wrapper}` launched `{kernel}`, but {name} was written by "
                    f"{', '.join(out['kernels'])}, not by `{kernel}`")
    return None
