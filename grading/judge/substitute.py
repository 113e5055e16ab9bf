"""Grade each exercise alone: the other exercises' code is swapped for references.

A chapter's exercises build on each other: ``append`` (2.3) calls ``pages_needed``
(2.1) and the allocator (2.2); the graders of 2.6 fill a cache with ``append``. Graded
on the student's own code throughout, one mistake in 2.1 costs points in five
exercises, and a stub in 2.5 fails the tests of 2.3. Per-question grading (nbgrader,
otter) charges a mistake once, where it is. So while a test of exercise N runs, every
name that another exercise owns is, in the loaded notebook's namespace, the
reference's:

- *Ownership* comes from the exercise notebook: a function, or a method of a class,
  whose body holds the stub line ``raise NotImplementedError("Exercise M.K: ...")``
  belongs to M.K (``pages_needed``, ``BlockAllocator.allocate``). A function that a
  cell attaches to a class (``@add_to_class(PagedKVCache)``) is swapped on the class
  too: it is found there as the same object.
- *References* are declared by the chapter's ``tests/references/ref_NN_topic.py`` as
  ``SUBSTITUTES = {"pages_needed": pages_needed, "PagedKVCache.append": ...}``: the
  same name and signature as the exercise, written independently of the solutions.
  A key that names a whole class (``"RingKVCache"``) stands for all its methods.
- A name another exercise owns and the references do not declare becomes a stand-in
  that fails with "grader error" when called: a grader that still reaches into
  another exercise fails on the solution under ``pytest --prove``, not silently on a
  student's notebook.

- A reference may also be named as ``"package.module:function"``, imported when the
  swap is applied: Chapter 7's ``@triton.jit`` references live in a module that imports
  Triton, which must not happen before the notebook has chosen ``TRITON_INTERPRET``.
- A reference that itself calls other exercises' names is declared as
  ``calling(reference, "name", ...)`` (from :mod:`grading.contestant.swap`): a copy of
  the reference whose globals ``name`` are the notebook's, as they stand after the swap:
  the student's where the name belongs to the exercise under test, the references'
  otherwise. So 7.4's causal helpers are graded inside the reference of 7.3's kernel, and
  7.3's kernel, graded, calls the references of 7.4's helpers. A ``@triton.jit``
  reference is copied into a new ``triton.jit`` function from the same code (its source
  stays in its real file, where Triton reads it); Triton looks a kernel's callees up in
  its globals when it compiles or interprets it, not when it is defined, so the copy
  calls the new ones. The ``calling`` entries are resolved after the plain ones, in their
  order in ``SUBSTITUTES`` (a later one may call an earlier one).

A chapter opts in by declaring ``SUBSTITUTES`` (possibly empty); a chapter without it
is graded as before. The swap lasts one test (an autouse fixture) and is undone after
it, so the notebook, loaded once per module, serves every exercise.

*Contestants.* The graders never run the notebook: a contestant does (grading.judge).
Each contestant grades one exercise. A call it makes into another exercise's plain
function is answered by the judge, which runs the reference (:func:`judge_answers`);
only what must run beside the notebook's own objects is sent as source
(:func:`reference_package`), so no contestant holds a function its graders compute
expected values with.

*An answer is never an oracle.* Where one exercise is another's special case (6.3 is 6.4
with every gate 0), a stub whose functions call each other would be graded on the
references. So the judge answers a call only if the *solution* made that same call, with
bit-equal arguments, in the same test: ``make release`` (:func:`grading.judge.recording.record`)
grades each chapter's solution with the references recorded, and the judge keeps every
call it answered there, per test, as the name and an exact key of its arguments
(:func:`grading.judge.expected.ask_key`, in the record ``grading.judge.replay`` writes).
Any other call is refused (:class:`~grading.contestant.swap.NotAnswered`), and the
notebook's own function runs instead: a stub's raises ``NotImplementedError``. The record
is made on this machine, so the solution's float arguments are bit-equal to the ones it
makes here; :func:`pytest_collection_finish` makes it where it is missing or stale
(:mod:`grading.judge.answers`).

*Other children.* The book's ``distlab`` runs a notebook's ring on gloo ranks that load it
themselves; :func:`grading.contestant.swap.swap_in_force` is the swap in force in this
process, as a plain dict ``{"chapter": stem, "exercise": "7.3"}``, which ``run_on_ranks``
sends along (JSON), and each rank binds it after loading the notebook
(:func:`grading.contestant.swap.swap_named`). Who owns which name, and the table of
references, are read by :mod:`grading.notebook.owners`; graded as a whole, the note that
names another exercise as the cause is :mod:`grading.judge.dependencies`'.

``only_solved(solution, exercise)`` builds the notebook of the independence check
(``pytest --prove``): the stubs, with one exercise's solution regions put back.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import types
from pathlib import Path

import nbformat
import pytest

from grading.contestant.swap import Beside, Calling, resolve, swap_announced, swap_in
from grading.judge import answers, replay
from grading.layout import TESTS, cell_source, chapter_of_test_file, exercise_of_marker
from grading.notebook.owners import read_table
from grading.notebook.regions import replace_regions, stub_lines

_TABLES: dict[str, tuple[dict[str, str], dict[str, object]] | None] = {}


def answered_by_judge(name: str, reference) -> bool:
    """Whether a contestant's call of the ``SUBSTITUTES`` entry ``name`` is answered by
    the judge, which runs the reference on the plain values sent and sends plain values
    back: a plain function of plain values. Methods and classes, ``beside`` and ``calling``
    entries, and ``"package.module:function"`` names (Triton kernels, which must run where
    the notebook's kernel runs) are sent to the contestant as source instead."""
    return "." not in name and isinstance(reference, types.FunctionType)


def chapter_table(stem: str):
    """(owned names, references) of a chapter that opted in, else None. Read once, at
    collection: the contestant is never handed ``tests.references``."""
    if stem not in _TABLES:
        _TABLES[stem] = read_table(stem)
    return _TABLES[stem]


@contextlib.contextmanager
def swap_for(namespace: dict, stem: str, exercise: str | None):
    """Within the block, every name of ``namespace`` that an exercise other than
    ``exercise`` owns is the reference's (or a stand-in that says none is declared)."""
    table = chapter_table(stem)
    if table is None or exercise is None:
        yield
        return
    with swap_in(namespace, stem, exercise, *table):
        yield


def only_solved(solution: nbformat.NotebookNode, exercise: str, name: str = "notebook") -> nbformat.NotebookNode:
    """The exercise notebook with the solution regions of ``exercise`` kept: what a
    student who solved that exercise alone hands in."""
    nb = nbformat.from_dict(solution)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        source = cell_source(cell)

        def keep_or_stub(region, body):
            return [region.indent + "### BEGIN SOLUTION", *body, region.indent + "### END SOLUTION"] \
                if region.exercise == exercise else stub_lines(region, body)

        cell.source = replace_regions(source, keep_or_stub, where=f"{name} cell {index}")
        cell.outputs = []
    return nb


# -- the pytest side: one fixture, one hook ------------------------------------


def pytest_collection_modifyitems(items):
    for item in items:
        chapter = chapter_of_test_file(getattr(item, "path", ""))
        if chapter is not None and "nb" in getattr(item, "fixturenames", ()):
            chapter_table(chapter.stem)


@pytest.fixture(autouse=True)
def _graded_alone(request):
    """A test of exercise N sees the references for every other exercise."""
    chapter = chapter_of_test_file(getattr(request.node, "path", ""))
    if chapter is None or "nb" not in request.fixturenames:
        yield
        return
    from grading.layout import exercise_of

    notebook = request.getfixturevalue("nb")
    exercise = exercise_of(request.node)
    use = getattr(type(notebook), "use", None)
    if use is not None:  # the judge's proxy: a contestant for this exercise, with its swap
        notebook.use(exercise)
    elif getattr(notebook, "__dict__", {}).get("module") is not None:  # make bench's in-process baseline
        with swap_for(notebook.module.__dict__, chapter.stem, exercise):
            yield
        return
    # Children that load the notebook themselves (distlab) send it along.
    if chapter_table(chapter.stem) is None or exercise is None:
        yield
        return
    with answers.running(answers.test_key(request.node)), swap_announced(chapter.stem, exercise):
        yield


def pytest_collection_finish(session):
    """Make the records of the chapters whose tests may ask the judge (once per machine,
    again when a solution, a grader or a reference changes): at collection, so that no
    test's timeout pays for it. Not while recording them, and not in the student
    edition, which has no references to answer with."""
    if replay.recorder() is not None or replay.in_release():
        return
    stems = set()
    for item in session.items:
        chapter = chapter_of_test_file(getattr(item, "path", ""))
        if chapter is None or "nb" not in getattr(item, "fixturenames", ()):
            continue
        from grading.layout import exercise_of

        package = reference_package(chapter.stem, exercise_of(item))
        if package is not None and package["asked"]:
            stems.add(chapter.stem)
    answers.make_records(sorted(stems))


# -- the judge and the contestant (grading.judge, grading.contestant.main) --------------------------
REFERENCE_PREFIX = "tests."  # reference modules are sent as source; anything else is imported


def _unwrapped(value):
    """The reference a ``SUBSTITUTES`` entry names, without its ``calling``/``beside``."""
    while isinstance(value, (Calling, Beside)):
        value = value.reference
    return value


def _target(value) -> tuple[str, str]:
    """``(module, qualname)`` of a reference: a function, a class, a method, or a
    ``"package.module:function"`` string."""
    value = _unwrapped(value)
    if isinstance(value, str):
        module, _, qualname = value.partition(":")
        return module, qualname
    return value.__module__, value.__qualname__


def _spec(name: str, value) -> dict:
    module, qualname = _target(value)
    return {"ref": [module, qualname], "calling": list(value.names) if isinstance(value, Calling) else None,
            "ask": answered_by_judge(name, value)}


def _top_level_uses(tree: ast.Module) -> tuple[dict[str, ast.stmt], dict[str, set[str]]]:
    """Each top-level definition of a module, and the top-level names its body uses."""
    defs: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
    uses = {name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(defs) - {name}
            for name, node in defs.items()}
    return defs, uses


def _closure(start: set[str], uses: dict[str, set[str]], stop: set[str] = frozenset()) -> set[str]:
    """The definitions ``start`` reaches through ``uses``, not passing through ``stop``."""
    seen, todo = set(), [name for name in start if name not in stop]
    while todo:
        name = todo.pop()
        if name in seen or name not in uses:
            continue
        seen.add(name)
        todo += [n for n in uses[name] if n not in stop]
    return seen


def _exercise_of_test(node: ast.FunctionDef) -> str | None:
    for decorator in node.decorator_list:
        for part in ast.walk(decorator):
            if isinstance(part, ast.Attribute) and (exercise := exercise_of_marker(part.attr)):
                return exercise
    return None


@functools.lru_cache(maxsize=None)
def graded_with(stem: str) -> dict[str, frozenset[str]]:
    """``{"5.5": {"attention_fp64", "tiles_visited"}, ...}``: for each exercise, the names
    of its reference module that its tests use (``ref.attention_fp64``), in the test
    functions marked with it and in every module-level helper, fixture and constant they
    reach. Read from ``tests/test_<stem>.py``'s source; nothing is run. These are the
    expected values' sources, which no contestant of that exercise may hold."""
    path = TESTS / f"test_{stem}.py"
    if not path.exists():
        return {}
    tree = ast.parse(path.read_text())
    aliases = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
               and node.module == "tests.references" for alias in node.names if alias.name == f"ref_{stem}"}
    top: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                top.update({n.id: node for n in ast.walk(target) if isinstance(n, ast.Name)})
    found: dict[str, set[str]] = {}
    for node in tree.body:
        exercise = _exercise_of_test(node) if isinstance(node, ast.FunctionDef) else None
        if exercise is None:
            continue
        names, seen, todo = found.setdefault(exercise, set()), set(), [node]
        while todo:
            current = todo.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            for part in ast.walk(current):
                if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id in aliases:
                    names.add(part.attr)
                name = part.id if isinstance(part, ast.Name) else part.arg if isinstance(part, ast.arg) else None
                if name in top:  # a helper, a fixture (by its parameter's name) or a constant
                    todo.append(top[name])
    return {exercise: frozenset(names) for exercise, names in found.items()}


@functools.lru_cache(maxsize=None)  # parsed once per exercise: every contestant of it gets the same
def reference_package(stem: str, exercise: str | None) -> dict | None:
    """What a contestant grading ``exercise`` alone is sent of the references.

    - ``owned``: the notebook's names and the exercises they belong to;
    - ``specs``: per ``SUBSTITUTES`` entry, where its reference lives and whether the judge
      answers it (``ask``: a plain function of plain values, :func:`answered_by_judge`);
    - ``modules``: the source of the references that must run beside the notebook's
      objects (other exercises' methods and classes, ``beside`` and ``calling`` entries),
      each module cut to the top-level definitions they use. A function the judge answers
      is never sent: where the sent source calls it, its name is bound to a question to the
      judge (``asked``); where it calls a name of the exercise graded, to the notebook's
      own object (``own``); any other definition left out is a stand-in that fails.

    So the contestant holds no function that the graders compute expected values with
    (``tests/meta/test_contestant_reach.py`` proves it for every exercise). None for a
    chapter graded as a whole."""
    table = chapter_table(stem)
    if table is None or exercise is None:
        return None
    owned, references = table
    mine = {name for name, owner in owned.items() if owner == exercise}
    mine |= {name.rpartition(".")[0] for name in mine if "." in name}
    specs = {name: _spec(name, value) for name, value in references.items()}
    sent: dict[str, set[str]] = {}  # module -> top-level names that must run in the contestant
    own: dict[str, set[str]] = {}  # module -> top-level names that answer `exercise` (the notebook's)
    asked: dict[str, dict[str, str]] = {}  # module -> {top-level name: SUBSTITUTES name}
    for name, spec in specs.items():
        module, qualname = spec["ref"]
        top = qualname.split(".")[0]
        if name in mine or name.rpartition(".")[0] in mine:
            own.setdefault(module, set()).add(top)
        elif spec["ask"]:
            asked.setdefault(module, {})[top] = name
        elif module.startswith(REFERENCE_PREFIX):
            sent.setdefault(module, set()).add(top)
    expected_from = graded_with(stem).get(exercise, frozenset())
    modules = [_cut(module, sent[module], own.get(module, set()), asked.get(module, {}), mine,
                    expected_from if module == f"{REFERENCE_PREFIX}references.ref_{stem}" else frozenset())
               for module in sorted(sent)]
    helpers = {name for entry in modules for name in entry["asked"].values() if ":" in name}
    return {"owned": owned, "specs": specs, "modules": modules, "mine": sorted(mine),
            "asked": sorted(helpers | {name for name, spec in specs.items()
                                       if spec["ask"] and not (name in mine or name.rpartition(".")[0] in mine)})}


def _cut(module: str, sent: set[str], own: set[str], asked: dict[str, str], mine: set[str],
         expected_from: frozenset[str]) -> dict:
    """One reference module as a contestant is sent it: its source cut to the top-level
    definitions ``sent`` reaches, not through the exercise's own names (``own``, ``mine``)
    nor through the ones the judge answers (``asked``: ``{top-level name: SUBSTITUTES name}``);
    ``expected_from``, the helpers the tests compute expected values with, are asked too."""
    path = Path(importlib.import_module(module).__file__)
    tree = ast.parse(path.read_text())
    defs, uses = _top_level_uses(tree)
    # Shared helpers that carry an exercise's own name are its answer too (``pages_needed``).
    mine_here = own | (set(defs) & mine)
    asked_here = {top: name for top, name in asked.items() if top not in mine_here}
    # A helper the sent references call that the exercise's tests compute expected
    # values with (Chapter 4's ``kept_positions``) is asked of the judge too.
    asked_here.update({top: f"{module}:{top}" for top in set(defs) & expected_from
                       if top not in mine_here and top not in asked_here})
    kept = _closure(sent, uses, mine_here | set(asked_here))
    called = set().union(*(uses[name] for name in kept)) if kept else set()
    removed = set(defs) - kept
    # Module-level statements that name a definition left out go too (``SUBSTITUTES``
    # itself): the contestant rebuilds the table from the specs.
    tree.body = [node for node in tree.body if getattr(node, "name", None) not in removed and (
        node.__class__.__name__ in ("FunctionDef", "AsyncFunctionDef", "ClassDef")
        or not {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & removed)]
    return {"name": module, "file": str(path.relative_to(path.parents[2])), "source": ast.unparse(tree),
            "removed": sorted(removed), "own": sorted(called & mine_here),
            "asked": {top: name for top, name in sorted(asked_here.items()) if top in called}}


def judge_answers(stem: str, exercise: str | None) -> dict[str, object]:
    """The references the judge runs for a contestant of ``exercise`` that asks: the
    ``SUBSTITUTES`` functions of the other exercises that :func:`reference_package` does
    not send, each behind :class:`grading.judge.answers.Gate` (only the calls the solution made in the test).
    A question about any other name is refused."""
    package = reference_package(stem, exercise)
    if package is None:
        return {}
    _, references = chapter_table(stem)
    return {name: answers.Gate(stem, name, resolve(name if ":" in name else references[name]))
            for name in package["asked"]}
