"""The judge's side of a submission: the notebook as a proxy, its code in a contestant.

The graders read as they always have: ``nb.flash_attention(q, k, v, causal=True)``. But
``nb`` is a :class:`RemoteNotebook`: the call goes over a socket to a contestant
(:mod:`grading.contestant.main`, in the sandbox), and what comes back is rebuilt here from
bytes as a plain value (:mod:`grading.wire`): a ``torch.Tensor``, an ``int``, a tuple of
them. An object of the notebook's own (a ``PagedKVCache``) stays in the contestant and
is a :class:`Remote` here, whose attributes and methods are calls again. The judge never
holds an object the submission made, so nothing the notebook defines (``__eq__``,
``__torch_function__``, a patched ``Collector``) runs where the points are decided.

One contestant serves one notebook and one exercise: when a test of another exercise
asks, the judge starts a fresh one with that exercise's swap (``grading.judge.substitute``):
its calls into other exercises are answered here, by their references. A crash or a timeout costs the call
that was running (:class:`ContestantCrashed`, :class:`ContestantTimedOut`); the next call
starts a new contestant.

Contestants are forks of one *zygote* per judge process (:mod:`grading.proc.zygote`), started in
the sandbox where this machine has one: ``import torch`` is paid once, a contestant
costs a fork and the notebook's cells.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from grading import wire
from grading.compare import GradingFailure
from grading.judge.session import (
    CALL_TIMEOUT_S,
    AnswerTooLarge,
    ContestantBroken,
    ContestantCrashed,
    Session,
    judge_limit,
)
from grading.notebook.loader import CellDidNotRun, NotebookLoadError, NotImplementedExercise
from grading.notebook.untrusted import read_submission
from grading.proc.zygote import Launcher, launcher
from grading.wire import CellProblem, LoadReport, Spawn


# -- the proxies ----------------------------------------------------------------------------------
class Remote:
    """An object that stays in the contestant: a function, a class or an instance."""

    __slots__ = ("_nb", "_id", "_kind", "_name", "_generation", "_methods", "__weakref__")

    def __init__(self, nb: "RemoteNotebook", node: dict, generation: int):
        object.__setattr__(self, "_nb", nb)
        object.__setattr__(self, "_id", node["id"])
        object.__setattr__(self, "_kind", node["kind"])
        object.__setattr__(self, "_name", node["name"])
        object.__setattr__(self, "_generation", generation)
        methods = node.get("methods")
        names = frozenset(m for m in methods[:500] if isinstance(m, str)) if isinstance(methods, list) else frozenset()
        object.__setattr__(self, "_methods", names)

    @property
    def __name__(self):
        return self._name.rsplit(".", 1)[-1]

    def _node(self):
        return {"t": "handle", "id": self._id}

    def _ask(self, op: str, what: str, **fields):
        return self._nb._ask(op, what, handle=self, **fields)

    def __call__(self, *args, **kwargs):
        return self._nb._call(self, args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name in self._methods:  # called in one round trip, not fetched and then called
            return Method(self, name)
        return self._ask("getattr", f"reading `{self._name}.{name}`", name=name)

    def __setattr__(self, name: str, value):
        self._ask("setattr", f"setting `{self._name}.{name}`", name=name, value=value)

    def __len__(self):
        return self._ask("protocol", f"len({self._name})", name="len")

    def __iter__(self):
        return iter(self._ask("protocol", f"iterating over {self._name}", name="iter"))

    def __getitem__(self, key):
        return self._ask("protocol", f"{self._name}[...]", name="getitem", args=[key])

    def __setitem__(self, key, value):
        self._ask("protocol", f"{self._name}[...] = ...", name="setitem", args=[key, value])

    def __contains__(self, item):
        return self._ask("protocol", f"... in {self._name}", name="contains", args=[item])

    def __bool__(self):
        return self._ask("protocol", f"bool({self._name})", name="bool")

    def __repr__(self):
        return f"<{self._kind} {self._name} of the notebook>"


class Method:
    """``obj.name`` for a method the contestant listed: calling it is one request."""

    __slots__ = ("obj", "name")

    def __init__(self, obj: Remote, name: str):
        self.obj, self.name = obj, name

    @property
    def __name__(self):
        return self.name

    def __call__(self, *args, **kwargs):
        return self.obj._nb._call(self.obj, args, kwargs, method=self.name)

    def __repr__(self):
        return f"<method {self.obj._name}.{self.name} of the notebook>"


class RemoteNotebook:
    """The notebook under test, as graders see it: attribute access reads its names.

    ``use(exercise)`` says which exercise the next calls grade (the autouse fixture of
    ``grading.judge.substitute`` calls it); a contestant for that exercise is started on the
    first call that needs one."""

    def __init__(self, path: Path, text: str, stem: str, name: str, launch: Launcher | None = None,
                 extra: dict | None = None, on_disk: bool = False):
        self.origin = path
        self.on_disk = on_disk  # ``path`` holds exactly ``text`` (else a copy is written when asked)
        self._copy: tempfile.TemporaryDirectory | None = None
        self.text = text
        self.stem = stem
        self.display = name
        self.launch = launch
        self.extra = extra or {}
        self.exercise: str | None = None
        self.session: Session | None = None
        self.report = LoadReport()
        self.exceptions: dict[str, type] = {}  # the notebook's exception classes, as classes of the judge's own
        self.remotes: dict[tuple[int, int], Remote] = {}
        # The notebook's functions and methods the current test called, by name (cleared by
        # use()): in the student edition a test of one exercise drives others (2.5's fork
        # test appends with the student's own append), and a failure says so.
        self.called: set[str] = set()
        self.variants: dict[str, RemoteNotebook] = {}
        # What the last call's Triton launches wrote, as the contestant saw it (a bounds-checked
        # variant, grading.contestant.triton_bounds); None when nothing was observed.
        self.launches = None

    # -- what LoadedNotebook offered ----------------------------------------------------------
    @property
    def path(self) -> Path:
        """A file holding this notebook's text, for the graders that start children of
        their own (distlab): the notebook itself, or a copy made here."""
        if self.on_disk:
            return self.origin
        if self._copy is None:
            self._copy = tempfile.TemporaryDirectory(prefix="notebook-")
            (Path(self._copy.name) / self.display).write_text(self.text)
        return Path(self._copy.name) / self.display

    @property
    def name(self) -> str:
        return self.display

    @property
    def problems(self) -> list[CellProblem]:
        return [CellProblem(p["cell"], p["kind"], p["message"], p["memory"]) for p in self.report.problems]

    @property
    def errors(self) -> list[CellProblem]:
        return [p for p in self.problems if p.kind == "error"]

    @property
    def placeholders(self) -> dict[str, str]:
        return dict(self.report.placeholders)

    def use(self, exercise: str | None):
        self.called = set()
        if exercise != self.exercise:
            self.exercise = exercise
            self.close()
        for other in self.variants.values():
            other.use(exercise)

    def close(self):
        if self.session is not None:
            self.session.close()
            self.session = None
        for other in self.variants.values():
            other.close()

    def variant(self, **extra) -> "RemoteNotebook":
        """The same notebook in a contestant spawned with ``extra`` (fields of
        :class:`grading.wire.Spawn`: ``env``, ``bounds_checked``), grading the same
        exercise: Chapter 7 grades kernels through the interpreter in one, and asks another,
        without it, what the wrappers launch (the judge compiles the kernels' source itself,
        grading.judge.triton_compile)."""
        key = json.dumps(extra, sort_keys=True)
        if key not in self.variants:
            other = RemoteNotebook(self.origin, self.text, self.stem, self.display, self.launch,
                                   {**self.extra, **extra}, self.on_disk)
            other.use(self.exercise)
            self.variants[key] = other
        return self.variants[key]

    def service(self, name: str, *args, timeout: float = CALL_TIMEOUT_S):
        """Run ``grading.contestant.services`` ``name`` in the contestant on the notebook; its answer."""
        return self._ask("service", f"running {name} on the notebook", timeout=timeout, name=name, args=list(args))

    def _session(self) -> Session:
        if self.session is None or self.session.dead:
            from grading.judge import substitute

            spawn = Spawn(notebook=self.text, name=self.display, stem=self.stem, exercise=self.exercise,
                          references=substitute.reference_package(self.stem, self.exercise), **self.extra)
            self.session = Session(spawn, self.launch or launcher(self.extra.get("env")),
                                   substitute.judge_answers(self.stem, self.exercise))
            self.report = self.session.report
        return self.session

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return self._ask("get", f"reading `{item}`", name=item)

    def has(self, item: str) -> bool:
        return self._ask("has", f"looking for `{item}`", name=item)

    # -- the calls ------------------------------------------------------------------------------
    def _encoder(self, session: Session) -> wire.Encoder:
        def handle(value):
            if isinstance(value, Method):  # a bound method handed on: the contestant's own object
                value = value.obj._ask("getattr", f"reading `{value.obj._name}.{value.name}`", name=value.name)
            if isinstance(value, Remote):
                if value._nb is not self or value._generation != session.generation:
                    raise GradingFailure(f"`{value._name}` came from an earlier process of the notebook, which "
                                         "has stopped; the grader cannot pass it on")
                return value._node()
            name = wire.callable_name(value)
            if name is not None:
                return {"t": "fn", "v": name}
            raise GradingFailure(f"grader error: a {type(value).__qualname__} cannot be sent to the notebook")

        return wire.Encoder(handle=handle)

    def _ask(self, op: str, what: str, handle: Remote | None = None, timeout: float = CALL_TIMEOUT_S, **fields):
        session = self._session()
        if handle is not None and handle._generation != session.generation:
            raise ContestantCrashed(f"`{handle._name}` lived in a process of the notebook that has stopped")
        encoder = self._encoder(session)
        header = {"op": op}
        if handle is not None:
            header["h"] = handle._node()
        for key, value in fields.items():
            header[key] = value if key == "name" else encoder.encode(value)
        reply, buffers = session.request(header, encoder.buffers, what, timeout)
        return self._result(reply, buffers, session, what)

    def _call(self, fn: Remote, args: tuple, kwargs: dict, timeout: float = CALL_TIMEOUT_S, method: str = ""):
        session = self._session()
        if fn._generation != session.generation:
            raise ContestantCrashed(f"`{fn._name}` lived in a process of the notebook that has stopped")
        encoder = self._encoder(session)
        header = {"op": "callattr" if method else "call", "h": fn._node(), "args": encoder.encode(list(args)),
                  "kwargs": encoder.encode(dict(kwargs))}
        if method:
            header["name"] = method
        what = f"calling `{fn._name}.{method}`" if method else f"calling `{fn._name}`"
        if len(self.called) < 1000:
            self.called.add((method or fn._name.rpartition(".")[2])[:200])
        self.launches = None
        reply, buffers = session.request(header, encoder.buffers, what, timeout)
        if "triton" in reply:  # Chapter 7: what the call's kernel launches wrote (grading.judge.triton_launch)
            from grading.judge.triton_launch import Launches

            self.launches = Launches.from_json(reply["triton"])
        # One decoder for the value and the changed arguments: no byte of the answer is
        # named twice among all of them (grading.wire.Decoder).
        decoder = self._decoder(buffers, session)
        value = self._result(reply, buffers, session, what, decoder)
        self._write_back(reply.get("mutated"), buffers, session, args, kwargs, what, decoder)
        return value

    def _decoder(self, buffers: bytes, session: Session) -> wire.Decoder:
        def handle(node):
            if not (isinstance(node.get("id"), int) and node.get("kind") in ("class", "function", "object")
                    and isinstance(node.get("name"), str)):
                raise wire.WireError("a handle without its id, kind and name")
            if node["kind"] == "class" and node.get("exception") is True:
                return self.exception_class(node["name"], node.get("bases"))
            key = (session.generation, node["id"])
            if key not in self.remotes:
                self.remotes[key] = Remote(self, node, session.generation)
            return self.remotes[key]

        return wire.Decoder(buffers, handle=handle, strict=True)

    def _result(self, reply: dict, buffers: bytes, session: Session, what: str, decoder: wire.Decoder | None = None):
        if "error" in reply:
            try:
                error = wire.RemoteError.from_json(reply["error"])
            except wire.WireError as exc:
                session._stop(f"{what}: {exc}", ContestantBroken)
            raise self.rebuild(error)
        if "value" not in reply:
            session._stop(f"{what}: an answer without a value", ContestantBroken)
        try:
            return (decoder or self._decoder(buffers, session)).decode(reply["value"])
        except wire.RefusedValue as exc:
            raise GradingFailure(f"{what}: the notebook {exc}") from None
        except wire.WireError as exc:
            session._stop(f"{what}: {exc}", ContestantBroken)
        except MemoryError:
            session._stop(f"{what}: the notebook's answer did not fit in the grader's memory (limit {judge_limit()})",
                          AnswerTooLarge)

    def _write_back(self, mutated, buffers, session, args, kwargs, what, decoder: wire.Decoder | None = None):
        """Lists, dicts and tensors the grader passed and the call changed, changed here too."""
        import torch

        if not isinstance(mutated, list):
            session._stop(f"{what}: an answer whose changed arguments are not a list", ContestantBroken)
        decoder = decoder or self._decoder(buffers, session)
        for entry in mutated:
            if not (isinstance(entry, list) and len(entry) == 2):
                session._stop(f"{what}: a changed argument that is not a pair", ContestantBroken)
            slot, node = entry
            if type(slot) is int and 0 <= slot < len(args):
                original = args[slot]
            elif isinstance(slot, str) and slot in kwargs:
                original = kwargs[slot]
            else:
                session._stop(f"{what}: a changed argument the grader never passed", ContestantBroken)
            try:
                value = decoder.decode(node)
            except MemoryError:
                session._stop(f"{what}: the arguments the notebook changed did not fit in the grader's memory "
                              f"(limit {judge_limit()})", AnswerTooLarge)
            except wire.RefusedValue as exc:
                raise GradingFailure(f"{what}: an argument the notebook changed cannot come back: {exc}") from None
            except wire.WireError as exc:  # off the schema: only a forged answer is
                session._stop(f"{what}: an argument the notebook changed: {exc}", ContestantBroken)
            if isinstance(original, list) and isinstance(value, list):
                original[:] = value
            elif isinstance(original, dict) and isinstance(value, dict):
                original.clear()
                original.update(value)
            elif isinstance(original, torch.Tensor) and isinstance(value, torch.Tensor):
                if value.shape != original.shape or value.dtype != original.dtype:
                    raise GradingFailure(f"{what}: the notebook changed the shape or dtype of an argument")
                with torch.no_grad():
                    original.copy_(value)

    # -- exceptions ---------------------------------------------------------------------------
    def exception_class(self, name: str, bases) -> type:
        """The judge's own class for the notebook's exception class ``name``: the same
        name, derived from the nearest built-in exception among its bases."""
        if name not in self.exceptions:
            base = next((wire.BUILTIN_ERRORS[b] for b in (bases or []) if b in wire.BUILTIN_ERRORS), Exception)
            short = name.rsplit(".", 1)[-1]
            self.exceptions[name] = type(short if short.isidentifier() else "NotebookError", (base,),
                                         {"__module__": "notebook", "__qualname__": short})
        return self.exceptions[name]

    def rebuild(self, error: wire.RemoteError) -> BaseException:
        """The exception to raise here for one raised in the contestant."""
        if error.kind == "cell_did_not_run":
            problems = [CellProblem(p["cell"], p["kind"], p["message"], p["memory"]) for p in error.problems]
            exc = CellDidNotRun(error.name or "?", self.display, problems)
        elif error.kind == "not_implemented":
            cls = NotImplementedExercise if error.type == "NotImplementedExercise" else NotImplementedError
            exc = cls(error.message)
        elif error.kind == "grading_failure":
            exc = GradingFailure(error.message, error.observed)
        elif error.kind == "wire":
            exc = GradingFailure(f"the notebook returned a value the grader cannot read: {error.message}")
        elif error.notebook_class:
            exc = self.exception_class(error.type, error.bases)(error.message)
        elif error.type == "KeyError" and len(error.message) >= 2 and error.message[0] == error.message[-1] == "'":
            import ast

            try:  # str(KeyError('k')) quotes the key: build the one whose text is the same
                exc = KeyError(ast.literal_eval(error.message))
            except (ValueError, SyntaxError):
                exc = KeyError(error.message)
        elif error.type == "NameError":
            exc = NameError(error.message, name=error.name or None)
        elif error.type in wire.BUILTIN_ERRORS:
            exc = wire.BUILTIN_ERRORS[error.type](error.message)
        else:
            base = next((wire.BUILTIN_ERRORS[b] for b in error.bases if b in wire.BUILTIN_ERRORS), Exception)
            exc = type(error.type if error.type.isidentifier() else "NotebookError", (base,),
                       {"__module__": "notebook"})(error.message)
        exc.grading_where = error.where
        return exc


def open_notebook(path: Path, stem: str, *, name: str | None = None, trusted: bool = False,
                  extra=None) -> RemoteNotebook:
    """The notebook at ``path`` as the judge grades it. ``trusted`` (the book's own
    solutions and stubs) skips the regular-file rule, which guards submissions."""
    import nbformat

    text = Path(path).read_text() if trusted else read_submission(Path(path))
    try:
        nbformat.reads(text, as_version=4)
    except Exception as exc:
        raise NotebookLoadError(f"{Path(path).name} is not a readable notebook: {type(exc).__name__}: {exc}") from None
    return RemoteNotebook(Path(path), text, stem, name or f"{stem}.ipynb", extra=extra, on_disk=trusted)
