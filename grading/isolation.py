"""Run graders on a notebook in a child process, so a crash is a failed exercise.

A Triton kernel with an unmasked ``tl.load`` can read outside every tensor; under
``TRITON_INTERPRET=1`` that is a real memory access by the Python process, and a
segmentation fault takes the whole pytest run with it. Here the notebook is loaded
(with :func:`grading.loader.load_notebook`) in a fresh interpreter and a *check*
runs on it: a plain function ``check(nb, *args)`` that raises ``AssertionError``
(``GradingFailure``) on a wrong answer. The parent gets one :class:`CheckResult` per
case: passed, failed with the check's message, not implemented, raised an error,
crashed with a signal, or timed out.

    results = run_checks("exercises/07_triton_kernels.ipynb", "tests.test_07_triton_kernels:check_softmax",
                         [("R3-C37", ("R3-C37",)), ("R8-C100", ("R8-C100",))], env={"TRITON_INTERPRET": "1"})
    results["R3-C37"].raise_for_status()   # NotImplementedError / GradingFailure / nothing

Many cases share one child (importing torch and loading the notebook costs seconds).
When a case kills the child, that case is reported as crashed and the cases after it
run in a new child. ``check`` names a function importable from the repository root
(``package.module:function``); its arguments and the messages travel as JSON.

A grader that grades one exercise alone (``grading.substitute``) swaps the other
exercises' functions for references in the notebook it loaded; the child loads its own
copy, so the swap in force in the caller (``substitute.active()``, a small dict) goes
with the spec and the child applies it, with the same code, after loading the notebook.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from grading import substitute
from grading.layout import ROOT
from grading.compare import GradingFailure
from grading.outcome import Status, describe_signal, signal_name
from grading.runner import kill_group

OUTPUT_TAIL_CHARS = 3000  # enough for a faulthandler traceback, short enough to read

# The statuses of grading.outcome, so a kernel check and a batch row speak one language.
PASSED, FAILED, NOT_IMPLEMENTED, ERROR = Status.PASSED, Status.FAILED, Status.NOT_ATTEMPTED, Status.ERROR
CRASHED, TIMEOUT, NOT_RUN = Status.CRASHED, Status.TIMED_OUT, Status.NOT_RUN


@dataclass
class CheckResult:
    case: str
    status: Status  # PASSED, FAILED, NOT_ATTEMPTED, ERROR, CRASHED, TIMED_OUT or NOT_RUN
    message: str = ""
    signal: int | None = None  # the signal that killed the child, for CRASHED
    output: str = ""  # tail of the child's stdout and stderr, for CRASHED and TIMEOUT
    observed: dict | None = None  # a FAILED check's GradingFailure.observed, for the diagnosis

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def raise_for_status(self) -> None:
        """Nothing if the case passed; otherwise the exception the grader should show:
        ``NotImplementedError`` for a stub, :class:`GradingFailure` for the rest."""
        if self.status == PASSED:
            return
        if self.status == NOT_IMPLEMENTED:
            raise NotImplementedError(self.message)
        text = self.message
        if self.output and self.status in (CRASHED, TIMEOUT):
            text += "\n  last output of the child process:\n" + _indent(self.output)
        raise GradingFailure(text, self.observed)


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.rstrip().splitlines())


_CALLERS = object()  # run_checks' default for ``alone``: the swap in force in the caller


def run_checks(notebook, check: str, cases, *, timeout: float = 60.0, env: dict | None = None,
               alone=_CALLERS) -> dict[str, CheckResult]:
    """Run ``check(nb, *args)`` for every ``(case_id, args)`` in ``cases`` on the notebook
    at ``notebook``, loaded in a child process. ``timeout`` (seconds) bounds the whole
    batch; ``env`` is added to the child's environment. ``alone`` is the swap of
    ``grading.substitute`` the child applies after loading the notebook
    (``{"chapter": stem, "exercise": "N.M"}``, or None for none); by default the one in
    force in the caller (the test's). Returns ``{case_id: CheckResult}`` in the order of
    ``cases``."""
    if alone is _CALLERS:
        alone = substitute.active()
    cases = [(str(cid), list(args)) for cid, args in cases]
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), child_env.get("PYTHONPATH", "")]))
    results: dict[str, CheckResult] = {}
    deadline = time.monotonic() + timeout
    pending = cases
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            for cid, _ in pending:
                results[cid] = CheckResult(cid, NOT_RUN, f"not run: the batch of `{check}` ran past its {timeout:.0f} s limit")
            break
        done, pending = _one_child(Path(notebook), check, pending, remaining, child_env, timeout, env or {}, alone)
        results.update(done)
    return {cid: results[cid] for cid, _ in cases}


def _one_child(notebook: Path, check: str, cases, limit: float, env: dict, timeout: float, overrides: dict,
               alone: dict | None):
    """Run ``cases`` in one child until it finishes or dies. Returns (results, cases not yet run)."""
    from grading.judge import hand_over

    with tempfile.TemporaryDirectory(prefix="batch-", dir=_work()) as tmp:
        spec_path, results_path = Path(tmp) / "spec.json", Path(tmp) / "results.jsonl"
        output_path = Path(tmp) / "output.txt"
        copy = Path(tmp) / notebook.name  # the sandbox sees this folder, not where the notebook lies
        copy.write_bytes(notebook.read_bytes())
        notebook = copy
        hand_over(Path(tmp))
        spec_path.write_text(json.dumps({"notebook": str(notebook), "check": check, "cases": cases,
                                         "results": str(results_path), "output": str(output_path), "env": env,
                                         "alone": alone}))
        hand_over(spec_path)
        code, timed_out = _launch(spec_path, output_path, env, limit, overrides)
        full = output_path.read_text(errors="replace") if output_path.exists() else ""
        tail = full[-OUTPUT_TAIL_CHARS:]
        lines = results_path.read_text().splitlines() if results_path.exists() else []
    done: dict[str, CheckResult] = {}
    started = None
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by the crash
        if record["status"] == "started":
            started = record["case"]
        else:
            done[record["case"]] = CheckResult(record["case"], Status(record["status"]), record["message"],
                                               observed=record.get("observed"))
            started = None
    rest = [(cid, args) for cid, args in cases if cid not in done]
    if not rest:
        return done, []
    if started is None and not timed_out:
        # The child died before its first case (or between cases): the notebook could not load.
        how = f"was killed by {signal_name(-code)}" if code < 0 else f"exited with status {code}"
        for cid, _ in rest:
            done[cid] = CheckResult(cid, CRASHED if code < 0 else ERROR,
                                    f"the child process loading {notebook.name} {how} before running `{cid}`",
                                    signal=-code if code < 0 else None, output=tail)
        return done, []
    culprit = started if started is not None else rest[0][0]
    if timed_out:
        done[culprit] = CheckResult(culprit, TIMEOUT, f"{culprit}: still running after the {timeout:.0f} s limit "
                                    f"(an endless loop, or shapes far too large for the interpreter)", output=tail)
        for cid, _ in rest:
            if cid != culprit:
                done[cid] = CheckResult(cid, NOT_RUN, f"not run: an earlier case of `{check}` timed out")
        return done, []
    if code < 0:
        message = f"{culprit}: the process was killed by {describe_signal(-code)}"
        message += _notebook_frame(full, notebook)
        done[culprit] = CheckResult(culprit, CRASHED, message, signal=-code, output=tail)
    else:
        done[culprit] = CheckResult(culprit, ERROR, f"{culprit}: the process exited with status {code} "
                                    f"in the middle of the check (sys.exit or os._exit?)", output=tail)
    return done, [(cid, args) for cid, args in rest if cid != culprit]


def _notebook_frame(output: str, notebook: Path) -> str:
    """The innermost notebook line in a faulthandler dump (it lists the newest frame first)."""
    for line in output.splitlines():
        if "#cell-" in line and notebook.name in line:
            where = line.strip().split("#cell-", 1)[1]  # 'N", line L in function'
            cell, _, rest = where.partition('"')
            return f"\n  crashed in notebook cell {cell}{rest.replace(' in ', ', in ', 1)}"
    return ""


# -- sharing a batch between test processes -------------------------------------------
_memo: dict = {}


def shared_batch(key: str, compute) -> dict[str, CheckResult]:
    """``compute()`` (a ``run_checks`` call) once per ``key`` and test run.

    Parametrized graders read their case from one batch; under pytest-xdist the cases of one
    batch can land on several workers, and each would run the whole batch again. Within one
    xdist run (``PYTEST_XDIST_TESTRUNUID``) the first worker to ask runs it under a file lock
    and leaves the results for the others; outside xdist a dict in this process is enough.
    ``key`` must name everything the results depend on (notebook path, check, cases); the
    swap in force (``substitute.active()``), which ``run_checks`` sends along, is added here."""
    key = f"{key}|alone={json.dumps(substitute.active(), sort_keys=True)}"
    if key in _memo:
        return _memo[key]
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run_id or not hasattr(os, "fork"):
        _memo[key] = compute()
        return _memo[key]
    import fcntl
    import hashlib

    folder = Path(tempfile.gettempdir()) / f"grading-isolation-{run_id}"
    folder.mkdir(exist_ok=True)
    stem = folder / hashlib.sha256(key.encode()).hexdigest()[:24]
    with open(stem.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even if compute() raises
        done = stem.with_suffix(".json")
        if done.exists():
            results = {cid: CheckResult(**{**r, "status": Status(r["status"])}) for cid, r in json.loads(done.read_text()).items()}
        else:
            results = compute()
            done.write_text(json.dumps({cid: vars(r) for cid, r in results.items()}))
    _memo[key] = results
    return results


# -- launching the child ---------------------------------------------------------------
# A fresh interpreter pays for `import torch` (seconds) on every batch. By default the child
# is forked instead from a small fork server: a process started once per environment, which
# imports torch (and Triton, when present) and then only forks. It never runs a tensor
# operation, so no thread pool exists when it forks. GRADING_ISOLATION=subprocess selects a
# fresh interpreter per batch instead.
PRELOAD = ["torch", "numpy", "triton", "triton.language", "pytest", "nbformat", "grading.loader", "grading.compare",
           "grading.substitute"]
_servers: dict = {}


class _ForkServer:
    """``python -m grading.isolation --serve``: reads spec paths on stdin; for each, forks a
    child that runs it, answers ``pid N`` at once and ``exit CODE`` when the child is done
    (CODE negative for a signal)."""

    def __init__(self, env: dict):
        from grading.judge import contain

        argv, env = contain([sys.executable, "-m", "grading.isolation", "--serve"], _work(), env, show_tests=True)
        self.proc = subprocess.Popen(argv, cwd=_work(), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.buffer = b""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _line(self, deadline: float | None) -> str | None:
        import select

        while b"\n" not in self.buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.proc.stdout], [], [], wait)
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError("the fork server exited")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def run(self, spec_path: Path, limit: float) -> tuple[int, bool]:
        self.proc.stdin.write(f"{spec_path}\n".encode())
        self.proc.stdin.flush()
        pid = int(self._line(time.monotonic() + 60).split()[1])
        answer = self._line(time.monotonic() + limit)
        if answer is not None:
            return int(answer.split()[1]), False
        kill_group(pid)  # the child leads its own process group
        return int(self._line(None).split()[1]), True


def _close_servers() -> None:
    """At exit: end every fork server (EOF on its stdin) and reap it."""
    servers = list(_servers.values())
    _servers.clear()
    for server in servers:  # all at once: each then exits on its own
        try:
            server.proc.stdin.close()
        except OSError:
            pass
    for server in servers:
        try:
            server.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - exiting anyway
            server.proc.kill()
            server.proc.wait()


atexit.register(_close_servers)


_WORK: list = []
SANDBOX_VARIABLES = ("HOME", "TMPDIR", "TRITON_CACHE_DIR", "MPLCONFIGDIR", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR",
                     "GRADING_LIMITS")


def _work() -> Path:
    """The one folder this process's kernel-check children may write (their sandbox's work
    folder, grading.judge.contain): each batch's spec, results and notebook copy live in it."""
    if not _WORK:
        _WORK.append(tempfile.TemporaryDirectory(prefix="isolation-"))
    return Path(_WORK[0].name)


def _serve() -> int:
    import importlib

    from grading.contestant import apply_limits

    apply_limits(json.loads(os.environ.get("GRADING_LIMITS", "{}") or "{}"))

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing optional package is simply not preloaded
            pass
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setpgid(0, 0)
                _forked_child(line.strip())
                code = 0
            except BaseException:  # noqa: BLE001 - report, then leave without running the server's cleanup
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"exit {-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)}", flush=True)
    os._exit(0)  # nothing to clean up; skip tearing down torch


def _forked_child(spec_path: str) -> None:
    """In a child forked from the server: adopt the batch's output file (stdout is the
    server's pipe), environment and working directory, then run the checks."""
    spec = json.loads(Path(spec_path).read_text())
    fd = os.open(spec["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # The sandbox's own folders (grading.judge.contain) win over the caller's environment.
    sandboxed = {k: os.environ[k] for k in SANDBOX_VARIABLES if k in os.environ}
    os.environ.clear()
    os.environ.update(spec["env"])
    os.environ.update(sandboxed)
    os.chdir(ROOT)
    for path in reversed(spec["env"].get("PYTHONPATH", "").split(os.pathsep)):
        if path and path not in sys.path:
            sys.path.insert(0, path)
    _child(spec_path)


def _launch(spec_path: Path, output_path: Path, env: dict, limit: float, overrides: dict) -> tuple[int, bool]:
    """Run the child on ``spec_path``; returns (exit code, negative for a signal; timed out?)."""
    if os.environ.get("GRADING_ISOLATION", "forkserver") == "forkserver" and hasattr(os, "fork"):
        # One server per set of overrides: a variable read at import time (by a preloaded module)
        # has the value it had when the server started. The rest of the environment (which
        # pytest changes per test) is applied in the child.
        key = tuple(sorted(overrides.items()))
        server = _servers.get(key)
        if server is None or not server.alive():
            server = _servers[key] = _ForkServer(env)
        try:
            return server.run(spec_path, limit)
        except (RuntimeError, OSError, ValueError, IndexError, AttributeError):
            _servers.pop(key, None)  # the server died: fall back to a fresh interpreter
    from grading.judge import contain

    argv, env = contain([sys.executable, "-m", "grading.isolation", str(spec_path)], _work(), env, show_tests=True)
    with open(output_path, "w") as output:
        child = subprocess.Popen(argv, cwd=_work(), env=env, stdout=output, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            return child.wait(timeout=limit), False
        except subprocess.TimeoutExpired:
            kill_group(child.pid)  # the child's whole group: it may have started workers
            return child.wait(), True


# -- the child ------------------------------------------------------------------------
def fill_unwritten_memory() -> None:
    """As grading.plugin does in the grading process: memory a notebook allocates and never
    writes (torch.empty) reads as NaN or the largest integer, so a kernel that leaves part
    of its output unwritten fails, and is diagnosed, the same way on every run."""
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True


def _classify(exc: BaseException, prefix: str) -> tuple[str, str]:
    from grading.loader import _describe

    if isinstance(exc, NotImplementedError):
        return NOT_IMPLEMENTED, str(exc)
    if isinstance(exc, AssertionError):
        return FAILED, str(exc) or "assertion failed"
    return ERROR, _describe(exc, prefix)


def _child(spec_path: str) -> int:
    import faulthandler
    import importlib

    faulthandler.enable()  # on SIGSEGV the Python stack (with the notebook cell) goes to stderr
    spec = json.loads(Path(spec_path).read_text())
    fill_unwritten_memory()
    from grading.loader import load_notebook

    module_name, _, function_name = spec["check"].partition(":")
    check = getattr(importlib.import_module(module_name), function_name)
    nb = load_notebook(spec["notebook"])
    prefix = f"{Path(spec['notebook']).resolve()}#cell-"
    namespace = nb.module.__dict__ if getattr(nb, "module", None) is not None else {}
    with open(spec["results"], "a", buffering=1) as out, substitute.applied(namespace, spec.get("alone")):
        for cid, args in spec["cases"]:
            out.write(json.dumps({"case": cid, "status": "started"}) + "\n")
            out.flush()
            observed = None
            try:
                check(nb, *args)
                status, message = PASSED, ""
            except BaseException as exc:  # noqa: BLE001 - a student's SystemExit is a failure too
                status, message = _classify(exc, prefix)
                if status == ERROR and not isinstance(exc, Exception):
                    message += "\n" + "".join(traceback.format_exception_only(type(exc), exc)).strip()
                # What a wrong tensor held at fixed positions, so the parent's diagnosis can
                # compare it within the check's tolerance instead of by its message's digits.
                observed = getattr(exc, "observed", None) if isinstance(exc, GradingFailure) else None
            out.write(json.dumps({"case": cid, "status": status, "message": message, "observed": observed}) + "\n")
            out.flush()
    return 0


__all__ = ["CheckResult", "GradingFailure", "run_checks", "shared_batch", "signal_name"]

def _main() -> int:
    if sys.argv[1] == "--serve":
        return _serve()
    from grading.contestant import apply_limits

    apply_limits(json.loads(os.environ.get("GRADING_LIMITS", "{}") or "{}"))
    return _child(sys.argv[1])


if __name__ == "__main__":
    sys.exit(_main())
