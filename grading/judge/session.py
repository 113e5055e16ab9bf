"""One contestant as the judge sees it: a socket, a process, and the failures a call can end in.

A :class:`Session` is started from a :class:`~grading.wire.Spawn` by the zygote
(:mod:`grading.proc.zygote`), waits for the contestant's load report, sends requests and
reads answers under a timeout, and answers the contestant's own questions (a call into
another exercise, which the judge runs on its reference: ``grading.judge.substitute``).
A crash, a timeout or a broken reply ends the session with a :class:`ContestantFailure`
that says which; the proxy (:mod:`grading.judge.proxy`) starts a new one for the next call.
"""

from __future__ import annotations

import json
import os
import socket
import time

from grading import wire
from grading.compare import GradingFailure
from grading.notebook.loader import NotebookLoadError
from grading.proc.zygote import Launcher, ZygoteUnavailable
from grading.wire import LoadReport, Spawn

CALL_TIMEOUT_S = float(os.environ.get("GRADING_CALL_TIMEOUT", 120))  # one call into the notebook
# Requests that only read (a global, an attribute, whether a name exists); see Session.request.
READS = frozenset({"get", "getattr", "has"})
CALLS = frozenset({"call", "callattr"})  # requests that run the notebook's code on the grader's arguments
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
    """Its answer did not fit in the judge's own memory limit (grading.proc.judges.judge_memory_mb):
    the contestant is stopped and the test scores as the notebook's memory limit."""

    status = "memory limit"


def judge_limit() -> str:
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
        # Spawned to report what its Triton launches wrote (Chapter 7): every call it answers
        # with a value carries that record, or the contestant is stopped (see _launch_record).
        self.reports_launches = spawn.bounds_checked
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
                       + (f"\n  last output:\n{indented(tail)}" if tail.strip() else ""), ContestantCrashed, ended=True)
        except wire.WireError as exc:
            self._stop(f"the notebook's process sent what the grader cannot read while {what}: {exc}",
                       ContestantBroken)
        except MemoryError:
            self._stop(f"the notebook's answer while {what} did not fit in the grader's memory "
                       f"(limit {judge_limit()})", AnswerTooLarge)
        except OSError as exc:
            self._stop(f"the channel to the notebook's process failed while {what}: {exc}", ContestantCrashed)

    def _reply_to_ask(self, ask, buffers: bytes) -> None:
        """Run the reference the contestant asks for on the plain values it sent, and send
        back the result and the arguments the reference changed in place. A question about
        a name this contestant may not ask is a forged message (:class:`wire.WireError`)."""
        import torch

        from grading.notebook.loader import remote_error

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
        before = {slot: a.clone() for slot, a in slots(args, kwargs) if isinstance(a, torch.Tensor)}
        try:
            from grading.judge.replay import unrecorded

            with unrecorded():
                value = self.answers[name](*args, **kwargs)
        except Exception as exc:  # the reference's own error for these inputs (a ValueError it names)
            wire.send(self.sock, {"error": remote_error(exc).to_json()})
            return
        encoder = wire.Encoder()
        try:
            changed = [[slot, encoder.encode(a)] for slot, a in slots(args, kwargs)
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
        if self.reports_launches and header.get("op") in CALLS and "value" in answer[0]:
            self._launch_record(answer[0], what)
        return answer

    def _launch_record(self, reply: dict, what: str) -> None:
        """Fail closed: a contestant spawned to report its Triton launches
        (``Spawn.bounds_checked``) that answers a call without the record of them, or with
        one off its schema, is stopped as broken ("tampered"). Its process runs the
        notebook's code, which could suppress the record to hide a result computed in
        PyTorch; the judge reads no record as a forgery, never as "nothing observed"."""
        from grading.judge.triton_launch import Launches

        if Launches.from_json(reply.get("triton")) is None:
            self._stop(f"{what}: the notebook's process answered without the record of its Triton launches that "
                       "it was started to keep (suppressed or forged by the notebook's code?)", ContestantBroken)

    def close(self):
        if not self.dead:
            self.dead = "closed"
            self.sock.close()
            self.launch.end(self.pid, kill=True)


def slots(args: list, kwargs: dict):
    """Every argument of a call with where it sits: its index, or its keyword."""
    yield from enumerate(args)
    yield from kwargs.items()


def indented(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines())
