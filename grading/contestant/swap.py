"""The swap, in the process that holds the notebook: other exercises' names bound to references.

One word for one idea: *the swap* of exercise N is every name another exercise owns,
bound to its reference while N is graded. :func:`swap_in` binds a swap and undoes it;
:func:`swap_in_force` says which swap is bound in this process (``{"chapter", "exercise"}``),
which the judge announces without binding (:func:`swap_announced`) and a child that loads
the notebook itself binds by name (:func:`swap_named`).

While exercise N is graded, every name another exercise owns is, in the loaded notebook's
namespace, the reference's (:mod:`grading.judge.substitute` says which, and why). This
module does the binding and undoes it: :func:`swap_in` in a contestant, from the package
the judge sent (:func:`references_from_package`), where a plain function another exercise
owns asks the judge (``ask``) instead of running here. The judge answers only the calls
the solution made in the same test, with equal arguments, and refuses any other with
:class:`NotAnswered`: then the notebook's own function runs, as if no swap were bound.
``calling`` and ``beside`` are how a chapter's ``tests/references/ref_NN_topic.py``
declares a reference that must run beside the notebook's own objects.
"""

from __future__ import annotations

import contextlib
import importlib
import types
from dataclasses import dataclass

from grading.compare import GradingFailure

_IN_FORCE: list[dict] = []  # the swaps in force in this process, innermost last


class NotAnswered(GradingFailure):
    """The judge does not answer this call of another exercise's function with its
    reference: the solution made no such call, with these arguments, in this test
    (:mod:`grading.judge.substitute`). The notebook's own function answers it instead."""

    wire_kind = "not_answered"  # how grading.notebook.loader.remote_error names it on the wire


@dataclass(frozen=True)
class Calling:
    """A reference whose globals ``names`` are taken from the notebook (see ``calling``)."""

    reference: object
    names: tuple[str, ...]


def calling(reference, *names: str) -> Calling:
    """Declare in ``SUBSTITUTES`` that ``reference`` calls the notebook's ``names`` (other
    exercises' functions): when swapped in, it is a copy whose globals ``names`` are the
    notebook's after the swap."""
    return Calling(reference, names)


@dataclass(frozen=True)
class Beside:
    """A reference that works on the notebook's own objects (see ``beside``)."""

    reference: object


def beside(reference) -> Beside:
    """Declare in ``SUBSTITUTES`` that ``reference`` takes or changes objects the notebook
    made (Chapter 2's ``append(cache, ...)`` fills the student's cache): it must run in the
    contestant, beside them, so its source is sent there. Every other plain function is
    answered by the judge (:func:`answered_by_judge`)."""
    return Beside(reference)


def resolve(reference):
    """The reference itself, or the object a ``"package.module:function"`` string names."""
    if isinstance(reference, Beside):
        reference = reference.reference
    if isinstance(reference, str):
        module, _, qualname = reference.partition(":")
        value = importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
        return value
    return reference


def _is_triton_function(value) -> bool:
    return type(value).__name__ in ("JITFunction", "InterpretedFunction") and hasattr(value, "fn")


def rebound(reference, overrides: dict):
    """A copy of the function (or ``@triton.jit`` function) ``reference`` whose globals are
    its module's with ``overrides`` on top; the code object, and so the source file and
    lines Triton reads, are the reference's own."""
    reference = resolve(reference)
    fn = reference.fn if _is_triton_function(reference) else reference
    scope = {**fn.__globals__, **overrides}
    clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__, clone.__annotations__ = fn.__kwdefaults__, dict(fn.__annotations__)
    clone.__module__, clone.__qualname__, clone.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
    if not _is_triton_function(reference):
        return clone
    import triton  # only a chapter with kernels gets here

    return triton.jit(clone)  # interpreted or compiled, as TRITON_INTERPRET says, like the notebook's own


@contextlib.contextmanager
def swap_announced(stem: str, exercise: str):
    """Within the block, :func:`swap_in_force` reports ``{"chapter": stem, "exercise": exercise}``
    without binding anything here: the judge's processes, whose children bind it."""
    _IN_FORCE.append({"chapter": stem, "exercise": exercise})
    try:
        yield
    finally:
        _IN_FORCE.pop()


def swap_in_force() -> dict | None:
    """The swap in force in this process, ``{"chapter": stem, "exercise": "N.M"}``, or None:
    what a grader hands a child process that loads the notebook itself."""
    return dict(_IN_FORCE[-1]) if _IN_FORCE else None


@contextlib.contextmanager
def swap_named(namespace: dict, swap: dict | None):
    """In a child that loaded the notebook itself (the book's ``distlab`` ranks): bind the
    swap ``swap`` names (``swap_in_force()`` in its parent, ``{"chapter", "exercise"}``)
    for the duration of the block; nothing when ``swap`` is None or the chapter declares
    no references. Such a child reads the chapter's references itself
    (:func:`grading.notebook.owners.read_table`): it is the book's tool, not a graded
    contestant, which is sent only what it may hold."""
    from grading.notebook.owners import read_table  # only such a child reads the references

    table = read_table(swap["chapter"]) if swap else None
    if table is None or swap.get("exercise") is None:
        yield
        return
    with swap_in(namespace, swap["chapter"], swap["exercise"], *table):
        yield


def stand_in(name: str, owner: str, exercise: str, stem: str):
    def stand_in(*args, **kwargs):
        raise GradingFailure(
            f"grader error: a test of Exercise {exercise} used `{name}` of Exercise {owner}, and "
            f"tests/references/ref_{stem}.py declares no reference for it in SUBSTITUTES")

    stand_in.__name__ = name.rsplit(".", 1)[-1]
    return stand_in


class _Swaps:
    """Set attributes and dictionary entries; put every one back on ``undo``."""

    MISSING = object()

    def __init__(self):
        self.log: list[tuple[object, str, object]] = []

    def set(self, target, key: str, value) -> None:
        if isinstance(target, dict):
            self.log.append((target, key, target.get(key, self.MISSING)))
            target[key] = value
        else:
            self.log.append((target, key, target.__dict__.get(key, self.MISSING)))
            setattr(target, key, value)

    def undo(self) -> None:
        for target, key, old in reversed(self.log):
            if isinstance(target, dict):
                if old is self.MISSING:
                    target.pop(key, None)
                else:
                    target[key] = old
            elif old is self.MISSING:
                with contextlib.suppress(AttributeError):
                    delattr(target, key)
            else:
                setattr(target, key, old)
        self.log.clear()


@contextlib.contextmanager
def swap_in(namespace: dict, stem: str, exercise: str, owned: dict[str, str], references: dict):
    """:func:`swap_for` with the table given: ``owned`` names and their exercises,
    ``references`` as in ``SUBSTITUTES`` (a contestant builds them from what the judge
    sends, :mod:`grading.contestant.main`)."""
    swaps = _Swaps()
    _IN_FORCE.append({"chapter": stem, "exercise": exercise})
    try:
        classes_done = set()
        late = []  # names whose reference is a Calling: resolved once the plain swaps are in place
        for name, owner in owned.items():
            if owner == exercise:
                continue
            cls_name, _, method = name.rpartition(".")
            if cls_name and cls_name in references:  # the whole class is swapped
                if cls_name not in classes_done and cls_name in namespace:
                    swaps.set(namespace, cls_name, resolve(references[cls_name]))
                    classes_done.add(cls_name)
                continue
            replacement = references.get(name) or stand_in(name, owner, exercise, stem)
            if isinstance(replacement, Calling):
                if cls_name:
                    raise GradingFailure(f"grader error: tests/references/ref_{stem}.py declares `{name}` "
                                         "with calling(); only functions can be declared so")
                late.append(name)
                continue
            replacement = resolve(replacement)
            if cls_name:
                cls = namespace.get(cls_name)
                if isinstance(cls, type):
                    swaps.set(cls, method, replacement)
                continue
            if name not in namespace:
                continue
            original = namespace[name]
            for value in list(namespace.values()):  # attached to a class by the notebook
                if isinstance(value, type) and value.__dict__.get(name) is original:
                    swaps.set(value, name, replacement)
            swaps.set(namespace, name, replacement)
        for name in sorted(late, key=list(references).index):  # SUBSTITUTES' order
            if name in namespace:
                declared = references[name]
                overrides = {n: namespace[n] for n in declared.names if n in namespace}
                swaps.set(namespace, name, rebound(declared.reference, overrides))
        yield
    finally:
        swaps.undo()
        _IN_FORCE.pop()


def _asking(name: str, ask, own=None):
    """The contestant's stand-in for a reference the judge answers: ``ask(name, args, kwargs)``;
    where the judge refuses (:class:`NotAnswered`), the notebook's ``own`` function, if any.
    An answer is never an oracle: a call the solution never made in this test (Exercise 6.3
    asking 6.4's reference for its own answer with every gate 0) runs the student's own code,
    which a stub does not have."""

    def asked(*args, **kwargs):
        try:
            return ask(name, args, kwargs)
        except NotAnswered:
            if not callable(own):
                raise
        return own(*args, **kwargs)

    asked.__name__ = asked.__qualname__ = name
    return asked


def references_from_package(package: dict, namespace: dict, ask=None) -> tuple[dict[str, str], dict]:
    """In the contestant: the reference modules built from their source (their calls of
    the graded exercise bound to the notebook's own names, of a reference the judge answers
    to ``ask``), and ``SUBSTITUTES`` rebuilt from the specs."""
    import linecache
    import sys

    def unanswered(name, args, kwargs):
        raise GradingFailure(f"grader error: `{name}` is answered by the judge, and this process cannot ask it")

    ask = ask or unanswered
    mine = set(package.get("mine", []))
    own = dict(namespace)  # the notebook's own functions, as they stand before any swap
    for entry in package["modules"]:
        module = types.ModuleType(entry["name"])
        filename = f"<reference {entry['file']}>"
        module.__file__ = filename
        source = entry["source"]
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)

        def bind():
            for name in entry["removed"]:
                module.__dict__[name] = stand_in(name, "another", "the one graded", entry["name"])
            for name in entry["own"]:
                if name in namespace:
                    module.__dict__[name] = namespace[name]
            for name, key in entry["asked"].items():
                module.__dict__[name] = _asking(key, ask, own.get(key))

        bind()
        sys.modules[entry["name"]] = module  # a "package.module:function" reference is found here
        exec(compile(source, filename, "exec"), module.__dict__)
        bind()  # the notebook's own answers and the judge's, whatever the source rebinds
    references = {}
    for name, spec in package["specs"].items():
        if name in mine or name.rpartition(".")[0] in mine:
            continue  # the exercise graded: the notebook's own
        if spec["ask"]:
            references[name] = _asking(name, ask, own.get(name))
            continue
        module, qualname = spec["ref"]
        target = f"{module}:{qualname}"
        references[name] = calling(target, *spec["calling"]) if spec["calling"] is not None else target
    return dict(package["owned"]), references
