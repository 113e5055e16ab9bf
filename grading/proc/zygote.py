"""The one launcher of the processes that run a submission's code: the contestants' zygote.

A judge (pytest with the graders, :mod:`grading.judge`) asks :func:`launcher` for a
:class:`Launcher`, and the launcher asks its zygote (``python -m grading.contestant.main
--zygote``, in the sandbox where this machine has one) to fork a contestant. The zygote
pays for ``import torch`` once; a contestant costs a fork.

This module imports nothing heavy (no torch, no nbformat) on purpose: the grading plugin
imports it first and calls :func:`head_start`, so that the zygote's imports run while the
judge does its own, instead of after them.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from grading.layout import ROOT, TESTS
from grading.proc.env import child_env, work_folders

LOG_CAP = 64 * 1024  # bytes of the contestants' stdout and stderr kept (the tail of a crash)
MAX_PROCESSES = 1024  # processes and threads of one zygote's uid: gloo ranks and their threads count, and
# each contestant is three processes (grading.contestant.isolation: its first fork, an init, itself)
# Every allocation of 1 MiB or more is a mapping of its own, returned to the system when freed.
# glibc's default moves that bar with the history of frees, so a 16 MiB tensor was sometimes
# kept in the heap and sometimes not, and a rank's peak (grading.judge.measure) moved by a
# whole tensor between runs that held the same tensors: measured memory is what is held.
MMAP_THRESHOLD = 1 << 20
IN_PROCESS = "GRADING_IN_PROCESS"  # "1": make bench's in-process baseline, which starts no contestant


class ZygoteUnavailable(RuntimeError):
    """No contestant could be started (the zygote died twice in a row)."""


@dataclass
class Limits:
    """What the contestants of one judge may take, and where their sandbox is."""

    memory_mb: int = 4096
    threads: int = 1
    cuda_devices: str = ""
    uid: int | None = None  # a root-run grader's unprivileged uid (grading.proc.sandbox.child_uid)
    hide: list[str] = field(default_factory=list)  # folders the sandbox covers
    cpu_seconds: int = 0
    file_size_cap: int = 512 * 2**20
    max_processes: int = MAX_PROCESSES
    max_open_files: int = 1024

    def rlimits(self, cpu: bool = True) -> str:
        """``GRADING_LIMITS``: what :func:`grading.contestant.limits.apply_limits` sets in the child."""
        return json.dumps({"memory_mb": self.memory_mb, "cpu_seconds": self.cpu_seconds if cpu else 0,
                           "file_size_cap": self.file_size_cap, "max_processes": self.max_processes,
                           "max_open_files": self.max_open_files})


class Launcher:
    """One zygote per judge process, started when first needed (and again if it died)."""

    def __init__(self, limits: Limits | None = None, env: dict | None = None):
        self.limits = limits or Limits()
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.control: socket.socket | None = None
        # Reentrant: _start closes the zygote before it, under the lock already; close takes
        # it too, so that a close never runs halfway through a start made in a thread.
        self.lock = threading.RLock()
        self.log = bytearray()
        self.log_bytes = 0
        self.work: tempfile.TemporaryDirectory | None = None
        self.sandboxed = False
        # '' once a contestant has started in namespaces of its own (grading.contestant.isolation),
        # else why it did not, as its zygote said.
        self.isolation = "not started"

    def _start(self):
        from grading.proc import sandbox

        self.close()
        self.work = tempfile.TemporaryDirectory(prefix="contestant-")
        work = Path(self.work.name)
        judge_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-m", "grading.contestant.main", "--zygote", "--control-fd", str(zygote_end.fileno())]
        box = sandbox.status()
        self.sandboxed = box.sandboxed
        uid = self.limits.uid if self.limits.uid is not None else default_uid()
        if box.sandboxed:
            sandbox.prepare_work_dir(work, uid if os.geteuid() == 0 else None)
            argv = sandbox.wrap(argv, work=work, hide=[TESTS, *map(Path, self.limits.hide)], uid=uid,
                                gpu=bool(self.limits.cuda_devices))
        env = child_env(work, self.limits.threads, self.limits.cuda_devices)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
        env.update({str(k): str(v) for k, v in self.env.items()})
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)  # read by glibc at the zygote's start
        env["GLOO_SOCKET_IFNAME"] = "lo"  # Chapter 10's ranks: loopback, inside the sandbox's own network
        env["GRADING_LIMITS"] = self.limits.rlimits()
        self.proc = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, pass_fds=(zygote_end.fileno(),),
                                     start_new_session=True)
        zygote_end.close()
        self.control = judge_end
        threading.Thread(target=self._drain, args=(self.proc.stdout,), daemon=True).start()

    def _drain(self, stream):
        while True:
            data = stream.read1(65536)
            if not data:
                return
            self.log_bytes += len(data)
            self.log += data
            if len(self.log) > LOG_CAP:
                del self.log[: len(self.log) - LOG_CAP]

    def tail(self, chars: int = 3000) -> str:
        return self.log.decode("utf-8", "replace")[-chars:]

    def _control(self, message: dict, fds=(), timeout: float = 60.0) -> dict:
        self.control.settimeout(timeout)
        if fds:
            socket.send_fds(self.control, [json.dumps(message).encode()], list(fds))
        else:
            self.control.send(json.dumps(message).encode())
        data = self.control.recv(4096)
        if not data:
            raise ConnectionError("the zygote closed its control socket")
        return json.loads(data)

    def prestart(self, background: bool = False):
        """Start the zygote now, so that its ``import torch`` overlaps what this process does
        meanwhile (pytest collecting the graders); the first contestant then waits less.
        ``background``: in a thread, which returns at once. Starting is mostly waiting (the
        sandbox's probe is a Python started in bwrap, then the zygote's own start), and this
        process meanwhile does its own imports; :meth:`spawn` and :meth:`close` wait for it."""
        if background:
            threading.Thread(target=self._prestart_and_stay, name="zygote-head-start", daemon=True).start()
            return
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()

    def _prestart_and_stay(self):
        try:
            self.prestart()
        except Exception:  # noqa: BLE001 - the first spawn starts it again and says why it cannot
            pass
        # The sandbox dies with its parent (bwrap's --die-with-parent, a PR_SET_PDEATHSIG),
        # and to the kernel that parent is the thread that started it, not this process:
        # the thread stays, idle, as long as the process does.
        threading.Event().wait()

    def spawn(self) -> tuple[socket.socket, int]:
        """A new contestant: the judge's end of its socket, and its pid in the sandbox."""
        with self.lock:
            for attempt in range(2):
                if self.proc is None or self.proc.poll() is not None:
                    self._start()
                mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    reply = self._control({"op": "spawn"}, [theirs.fileno()])
                    theirs.close()
                    self.isolation = str(reply.get("isolation", "?"))[:1000]
                    return mine, int(reply["pid"])
                except (OSError, ValueError, KeyError, ConnectionError):
                    mine.close()
                    theirs.close()
                    self._start()  # the zygote died (a contestant may kill it): once more, fresh
            raise ZygoteUnavailable("the grader could not start a process for the notebook")

    def end(self, pid: int, kill: bool = True) -> int | None:
        """Kill (or just reap) a contestant; its exit status (negative: a signal), if known."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                return None
            try:
                if kill:
                    self._control({"op": "kill", "pid": pid}, timeout=10)
                return self._control({"op": "wait", "pid": pid}, timeout=10).get("returncode")
            except (OSError, ValueError, ConnectionError):
                return None

    def close(self):
        with self.lock:
            if self.proc is not None:
                from grading.proc.judges import kill_group

                kill_group(self.proc.pid)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                self.proc = None
            if self.control is not None:
                self.control.close()
                self.control = None
            if self.work is not None:
                self.work.cleanup()
                self.work = None


def default_uid() -> int | None:
    """A uid for the contestants of a judge that no batch gave one (a pytest run): this
    process's own, leased machine-wide, so no other grader's process limit shares its count."""
    from grading.proc.sandbox import process_uid

    return process_uid()


_LIMITS = [Limits()]
_LAUNCHERS: dict[str, Launcher] = {}


def launcher(env: dict | None = None) -> Launcher:
    """This judge's zygote for contestants whose environment adds ``env``: one per
    environment, since a library may read a variable once, at import, in the zygote
    (torch imports Triton, which reads ``TRITON_INTERPRET``)."""
    key = json.dumps(env or {}, sort_keys=True)
    if key not in _LAUNCHERS:
        _LAUNCHERS[key] = Launcher(_LIMITS[0], env or {})
        atexit.register(_LAUNCHERS[key].close)
    return _LAUNCHERS[key]


def current_limits() -> Limits:
    """The limits this judge's contestants (and contained children) get."""
    return _LIMITS[0]


def configure(limits: Limits):
    """The limits of this judge's contestants (grading.judge.main, from the batch's spec)."""
    for one in _LAUNCHERS.values():
        one.close()
    _LAUNCHERS.clear()
    _LIMITS[0] = limits


def head_start() -> None:
    """Start the default zygote now if this process is a pytest that will run graders:
    ``pytest`` or ``python -m pytest`` itself, or one of pytest-xdist's workers. A
    controller of workers (``-n``), a collect-only run and the in-process baseline start
    none; ``grading.judge.main`` configures its limits first and starts its zygote when it is
    first needed. Called by the grading plugin before it imports torch, so that the two
    imports overlap; wrong guesses cost a process that :func:`configure` closes. The start
    itself runs in a thread (:meth:`Launcher.prestart`): the plugin goes on importing meanwhile."""
    if os.environ.get(IN_PROCESS) == "1":
        return
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
        is_pytest = program.name in ("pytest", "py.test") or (program.name == "__main__.py"
                                                             and program.parent.name == "pytest")
        argv = sys.argv[1:]
        controller = any(a in ("-n", "--numprocesses", "--collect-only", "--co") or
                         a.startswith(("-n", "--numprocesses=")) for a in argv)
        if not is_pytest or controller:
            return
    launcher().prestart(background=True)


# -- children that load the notebook themselves, in the contestants' sandbox ----------------------
def contain(argv: list[str], work: Path, env: dict, *, show_tests: bool = False) -> tuple[list[str], dict]:
    """``argv`` and ``env`` for a child that loads the notebook itself (Chapter 7's kernel
    checks, Chapter 10's gloo ranks), in the sandbox of this judge's contestants: the same
    uid, the same folders hidden, ``work`` its only writable folder, and the limits set by
    the child (``GRADING_LIMITS``, :func:`grading.contestant.limits.apply_limits`). ``show_tests``
    leaves ``tests/`` visible, for children that import the graders' check functions."""
    from grading.proc import sandbox

    limits = current_limits()
    env = {**env, **work_folders(work), "GRADING_LIMITS": limits.rlimits(cpu=False)}
    if not sandbox.status().sandboxed:
        return argv, env
    uid = limits.uid if limits.uid is not None else default_uid()
    sandbox.prepare_work_dir(work, uid if os.geteuid() == 0 else None)
    hide = [*map(Path, limits.hide)] + ([] if show_tests else [TESTS])
    return sandbox.wrap(argv, work=work, hide=hide, uid=uid, gpu=bool(limits.cuda_devices)), env


def hand_over(path: Path) -> None:
    """Let the sandbox's uid (a root-run judge's, see :func:`contain`) use ``path``, a
    folder or file the judge made inside a contained child's work folder."""
    from grading.proc import sandbox

    if os.geteuid() != 0 or not sandbox.status().sandboxed:
        return
    limits = current_limits()
    sandbox.prepare_work_dir(Path(path), limits.uid if limits.uid is not None else default_uid())
