"""The grading package's tree is its architecture, and these rules keep it so.

``grading/`` is laid out by process: the *faces* at the top (``layout``, ``compare``,
``outcome``, ``wire``, ``alternatives``, ``determinism``, ``pins`` and the commands), the
notebook as data (``notebook/``), the judge that never runs student code (``judge/``),
the contestant that does (``contestant/``), how processes start (``proc/``) and a class's
grades (``classroom/``). Read with ``ast`` (nothing is imported), every import counts,
the ones inside functions too:

- no import cycle, at any depth;
- no module imports another's private name (``from m import _x`` or ``m._x``);
- ``contestant/`` imports only the faces, ``notebook/`` and itself (never a reference, a
  judge's module or the classroom);
- ``notebook/`` imports only the faces and itself (it runs no process);
- ``judge/`` never imports ``classroom/``; ``proc/`` never imports ``judge/`` or ``classroom/``;
- no module is longer than :data:`MAX_LINES` (a module that long holds two concerns).
"""

from __future__ import annotations

import ast
from pathlib import Path

from grading.layout import ROOT

PACKAGE = ROOT / "grading"
# The book's other packages import the grader (distlab's ranks, modellab's paths): an
# import cycle or a private name may pass through them too.
OTHERS = ("distlab", "gpucompile", "modellab")
FACES = {"grading", "grading.layout", "grading.compare", "grading.outcome", "grading.wire", "grading.alternatives",
         "grading.determinism", "grading.pins"}
MAX_LINES = 550


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
EVERY = {**MODULES, **{_name(p): p for package in OTHERS for p in sorted((ROOT / package).rglob("*.py"))}}


def _resolve(module: str, name: str | None = None) -> str | None:
    """The module of this repository an import names: ``from grading.judge import proxy``
    is the module ``grading.judge.proxy``; ``from grading.judge import watching`` the package."""
    if name and f"{module}.{name}" in EVERY:
        return f"{module}.{name}"
    while module and module not in EVERY:
        module = module.rpartition(".")[0]
    return module or None


ROOTS = {"grading", *OTHERS}


def _imports(path: Path) -> list[tuple[str, str | None, int]]:
    """(module, name or None, line) of every grading import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] in ROOTS]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ROOTS and not node.level:
            found += [(node.module, a.name, node.lineno) for a in node.names]
    return found


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in EVERY.items():
        targets = {_resolve(m, n) for m, n, _ in _imports(path)} - {None, name}
        graph[name] = targets
    return graph



def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and f"{module}.__init__" in MODULES) else "top"


def test_no_import_cycles():
    graph = _graph()
    # a package's __init__ re-exports its modules; a module of the package importing a
    # sibling through the package is the sibling, not a cycle through __init__
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_private_names_across_modules():
    reached = []
    for name, path in EVERY.items():
        tree = ast.parse(path.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ROOTS:
                for a in node.names:
                    target = _resolve(node.module, a.name)
                    if a.name.startswith("_") and target != name:
                        reached.append(f"{name}:{node.lineno} imports {node.module}.{a.name}")
                    if target == f"{node.module}.{a.name}":
                        aliases[a.asname or a.name] = target
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in ROOTS:
                        aliases[a.asname or a.name.split(".")[0]] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")
                    and aliases[node.value.id] != name):
                reached.append(f"{name}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}")
    assert not reached, "private names read across modules:\n" + "\n".join(reached)


ALLOWED = {
    "contestant": {"top", "notebook", "contestant"},
    "notebook": {"top", "notebook"},
    "judge": {"top", "notebook", "judge", "contestant", "proc"},
    "proc": {"top", "notebook", "proc"},
}


def test_each_process_imports_only_what_it_may():
    crossings = []
    for name, path in MODULES.items():
        area = _area(name)
        if area not in ALLOWED:
            continue
        for module, imported, line in _imports(path):
            target = _resolve(module, imported)
            if target is None:
                continue
            there = "top" if target in FACES or _area(target) == "top" else _area(target)
            if there not in ALLOWED[area]:
                crossings.append(f"{name}:{line} imports {target}")
    assert not crossings, "imports across the process lines:\n" + "\n".join(crossings)


def test_no_module_is_too_long():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
