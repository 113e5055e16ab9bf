"""The zygote: one process per judge that imports torch once and forks a contestant per request.

The judge's launcher (:mod:`grading.proc.zygote`) starts ``python -m grading.contestant.main
--zygote --control-fd N`` in the sandbox. The zygote sets its limits
(:mod:`grading.contestant.limits`), refuses keyrings to everything below it, imports what
every contestant needs, and then understands three control messages (one JSON datagram
each, on a ``SOCK_SEQPACKET`` socket): ``spawn`` (with one end of a new socket pair
attached: a fork becomes a contestant there, :func:`grading.contestant.server.contestant`),
``kill`` (the contestant's process group) and ``wait`` (its exit status, once it has ended).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
from pathlib import Path

from grading.contestant.limits import apply_limits

CONTROL_DATAGRAM = 4096  # bytes of one control message


def zygote(control: socket.socket, limits: dict) -> int:
    """Serve ``control`` until it closes: fork a contestant per ``spawn``, kill or reap one
    per ``kill`` or ``wait``. Returns the exit code (0)."""
    from grading.contestant import isolation

    apply_limits(limits)
    # Before any submission runs here: no contestant may reach a keyring (grading.contestant.isolation).
    unisolated = isolation.deny_keyrings()
    _import_shared()
    children: set[int] = set()
    world = _probe_own_world()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, CONTROL_DATAGRAM, 1)
        except OSError:
            break
        if not data:
            break
        try:
            message = json.loads(data)
        except ValueError:
            continue
        op = message.get("op")
        if op == "spawn" and fds:
            pid = _fork_contestant(control, fds[0])
            children.add(pid)
            _reply(control, {"pid": pid, "isolation": unisolated or world})
        elif op == "kill" and message.get("pid") in children:
            _kill(message["pid"])
            _reply(control, {"killed": message["pid"]})
        elif op == "wait" and message.get("pid") in children:
            children.discard(message["pid"])
            _reply(control, {"pid": message["pid"], "returncode": _wait(message["pid"])})
        else:
            for fd in fds:
                os.close(fd)
            _reply(control, {"error": f"unknown control message {op!r}"})
    return 0


def _import_shared() -> None:
    """What every fork needs, imported once here and shared by all of them."""
    import numpy  # noqa: F401

    import grading.compare  # noqa: F401
    import grading.contestant.server  # noqa: F401
    import grading.contestant.swap  # noqa: F401
    import grading.notebook.loader  # noqa: F401

    # As the judge does (grading.judge.plugin): memory a notebook allocates and never writes
    # reads as NaN or the largest integer, the same on every run.
    from grading import determinism

    determinism.make_deterministic()
    # A fork shares these pages until it writes one: the collector, walking every object,
    # would copy all of them into each contestant at a moment that depends on how many
    # objects the contestant made, and its measured memory with them. Frozen, it never
    # walks them.
    gc.collect()
    gc.freeze()


def _fork_contestant(control: socket.socket, fd: int) -> int:
    """Fork a contestant that serves the socket ``fd``; its pid (here, in the zygote)."""
    from grading.contestant import isolation
    from grading.contestant.server import contestant

    pid = os.fork()
    if pid == 0:
        control.close()
        os.setpgid(0, 0)  # its own group: a kill takes whatever it started with it
        code = 1
        try:
            # Namespaces and a work folder of its own: it returns in a child that is
            # PID 1 of a PID namespace (grading.contestant.isolation).
            isolation.enter_own_world(Path.cwd())
            code = contestant(socket.socket(fileno=fd))
        finally:
            os._exit(code)
    os.close(fd)
    return pid


def _kill(pid: int) -> None:
    """SIGKILL a contestant's process group, then the contestant itself."""
    for target in (-pid, pid):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass


def _wait(pid: int) -> int:
    """A contestant's exit status once it has ended (negative: the signal that ended it)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        status = 0
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _probe_own_world() -> str:
    """Whether a fork may enter namespaces of its own here ('' if so, else why not): tried
    once, in a fork that ends at once, so the judge can be told."""
    from grading.contestant import isolation

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        why = "?"
        try:
            why = isolation.enter_own_world(Path.cwd())
        finally:
            os.write(write, why.encode()[:1000])
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        why = pipe.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return why


def _reply(control: socket.socket, message: dict):
    try:
        control.send(json.dumps(message).encode())
    except OSError:
        pass
