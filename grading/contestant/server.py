"""One contestant: a fork of the zygote that loads the notebook and answers the judge's requests.

1. It reads its spec (:class:`~grading.wire.Spawn`: the notebook's JSON text, the exercise
   graded, the references of the *other* exercises as source text, see
   :func:`grading.judge.substitute.reference_package`), loads the notebook
   (:func:`grading.notebook.loader.run_notebook`), swaps the other exercises' names for those
   references, and replies with what the load found (:class:`~grading.wire.LoadReport`);
2. then it answers requests (:data:`OPS`) until the socket closes: get a name, call a
   function, read or set an attribute, a few of Python's protocols (``len``, ``iter``,
   ``getitem``). Values cross as :mod:`grading.wire` encodes them; an object that is not
   a plain value stays here and crosses as a handle.

Nothing here is trusted by the judge: a submission owns this process and may rewrite any
of it (:mod:`grading.contestant.main` says what it cannot do).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from pathlib import Path

from grading import wire
from grading.notebook.loader import remote_error
from grading.wire import LoadReport, Spawn

SUBMISSION_DIR = Path("/submission")  # where a contestant says its notebook's cells live


class Contestant:
    """The loaded notebook and the objects handed out as handles."""

    def __init__(self, sock: socket.socket, spawn: Spawn):
        self.sock = sock
        self.spawn = spawn
        self.objects: dict[int, object] = {}
        self.ids: dict[int, int] = {}  # id(object) -> handle
        self.loaded = None
        self.watch = None  # a grading.contestant.watch mode while the judge watches
        self.method_names: dict[type, list[str]] = {}
        # what the last call's Triton launches wrote (grading.contestant.triton_bounds)
        self.kernels: dict | None = None

    # handles
    def handle(self, value) -> dict:
        import numpy as np
        import torch

        plain = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset, torch.Tensor, np.ndarray,
                 np.generic)
        for base in plain:
            if isinstance(value, base):
                return wire.refused(value, f"it is a subclass of {base.__module__}.{base.__qualname__}; return a "
                                           f"plain {base.__qualname__}")
        key = id(value)
        if key not in self.ids:
            self.ids[key] = len(self.objects) + 1
            self.objects[self.ids[key]] = value
        node = {"t": "handle", "id": self.ids[key], "name": _name_of(value), "callable": callable(value)}
        if isinstance(value, type):
            node["kind"] = "class"
            node["exception"] = issubclass(value, BaseException)
            node["bases"] = [c.__name__ for c in value.__mro__ if c.__module__ == "builtins"]
        elif callable(value):
            node["kind"] = "function"
        else:
            node["kind"] = "object"
            node["methods"] = self.methods(type(value))
        return node

    def methods(self, cls: type) -> list[str]:
        """The public methods of ``cls``: the judge calls them in one round trip (callattr)."""
        if cls not in self.method_names:
            names = [n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n, None))
                     and not isinstance(getattr(cls, n, None), type)]
            self.method_names[cls] = names[:500]
        return self.method_names[cls]

    def find(self, node):
        obj = self.objects.get(node.get("id"))
        if obj is None:
            raise wire.WireError("a handle this process never gave out")
        return obj

    def place(self, device: str) -> str:
        return device

    # messages
    def decode(self, node, buffers):
        return wire.Decoder(buffers, handle=self.find, strict=False, place=self.place).decode(node)

    def reply(self, value=None, *, mutated=None, error: BaseException | None = None):
        if error is not None:
            header = {"error": remote_error(error).to_json()}
            wire.send(self.sock, header)
            return
        encoder = wire.Encoder(handle=self.handle)
        try:
            header = {"value": encoder.encode(value), "mutated": [[i, encoder.encode(v)] for i, v in (mutated or [])]}
            if self.kernels is not None:
                header["triton"] = self.kernels
        except wire.WireError as exc:
            wire.send(self.sock, {"error": remote_error(exc, kind="wire").to_json()})
            return
        wire.send(self.sock, header, encoder.buffers)

    def ask(self, name: str, args: tuple, kwargs: dict):
        """A call of another exercise's function that the judge answers (its reference runs
        there, :func:`grading.judge.substitute.judge_answers`): the arguments go out as plain
        values, the result comes back, and tensors, lists and dicts the reference filled in
        place are filled here too."""
        def handle(value):  # torch.exp passed on (5.2's ``exp=``) crosses by its allowlisted name
            known = wire.callable_name(value)
            return {"t": "fn", "v": known} if known is not None else self.handle(value)

        import torch

        # The crossing is this process's work, not the notebook's: no watch sees it (the
        # bytes of the answer are one buffer that the tensors are views of).
        with torch._C.DisableTorchFunction():
            encoder = wire.Encoder(handle=handle)
            header = {"ask": {"name": name, "args": encoder.encode(list(args)),
                              "kwargs": encoder.encode(dict(kwargs))}}
            wire.send(self.sock, header, encoder.buffers)
            reply, buffers = wire.receive(self.sock)
            if "error" in reply:
                raise _asked_error(wire.RemoteError.from_json(reply["error"]))
            if "value" not in reply:
                raise wire.WireError("the grader's answer to a call of another exercise has no value")
            value = self.decode(reply["value"], buffers)
            for slot, node in reply.get("mutated") or []:
                original = args[slot] if isinstance(slot, int) else kwargs[slot]
                _fill(original, self.decode(node, buffers))
        return value

    def serve(self):
        while True:
            try:
                request, buffers = wire.receive(self.sock)
            except wire.ChannelClosed:
                return
            op = request.get("op")
            self.kernels = None
            handler = OPS.get(op)
            if handler is None:
                self.reply(error=wire.WireError(f"unknown request {op!r}"))
                continue
            try:
                value, mutated = handler(self, request, buffers)
            except BaseException as exc:  # a student's SystemExit must not end the contestant unseen
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self.reply(error=exc)
                continue
            self.reply(value, mutated=mutated)


def _name_of(value) -> str:
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if not isinstance(name, str):
        name = type(value).__qualname__
    return name[:200]


def _op_get(c: Contestant, request, buffers):
    return getattr(c.loaded, str(request.get("name"))), None


def _op_has(c: Contestant, request, buffers):
    return c.loaded.has(str(request.get("name"))), None


def _op_getattr(c: Contestant, request, buffers):
    return getattr(c.find(request.get("h", {})), str(request.get("name"))), None


def _op_setattr(c: Contestant, request, buffers):
    setattr(c.find(request.get("h", {})), str(request.get("name")), c.decode(request.get("value"), buffers))
    return None, None


def _op_call(c: Contestant, request, buffers):
    return _call(c, c.find(request.get("h", {})), request, buffers)


def _op_callattr(c: Contestant, request, buffers):
    """``obj.name(*args, **kwargs)`` in one round trip (a method the handle listed)."""
    return _call(c, getattr(c.find(request.get("h", {})), str(request.get("name"))), request, buffers)


def _call(c: Contestant, fn, request, buffers):
    import torch

    args = c.decode(request.get("args"), buffers)
    kwargs = c.decode(request.get("kwargs"), buffers)
    # What the grader handed in that a call may fill in place: lists, dicts, tensors.
    before = {i: a.detach().clone() for i, a in _slots(args, kwargs) if isinstance(a, torch.Tensor)}
    checker = None
    with contextlib.ExitStack() as around:
        # Chapter 7: every interpreted load and store checked (grading.contestant.triton_bounds)
        if c.spawn.bounds_checked:
            from grading.contestant.triton_bounds import bounds_checked

            checker = around.enter_context(bounds_checked())
        if c.watch is not None:  # watched: the notebook's own operations, not this process's decoding
            around.enter_context(c.watch)
        value = fn(*args, **kwargs)
    if checker is not None:  # which kernels ran and what of the result they wrote, for the judge to rule on
        c.kernels = checker.evidence(value)
    mutated = []
    for i, a in _slots(args, kwargs):
        if isinstance(a, (list, dict)):
            mutated.append((i, a))
        elif i in before and not _same(before[i], a):
            mutated.append((i, a))
    return value, mutated


def _asked_error(error: wire.RemoteError) -> BaseException:
    """The exception a reference the judge ran raised, raised again in the notebook's call."""
    from grading.compare import GradingFailure
    from grading.contestant import swap

    if error.kind == "grading_failure":
        return GradingFailure(error.message)
    if error.kind == swap.NotAnswered.wire_kind:  # the notebook's own function answers instead
        return swap.NotAnswered(error.message)
    if error.kind == "not_implemented":
        return NotImplementedError(error.message)
    cls = wire.BUILTIN_ERRORS.get(error.type) or next(
        (wire.BUILTIN_ERRORS[b] for b in error.bases if b in wire.BUILTIN_ERRORS), RuntimeError)
    return cls(error.message)


def _fill(original, value) -> None:
    """Put ``value`` into ``original`` in place: a tensor's elements, a list's items, a dict's entries."""
    import torch

    if isinstance(original, torch.Tensor) and isinstance(value, torch.Tensor):
        with torch.no_grad():
            original.copy_(value)
    elif isinstance(original, list) and isinstance(value, list):
        original[:] = value
    elif isinstance(original, dict) and isinstance(value, dict):
        original.clear()
        original.update(value)


def _slots(args, kwargs):
    yield from enumerate(args)
    yield from kwargs.items()


def _same(a, b) -> bool:
    import torch

    # Bit for bit (a NaN equals itself); a strided view (x[::2]) is compared by its values.
    return a.shape == b.shape and a.dtype == b.dtype and (
        a.numel() == 0 or torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                                      b.detach().contiguous().reshape(-1).view(torch.uint8)))


def _op_protocol(c: Contestant, request, buffers):
    obj = c.find(request.get("h", {}))
    name = request.get("name")
    args = c.decode(request.get("args", {"t": "list", "v": []}), buffers)
    if name == "len":
        return len(obj), None
    if name == "iter":
        return list(obj), None
    if name == "getitem":
        return obj[args[0]], None
    if name == "setitem":
        obj[args[0]] = args[1]
        return None, None
    if name == "contains":
        return args[0] in obj, None
    if name == "bool":
        return bool(obj), None
    if name == "repr":
        return repr(obj)[:2000], None
    if name == "isinstance":
        return isinstance(obj, c.find(args[0])), None
    if name == "data_ptr":  # where a tensor attribute's memory is (an in-place rule), "recent.k"
        for part in str(args[0]).split("."):
            obj = getattr(obj, part)
        return int(obj.data_ptr()), None
    raise wire.WireError(f"unknown protocol {name!r}")


def _op_watch(c: Contestant, request, buffers):
    """Start a watch of grading.contestant.watch by name, or stop the one running and return what it saw."""
    from grading.contestant.watch import WATCHES

    name = str(request.get("name"))
    if name == "stop":
        watch = c.watch
        c.watch = None
        return (watch.result() if watch is not None else None), None
    if name not in WATCHES or c.watch is not None:
        raise wire.WireError(f"no watch {name!r} can start now")
    c.watch = WATCHES[name]()  # entered around each call until stopped (_op_call)
    return None, None


def _op_service(c: Contestant, request, buffers):
    """Library code run on the notebook's objects (Chapter 7's compiler reports)."""
    from grading.contestant import services

    args = c.decode(request.get("args"), buffers)
    return services.run(c.loaded, str(request.get("name")), *args), None


def _op_ranks(c: Contestant, request, buffers):
    """Chapter 10's gloo group (grading.contestant.ranks): join it, read what was sent, leave it."""
    from grading.contestant import ranks

    name = request.get("name")
    if name == "join":
        return ranks.join(), None
    if name == "counted":
        return ranks.counted(), None
    if name == "finish":
        return ranks.finish(), None
    raise wire.WireError(f"unknown ranks request {name!r}")


OPS = {"get": _op_get, "has": _op_has, "getattr": _op_getattr, "setattr": _op_setattr, "call": _op_call,
       "callattr": _op_callattr,
       "protocol": _op_protocol, "service": _op_service, "watch": _op_watch,
       "ranks": _op_ranks}


def contestant(sock: socket.socket) -> int:
    """A fork of the zygote: read the spawn spec, load, serve. Returns the exit code (0)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    header, _ = wire.receive(sock)
    spawn = Spawn.from_json(header)
    import torch

    from grading.contestant import swap
    from grading.notebook.loader import run_notebook

    os.environ.update({str(k): str(v) for k, v in spawn.env.items()})
    torch.manual_seed(spawn.seed)
    torch.set_num_threads(max(1, int(spawn.threads)))
    c = Contestant(sock, spawn)
    try:
        node = _parse(spawn.notebook)
    except Exception as exc:  # the judge read it already; a notebook it could read but nbformat cannot
        wire.send(sock, {"error": remote_error(exc, kind="unreadable").to_json()})
        return 0
    told = {}
    if spawn.rank:
        from grading.contestant import ranks

        told = ranks.prepare(spawn.rank)
    c.loaded = run_notebook(node, SUBMISSION_DIR / spawn.name)
    if spawn.references is not None and spawn.exercise:
        owned, references = swap.references_from_package(spawn.references, c.loaded.module.__dict__, c.ask)
        swapping = swap.swap_in(c.loaded.module.__dict__, spawn.stem, spawn.exercise, owned, references)
        swapping.__enter__()  # for this contestant's whole life: it grades one exercise
    wire.send(sock, {"ready": _report(c.loaded).to_json(), **told})
    c.serve()
    return 0


def _parse(text: str):
    """The notebook node of ``text``. The judge validated it against its schema
    (grading.judge.open_notebook), which costs 0.13 s: a version-4 notebook is only parsed
    here, once per contestant. Raises what nbformat raises on a notebook it cannot read."""
    import nbformat

    data = json.loads(text)
    if isinstance(data, dict) and data.get("nbformat") == 4 and isinstance(data.get("cells"), list):
        return nbformat.from_dict(data)
    return nbformat.reads(text, as_version=4)


def _report(loaded) -> LoadReport:
    """What the load found, for the judge: the cells' problems, the placeholders left, how
    much the notebook printed, and the graded names it borrowed from a library."""
    report = LoadReport(problems=[wire.CellProblem.of(p.cell, p.kind, p.message, p.memory).to_json()
                                  for p in loaded.problems],
                        placeholders=dict(loaded.placeholders), output_chars=len(loaded.output))
    try:
        from grading.notebook import review as tamper

        report.borrowed = tamper.borrowed_names(loaded.module)
    except Exception:
        pass
    return report
