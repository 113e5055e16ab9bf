"""The judge's side of a submission: the notebook as a proxy, its code in a contestant.

The graders read as they always have: ``nb.flash_attention(q, k, v, causal=True)``. But
``nb`` is a :class:`RemoteNotebook`: the call goes over a socket to a contestant
(:mod:`grading.contestant`, in the sandbox), and what comes back is rebuilt here from
bytes as a plain value (:mod:`grading.wire`): a ``torch.Tensor``, an ``int``, a tuple of
them. An object of the notebook's own (a ``PagedKVCache``) stays in the contestant and
is a :class:`Remote` here, whose attributes and methods are calls again. The judge never
holds an object the submission made, so nothing the notebook defines (``__eq__``,
``__torch_function__``, a patched ``Collector``) runs where the points are decided.

One contestant serves one notebook and one exercise: when a test of another exercise
asks, the judge starts a fresh one with that exercise's swap (``grading.substitute``):
its calls into other exercises are answered here, by their references. A crash or a timeout costs the call
that was running (:class:`ContestantCrashed`, :class:`ContestantTimedOut`); the next call
starts a new contestant.

Contestants are forks of one *zygote* per judge process (:mod:`grading.launcher`), started in
the sandbox where this machine has one: ``import torch`` is paid once, a contestant
costs a fork and the notebook's cells.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

from grading import wire
# Launcher, Limits and configure are the launcher's; judge re-exports them for its callers.
from grading.matching import read_submission  # noqa: F401  (graders and runners import it from here too)
from grading.launcher import Launcher, Limits, ZygoteUnavailable, configure, current_limits, default_uid, launcher  # noqa: F401
from grading.compare import GradingFailure
from grading.contestant import LoadReport, Spawn
from grading.layout import TESTS
from grading.loader import CellDidNotRun, CellProblem, NotebookLoadError, NotImplementedExercise

CALL_TIMEOUT_S = float(os.environ.get("GRADING_CALL_TIMEOUT", 120))  # one call into the notebook
# Requests that only read (a global, an attribute, whether a name exists); see Session.request.
READS = frozenset({"get", "getattr", "has"})
LOAD_TIMEOUT_S = float(os.environ.get("GRADING_LOAD_TIMEOUT", 120))  # loading it in a contestant


class ContestantFailure(GradingFailure):
    """The contestant could not answer: the status says why (grading.outcome.classify)."""

    status = "error"


class ContestantCrashed(ContestantFailure):
    status = "crashed"


class ContestantTimedOut(ContestantFailure):
    status = "timed out"


class ContestantBroken(ContestantFailure):
    """It answered with something the protocol does not allow (a forged or oversized
    message): stopped, and reported for review."""

    status = "tampered"


class AnswerTooLarge(ContestantFailure):
    """Its answer did not fit in the judge's own memory limit (grading.runner.judge_memory_mb):
    the contestant is stopped and the test scores as the notebook's memory limit."""

    status = "memory limit"


def _judge_limit() -> str:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    return f"{soft // 2**20} MB" if soft != resource.RLIM_INFINITY else "no limit"


# -- one contestant, from the judge's side ----------------------------------------------------
class Session:
    """A live contestant: send a request, read its answer within a deadline."""

    generation = 0

    def __init__(self, spawn: Spawn, launch: Launcher, answers: dict | None = None):
        Session.generation += 1
        self.generation = Session.generation
        self.launch = launch
        self.answers = answers or {}  # the references this contestant may ask the judge to run
        try:
            self.sock, self.pid = launch.spawn()
        except ZygoteUnavailable as exc:
            raise ContestantCrashed(str(exc)) from None
        self.dead = ""
        self.reads: dict[str, tuple[dict, bytes]] = {}  # see request()
        wire.send(self.sock, spawn.to_json())
        header, _ = self._answer(LOAD_TIMEOUT_S, "loading the notebook")
        if "ready" not in header:
            error = wire.RemoteError.from_json(header.get("error"))
            raise NotebookLoadError(error.message)
        self.report = LoadReport.from_json(header["ready"])
        port = header.get("port")
        self.port = port if type(port) is int and 0 < port < 65536 else None

    def _answer(self, timeout: float, what: str) -> tuple[dict, bytes]:
        """The contestant's answer to the request sent, within ``timeout`` seconds; the
        questions it asks meanwhile (a reference the judge runs) are answered on the way."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self.sock.settimeout(max(deadline - time.monotonic(), 1e-3))
                header, buffers = wire.receive(self.sock)
                if "ask" not in header:
                    return header, buffers
                try:
                    self._reply_to_ask(header["ask"], buffers)
                except (wire.WireError, OSError):
                    raise
                except BaseException:  # a timeout of the test itself: the contestant waits for an answer
                    self.close()
                    raise
        except socket.timeout:
            self._stop(f"{what} took longer than {timeout:g} s and was stopped", ContestantTimedOut)
        except wire.ChannelClosed:
            code = self.launch.end(self.pid, kill=True)
            from grading.outcome import describe_signal

            how = (f"killed by {describe_signal(-code)}" if code is not None and code < 0 else
                   f"exited with code {code}: os._exit() or sys.exit() where the grader cannot catch it?")
            tail = self.launch.tail()
            self._stop(f"the notebook's process ended while {what} ({how})"
                       + (f"\n  last output:\n{_indent(tail)}" if tail.strip() else ""), ContestantCrashed, ended=True)
        except wire.WireError as exc:
            self._stop(f"the notebook's process sent what the grader cannot read while {what}: {exc}",
                       ContestantBroken)
        except MemoryError:
            self._stop(f"the notebook's answer while {what} did not fit in the grader's memory "
                       f"(limit {_judge_limit()})", AnswerTooLarge)
        except OSError as exc:
            self._stop(f"the channel to the notebook's process failed while {what}: {exc}", ContestantCrashed)

    def _reply_to_ask(self, ask, buffers: bytes) -> None:
        """Run the reference the contestant asks for on the plain values it sent, and send
        back the result and the arguments the reference changed in place. A question about
        a name this contestant may not ask is a forged message (:class:`wire.WireError`)."""
        import torch

        from grading.contestant import remote_error

        if not (isinstance(ask, dict) and isinstance(ask.get("name"), str) and ask["name"] in self.answers):
            name = ask.get("name") if isinstance(ask, dict) else None
            raise wire.WireError(f"a question about {str(name)[:100]!r}, which the grader does not answer here")
        name = ask["name"]

        def refuse(node):
            raise wire.RefusedValue(str(node.get("name", "object"))[:100], "it is an object of the notebook's own")

        try:
            # Lenient only in what a library function passed on may be: an allowlisted name.
            decoder = wire.Decoder(buffers, handle=refuse, strict=False)
            args, kwargs = decoder.decode(ask.get("args")), decoder.decode(ask.get("kwargs"))
            if not (isinstance(args, list) and isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs)):
                raise wire.WireError("a question whose arguments are not a list and a dict")
        except wire.RefusedValue as exc:
            error = TypeError(f"`{name}` (another exercise's, answered by the grader's reference) takes plain "
                              f"values: an argument {exc}")
            wire.send(self.sock, {"error": remote_error(error).to_json()})
            return
        before = {slot: a.clone() for slot, a in _slots(args, kwargs) if isinstance(a, torch.Tensor)}
        try:
            from grading.replay import unrecorded

            with unrecorded():
                value = self.answers[name](*args, **kwargs)
        except Exception as exc:  # the reference's own error for these inputs (a ValueError it names)
            wire.send(self.sock, {"error": remote_error(exc).to_json()})
            return
        encoder = wire.Encoder()
        try:
            changed = [[slot, encoder.encode(a)] for slot, a in _slots(args, kwargs)
                       if isinstance(a, (list, dict)) or (slot in before and not torch.equal(before[slot], a))]
            header = {"value": encoder.encode(value), "mutated": changed}
        except wire.WireError as exc:
            error = GradingFailure(f"grader error: the reference `{name}` returned what cannot be sent: {exc}")
            wire.send(self.sock, {"error": remote_error(error).to_json()})
            return
        wire.send(self.sock, header, encoder.buffers)

    def _stop(self, why: str, cls, ended: bool = False):
        self.dead = why
        if not ended:
            self.launch.end(self.pid, kill=True)
        self.sock.close()
        raise cls(why)

    def request(self, header: dict, buffers: list[bytes], what: str, timeout: float = CALL_TIMEOUT_S):
        """Send one request and return the answer's header and buffers.

        A read (:data:`READS`) asked again before any other request is answered from the
        last answer instead of a round trip: only a request runs the notebook's code, so
        nothing it holds has changed in between. Each answer is decoded afresh (tensors are
        copied out of the bytes), so a grader that changes what it got changes no later
        read. Any other request forgets every read first."""
        if self.dead:
            raise ContestantCrashed(f"the notebook's process had already stopped: {self.dead}")
        key = None
        if header.get("op") in READS and not buffers:
            key = json.dumps(header, sort_keys=True)
            if key in self.reads:
                return self.reads[key]
        else:
            self.reads.clear()
        try:
            wire.send(self.sock, header, buffers)
        except OSError as exc:
            self._stop(f"the notebook's process could not be reached ({exc})", ContestantCrashed)
        answer = self._answer(timeout, what)
        if key is not None and "value" in answer[0]:
            self.reads[key] = answer
        return answer

    def close(self):
        if not self.dead:
            self.dead = "closed"
            self.sock.close()
            self.launch.end(self.pid, kill=True)


def _slots(args: list, kwargs: dict):
    yield from enumerate(args)
    yield from kwargs.items()


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines())


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
    ``grading.substitute`` calls it); a contestant for that exercise is started on the
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
        # variant, grading.triton_bounds); None when nothing was observed.
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
        :class:`grading.contestant.Spawn`: ``env``, ``bounds_checked``), grading the same
        exercise: Chapter 7 grades kernels through the interpreter in one and compiles
        them in another."""
        key = json.dumps(extra, sort_keys=True)
        if key not in self.variants:
            other = RemoteNotebook(self.origin, self.text, self.stem, self.display, self.launch,
                                   {**self.extra, **extra}, self.on_disk)
            other.use(self.exercise)
            self.variants[key] = other
        return self.variants[key]

    def service(self, name: str, *args, timeout: float = CALL_TIMEOUT_S):
        """Run ``grading.services`` ``name`` in the contestant on the notebook; its answer."""
        return self._ask("service", f"running {name} on the notebook", timeout=timeout, name=name, args=list(args))

    def _session(self) -> Session:
        if self.session is None or self.session.dead:
            from grading import substitute

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
        if "triton" in reply:  # Chapter 7: what the call's kernel launches wrote (grading.triton_launch)
            from grading.triton_launch import Launches

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
            session._stop(f"{what}: the notebook's answer did not fit in the grader's memory (limit {_judge_limit()})",
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
                              f"(limit {_judge_limit()})", AnswerTooLarge)
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
            exc = (NotImplementedExercise if error.type == "NotImplementedExercise" else NotImplementedError)(error.message)
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


def open_notebook(path: Path, stem: str, *, name: str | None = None, trusted: bool = False, extra=None) -> RemoteNotebook:
    """The notebook at ``path`` as the judge grades it. ``trusted`` (the book's own
    solutions and stubs) skips the regular-file rule, which guards submissions."""
    import nbformat

    text = Path(path).read_text() if trusted else read_submission(Path(path))
    try:
        nbformat.reads(text, as_version=4)
    except Exception as exc:
        raise NotebookLoadError(f"{Path(path).name} is not a readable notebook: {type(exc).__name__}: {exc}") from None
    return RemoteNotebook(Path(path), text, stem, name or f"{stem}.ipynb", extra=extra, on_disk=trusted)


# -- what only the contestant can see -------------------------------------------------------------
class Watched:
    """What a watch saw (its fields are those of grading.watch's ``result()``)."""

    def __init__(self):
        self.seen: list[str] = []
        self.numel, self.shape, self.op = 0, None, None


@contextlib.contextmanager
def watching(nb: RemoteNotebook, name: str):
    """``with watching(nb, "non_finite") as watch:`` the calls inside run under that watch of
    grading.watch in the contestant; on leaving, ``watch`` holds what it saw."""
    if not isinstance(nb, RemoteNotebook):  # a notebook loaded in this process (make bench's baseline)
        from grading.watch import WATCHES

        with WATCHES[name]() as watch:
            yield watch
        return
    watched = Watched()
    nb._ask("watch", f"starting the {name} watch", name=name)
    try:
        yield watched
    finally:
        seen = nb._ask("watch", "reading the watch", name="stop") if nb.session and not nb.session.dead else None
        if isinstance(seen, dict):
            watched.seen = [str(s) for s in seen.get("seen", [])] if isinstance(seen.get("seen"), list) else []
            numel = seen.get("numel", 0)
            watched.numel = numel if type(numel) is int else 0
            watched.shape = tuple(seen["shape"]) if isinstance(seen.get("shape"), (list, tuple)) else None
            watched.op = seen.get("op") if isinstance(seen.get("op"), str) else None


def data_ptr(obj: Remote, attribute: str) -> int:
    """Where the tensor ``obj.attribute`` ("recent.k") keeps its memory, in the contestant."""
    if not isinstance(obj, Remote):  # an object of this process (make bench's in-process baseline)
        for part in attribute.split("."):
            obj = getattr(obj, part)
        return obj.data_ptr()
    return obj._ask("protocol", f"reading {obj._name}.{attribute}.data_ptr()", name="data_ptr", args=[attribute])


def contain(argv: list[str], work: Path, env: dict, *, show_tests: bool = False) -> tuple[list[str], dict]:
    """``argv`` and ``env`` for a child that loads the notebook itself (Chapter 7's kernel
    checks, Chapter 10's gloo ranks), in the sandbox of this judge's contestants: the same
    uid, the same folders hidden, ``work`` its only writable folder, and the limits set by
    the child (``GRADING_LIMITS``, :func:`grading.contestant.apply_limits`). ``show_tests``
    leaves ``tests/`` visible, for children that import the graders' check functions."""
    from grading import sandbox

    limits = current_limits()
    env = {**env, "HOME": str(work), "TMPDIR": str(work), "TRITON_CACHE_DIR": str(work / ".triton"),
           "MPLCONFIGDIR": str(work / ".matplotlib"), "XDG_CACHE_HOME": str(work / ".cache"),
           "TORCHINDUCTOR_CACHE_DIR": str(work / ".inductor"),
           "GRADING_LIMITS": limits.rlimits(cpu=False)}
    if not sandbox.status().sandboxed:
        return argv, env
    uid = limits.uid if limits.uid is not None else default_uid()
    sandbox.prepare_work_dir(work, uid if os.geteuid() == 0 else None)
    hide = [*map(Path, limits.hide)] + ([] if show_tests else [TESTS])
    return sandbox.wrap(argv, work=work, hide=hide, uid=uid, gpu=bool(limits.cuda_devices)), env


def hand_over(path: Path) -> None:
    """Let the sandbox's uid (a root-run judge's, see :func:`contain`) use ``path``, a
    folder or file the judge made inside a contained child's work folder."""
    from grading import sandbox

    if os.geteuid() != 0 or not sandbox.status().sandboxed:
        return
    limits = current_limits()
    sandbox.prepare_work_dir(Path(path), limits.uid if limits.uid is not None else default_uid())


# -- Chapter 10: ranks -------------------------------------------------------------------------
def run_ranks(nb: RemoteNotebook, function: str, world_size: int, calls: list[list], *, op_timeout: float = 10.0,
              timeout: float = 90.0):
    """``function`` of the notebook on ``world_size`` gloo ranks, each a contestant
    (:mod:`grading.ranks`) with the exercise's swap, called at once. ``calls[rank]`` is that
    rank's list of ``(args, kwargs)`` (or ``(other_function, args, kwargs)``), all of one
    length. Returns ``distlab.launch.RankResult`` per rank: what each call returned, rebuilt
    here, and the bytes it sent; ``timeout`` bounds each call."""
    from distlab.launch import CallResult, RankResult

    if len(calls) != world_size or len({len(c) for c in calls}) != 1:
        raise ValueError(f"calls must hold one list per rank ({world_size}), all of one length")
    spec = {"world_size": world_size, "op_timeout": op_timeout}
    proxies: list[RemoteNotebook] = []
    results = [RankResult(rank, "ok") for rank in range(world_size)]
    try:
        for rank in range(world_size):
            rank_spec = {**spec, "rank": rank, "master": rank == 0, "port": proxies[0].session.port if rank else 0}
            proxy = RemoteNotebook(nb.origin, nb.text, nb.stem, nb.display, extra={"rank": rank_spec})
            proxy.use(nb.exercise)
            proxies.append(proxy)
            try:
                proxy._session()
            except Exception as exc:  # noqa: BLE001 - the notebook did not load in this rank
                results[rank] = RankResult(rank, *_rank_failure(exc))
                return results

        def run(rank: int):
            proxy = proxies[rank]
            try:
                proxy._ask("ranks", "joining the gloo group", name="join", timeout=timeout)
                for call in calls[rank]:
                    name, args, kwargs = call if len(call) == 3 else (function, *call)
                    value = getattr(proxy, name)(*args, **kwargs)
                    sent = proxy._ask("ranks", "reading what the rank sent", name="counted")
                    results[rank].calls.append(CallResult(value, int(sent.get("bytes", 0)), int(sent.get("sends", 0))))
                proxy._ask("ranks", "leaving the gloo group", name="finish", timeout=op_timeout + 10)
            except Exception as exc:  # noqa: BLE001 - reported per rank, as distlab did
                results[rank] = RankResult(rank, *_rank_failure(exc, op_timeout), calls=results[rank].calls)

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results
    finally:
        for proxy in proxies:
            proxy.close()


def _rank_failure(exc: BaseException, op_timeout: float = 0.0) -> tuple[str, str]:
    """``(status, message)`` of a rank whose call raised ``exc``."""
    from grading.outcome import summary

    where = getattr(exc, "grading_where", "")
    if isinstance(exc, NotImplementedError):
        return "not implemented", str(exc)
    if isinstance(exc, ContestantTimedOut):
        return "timeout", f"{exc} (a deadlock, or an endless loop)"
    if isinstance(exc, ContestantCrashed):
        return "crashed", str(exc)
    message = summary(exc, where)
    if "timed out" in str(exc).lower():  # gloo's words for an operation past its timeout
        return "deadlock", (f"{message}\n  (a send or receive waited more than {op_timeout:.0f} s: every rank "
                            "was waiting for another, which is a deadlock)")
    return "error", message
