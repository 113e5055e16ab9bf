"""The grading package's tree is its architecture, and these rules keep it so.

The picture lives in one place, ``grading/__init__.py``: its docstring says it in words,
and :data:`grading.FACES`, :data:`grading.COMMANDS`, :data:`grading.PROCESSES`,
:data:`grading.LAYERS` and :data:`grading.MAY_IMPORT` say it as data, which this test
reads (and checks that the words name every package the data names, and its layers in
order). Every module of
``grading/`` and of the book's packages that import it (``distlab``, ``gpucompile``,
``modellab``) is read with ``ast`` (nothing is imported), and every import counts, the
ones inside functions too:

- every module is on the map: a face, a command, or a module of a package the map names;
- a face imports faces only; nothing imports a command but a command;
- no import climbs from a lower layer to a higher one, or crosses to a package of its
  own layer;
- a package imports only the packages :data:`grading.MAY_IMPORT` gives it, and *reaches*
  only those, through any chain of imports (so ``classroom/`` never reaches ``judge/`` or
  ``contestant/``, ``distlab/`` never reaches ``judge/``, ``contestant/`` never reaches a
  reference, the judge or the classroom);
- no import cycle, at any depth, in the whole tree;
- no module imports another's private name (``from m import _x`` or ``m._x``);
- no ``grading/`` module is longer than :data:`MAX_LINES`, and no function longer than
  :data:`MAX_FUNCTION_LINES` (a module or a function that long holds two concerns).

Each rule is proved able to fail: ``tests/meta/layering_probes/`` holds modules that
break one rule each, analysed as if they stood at the module path their first line
names (they are never put in the real packages).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

import grading
from grading.layout import ROOT

PACKAGE = ROOT / "grading"
OTHERS = ("distlab", "gpucompile", "modellab")  # the book's packages that use the grader
ROOTS = ("grading", *OTHERS)
PROBES = Path(__file__).parent / "layering_probes"
MAX_LINES = 450
MAX_FUNCTION_LINES = 60
# Modules other work is splitting right now; the list only shrinks, to empty (the last
# test below fails on an entry that is no longer too long). grading/judge/plugin.py,
# grading/batch.py, grading/gradescope.py and grading/contestant/main.py have left it already.
TOO_LONG_FOR_NOW: set[str] = set()
# Cycles outside the grader, through imports inside functions, that their owners are to
# break; the list only shrinks, and is empty now.
KNOWN_CYCLES: list[set[str]] = []


@dataclass(frozen=True)
class Module:
    """One module as the rules see it: its dotted name, whether it is a package's
    ``__init__``, and its source."""

    name: str
    is_package: bool
    source: str


@dataclass(frozen=True)
class Problem:
    rule: str  # "map", "faces", "commands", "layer", "may_import", "reach", "cycle", "private"
    module: str
    text: str


def _module_of(path: Path) -> Module:
    parts = path.relative_to(ROOT).with_suffix("").parts
    is_package = parts[-1] == "__init__"
    return Module(".".join(parts[:-1] if is_package else parts), is_package, path.read_text())


def _tree(roots: tuple[str, ...] = ROOTS) -> dict[str, Module]:
    """Every module of ``grading/`` and of the book's packages (or of ``roots``), by dotted name."""
    paths = [p for root in roots for p in sorted((ROOT / root).rglob("*.py")) if PROBES not in p.parents]
    return {m.name: m for m in map(_module_of, paths)}


# -- the map, as grading/__init__.py states it ----------------------------------------------
LAYER_OF = {area: i for i, layer in enumerate(grading.LAYERS) for area in layer}


def _area(name: str, modules: dict[str, Module]) -> str | None:
    """The map's name for where ``name`` lives: "faces", "commands", a package of
    :data:`grading.PROCESSES`, or None when the map does not say."""
    parts = name.split(".")
    if parts[0] != "grading":
        return parts[0] if parts[0] in grading.PROCESSES else None
    if len(parts) == 1 or parts[1] in grading.FACES:
        return "faces"
    if parts[1] in grading.COMMANDS and len(parts) == 2:
        return "commands"
    is_package = len(parts) > 2 or (name in modules and modules[name].is_package)
    return parts[1] if is_package and parts[1] in grading.PROCESSES else None


def _reachable_areas(area: str) -> set[str]:
    return {area, "faces", *grading.MAY_IMPORT[area]}


# -- the import graph --------------------------------------------------------------------
def _resolve(module: str, name: str | None, modules: dict[str, Module]) -> str | None:
    """The module of the tree an import names: ``from grading.judge import proxy`` is the
    module ``grading.judge.proxy``; ``from grading.judge import watching`` the package."""
    if name and f"{module}.{name}" in modules:
        return f"{module}.{name}"
    while module and module not in modules:
        module = module.rpartition(".")[0]
    return module or None


def _absolute(node: ast.ImportFrom, here: Module) -> str:
    """The module a ``from`` import names, relative ones (``from . import x``) made absolute."""
    if not node.level:
        return node.module or ""
    base = here.name.split(".") if here.is_package else here.name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.lru_cache(maxsize=None)
def _nodes(source: str) -> tuple[ast.AST, ...]:
    """Every node of a module's source, parsed once (the probes reuse the real tree's)."""
    return tuple(ast.walk(ast.parse(source)))


@functools.lru_cache(maxsize=8)
def _roots(names: frozenset[str]) -> frozenset[str]:
    """The top-level names of a tree's modules (``tools`` has no ``__init__``, and counts)."""
    return frozenset(name.split(".")[0] for name in names)


def _imports(here: Module, modules: dict[str, Module]) -> list[tuple[str, int]]:
    """``(module imported, line)`` of every import of the tree in ``here``, at any depth."""
    found, roots = [], _roots(frozenset(modules))
    for node in _nodes(here.source):
        if isinstance(node, ast.Import):
            targets = [_resolve(a.name, None, modules) for a in node.names if a.name.split(".")[0] in roots]
        elif isinstance(node, ast.ImportFrom) and _absolute(node, here).split(".")[0] in roots:
            module = _absolute(node, here)
            targets = [_resolve(module, a.name, modules) for a in node.names]
        else:
            continue
        found += [(t, node.lineno) for t in targets if t and t != here.name]
    return found


def _graph(modules: dict[str, Module]) -> dict[str, list[tuple[str, int]]]:
    return {name: _imports(module, modules) for name, module in modules.items()}


# -- the rules ---------------------------------------------------------------------------
def _edge_problems(name: str, target: str, line: int, modules: dict[str, Module]) -> list[Problem]:
    """What one import ``name:line -> target`` breaks of the map."""
    here, there = _area(name, modules), _area(target, modules)
    if here is None or there is None or here == there:
        return []
    where = f"{name}:{line} imports {target}"
    if here == "faces":
        return [Problem("faces", name, f"{where}: a face imports faces only")]
    if there == "commands":
        return [Problem("commands", name, f"{where}: only a command imports a command")]
    if LAYER_OF[there] >= LAYER_OF[here]:
        return [Problem("layer", name, f"{where}: {there} is not below {here}")]
    if there not in _reachable_areas(here):
        return [Problem("may_import", name, f"{where}: {here} may import only {sorted(_reachable_areas(here))}")]
    return []


def _reach_problems(name: str, graph: dict[str, list[tuple[str, int]]], modules: dict[str, Module]) -> list[Problem]:
    """The modules ``name`` reaches through others (not directly) in a package it may not
    reach, each with the chain of imports that gets there."""
    here = _area(name, modules)
    if here is None:
        return []
    allowed = _reachable_areas(here) | ({"commands"} if here == "commands" else set())
    parent = {name: None}
    todo, problems = deque([name]), []
    while todo:
        current = todo.popleft()
        for target, _ in graph.get(current, ()):
            if target in parent:
                continue
            parent[target] = current
            todo.append(target)
            there = _area(target, modules)
            if current != name and there is not None and there not in allowed:
                chain, step = [], target
                while step is not None:
                    chain.append(step)
                    step = parent[step]
                problems.append(Problem("reach", name, f"{name} ({here}) reaches {target} ({there}): "
                                                       + " -> ".join(reversed(chain))))
    return problems


def _cycles(graph: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w, _ in graph.get(v, ()):
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


def _private_problems(here: Module, modules: dict[str, Module]) -> list[Problem]:
    """Private names of another module that ``here`` imports or reads."""
    aliases, found = {}, []
    for node in _nodes(here.source):
        if isinstance(node, ast.ImportFrom) and _absolute(node, here).split(".")[0] in ROOTS:
            module = _absolute(node, here)
            for a in node.names:
                target = _resolve(module, a.name, modules)
                if a.name.startswith("_") and target != here.name:
                    found.append(f"{here.name}:{node.lineno} imports {module}.{a.name}")
                if target == f"{module}.{a.name}":
                    aliases[a.asname or a.name] = target
        elif isinstance(node, ast.Import):  # ``import a.b`` binds ``a``; ``import a.b as c`` binds ``c``
            for a in node.names:
                root = a.name.split(".")[0]
                if root in ROOTS:
                    aliases[a.asname or root] = a.name if a.asname else root
    for node in _nodes(here.source):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = _dotted(node.value, aliases)
            if owner in modules and owner != here.name:
                found.append(f"{here.name}:{node.lineno} reads {owner}.{node.attr}")
    return [Problem("private", here.name, text) for text in found]


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The module an expression such as ``values`` or ``grading.wire.values`` names, through
    the names this module's imports bound; None for anything else."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def problems(modules: dict[str, Module], only: set[str] | None = None) -> list[Problem]:
    """Everything the tree ``modules`` breaks of the map, rule by rule; of the modules
    ``only`` (and every cycle) when given."""
    graph = _graph(modules)
    mine = [name for name in graph if only is None or name in only]
    found = [Problem("map", name, f"{name} is not on the map (grading/__init__.py)")
             for name in mine if _area(name, modules) is None]
    for name in mine:
        edges = graph[name]
        found += [p for target, line in edges for p in _edge_problems(name, target, line, modules)]
        found += _reach_problems(name, graph, modules)
        found += _private_problems(modules[name], modules)
    found += [Problem("cycle", component[0], "import cycle: " + " <-> ".join(component))
              for component in _cycles(graph)]
    return found


TREE = _tree()
FOUND = problems(TREE)


# -- the tree keeps the map ---------------------------------------------------------------
@pytest.mark.parametrize("rule", ["map", "faces", "commands", "layer", "may_import", "reach", "cycle", "private"])
def test_the_tree_keeps_the_map(rule):
    broken = [p.text for p in FOUND if p.rule == rule]
    assert not broken, f"{len(broken)} broken ({rule}):\n" + "\n".join(broken)


def test_no_cycle_in_the_whole_repository():
    """Beyond the map: the repository's tools, benchmarks and tests take part in no cycle
    with the grader either (``grading.stubs`` imports ``tools.i18n``, for one)."""
    found = _cycles(_graph(_tree((*ROOTS, "tools", "benchmarks", "tests"))))
    cycles = [c for c in found if set(c) not in KNOWN_CYCLES]
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
    gone = [sorted(c) for c in KNOWN_CYCLES if sorted(c) not in found]
    assert not gone, f"no longer a cycle, take off KNOWN_CYCLES: {gone}"


def test_the_map_is_consistent():
    """Every area has a layer and a line of MAY_IMPORT; a package may import only lower
    layers, and may reach (through them) no more than it may import."""
    areas = {"faces", "commands", *grading.PROCESSES}
    assert set(LAYER_OF) == areas and set(grading.MAY_IMPORT) == areas
    for area, allowed in grading.MAY_IMPORT.items():
        assert all(LAYER_OF[a] < LAYER_OF[area] for a in allowed), f"{area} may import a layer not below it"
        for other in allowed:
            assert grading.MAY_IMPORT[other] <= _reachable_areas(area), f"{area} reaches more through {other}"


def test_the_words_name_what_the_data_names():
    """The docstring of grading/__init__.py and its data cannot drift apart."""
    words = grading.__doc__
    named = [*grading.FACES, *grading.COMMANDS, *grading.PROCESSES]
    missing = [n for n in named if f"``{n}``" not in words and f"``{n}/``" not in words]
    assert not missing, f"grading/__init__.py's docstring does not name {missing}"
    layers = words.split("Layers, lowest first:")[1].split(". ")[0]  # "the faces; ``notebook/`` and ..."
    said = [m.group(1) or m.group(2) for m in re.finditer(r"the (faces|commands)|``(\w+)/?``", layers)]
    assert said == [area for layer in grading.LAYERS for area in layer], f"the words' layers: {said}"
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages <= set(grading.PROCESSES) | set(grading.FACES), packages - set(grading.PROCESSES)


# -- each rule can fail ------------------------------------------------------------------
def _probe(path: Path) -> tuple[str, list[Module]]:
    """The rule a probe breaks and its modules: a file's header says ``# rule: R`` and,
    before each module, ``# module: dotted.name`` (``# package: dotted.name`` for an
    ``__init__``); what follows, up to the next header, is that module's source."""
    rule, modules, current, lines = None, [], None, []
    for line in path.read_text().splitlines():
        key, _, value = line.partition(": ")
        if key in ("# module", "# package"):
            if current:
                modules.append(Module(current[0], current[1], "\n".join(lines)))
            current, lines = (value.strip(), key == "# package"), []
        elif key == "# rule":
            rule = value.strip()
        elif current:
            lines.append(line)
    modules.append(Module(current[0], current[1], "\n".join(lines)))
    return rule, modules


PROBE_FILES = sorted(PROBES.glob("*.py"))


def test_there_is_a_probe_for_every_rule():
    rules = {_probe(p)[0] for p in PROBE_FILES}
    assert rules == {"map", "faces", "commands", "layer", "may_import", "reach", "cycle", "private"}


@pytest.mark.parametrize("path", PROBE_FILES, ids=[p.stem for p in PROBE_FILES])
def test_a_probe_breaks_its_rule(path):
    """The tree with the probe's modules in it (in place of a real module of that name,
    where there is one) breaks the rule the probe names, at the probe's first module."""
    rule, probe = _probe(path)
    tree = {**TREE, **{m.name: m for m in probe}}
    names = {m.name for m in probe}
    got = [p for p in problems(tree, only=names) if p.rule == rule and p.module in names]
    assert got, f"{path.name}: the layering test did not see the probe break {rule!r}"


# -- size ---------------------------------------------------------------------------------
def _too_long(path: Path, text: str) -> list[str]:
    lines = text.splitlines()
    long = [f"{len(lines)} lines"] if len(lines) > MAX_LINES else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = node.end_lineno - node.lineno + 1
            if size > MAX_FUNCTION_LINES:
                long.append(f"{node.name}() {size} lines")
    return long


def test_no_module_or_function_is_too_long():
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where not in TOO_LONG_FOR_NOW and (found := _too_long(path, path.read_text())):
            long[where] = found
    assert not long, f"over {MAX_LINES} lines a module or {MAX_FUNCTION_LINES} a function: {long}"


def test_the_size_rule_can_fail():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert _too_long(Path("probe.py"), f"def f():\n{body}\n") == [f"f() {MAX_FUNCTION_LINES + 1} lines"]
    assert _too_long(Path("probe.py"), "x = 1\n" * (MAX_LINES + 1)) == [f"{MAX_LINES + 1} lines"]


def test_the_allowance_only_names_modules_still_too_long():
    """An entry of TOO_LONG_FOR_NOW whose module was split is taken off the list."""
    stale = [w for w in TOO_LONG_FOR_NOW if not (ROOT / w).is_file() or not _too_long(ROOT / w, (ROOT / w).read_text())]
    assert not stale, f"split already, take off TOO_LONG_FOR_NOW: {stale}"
