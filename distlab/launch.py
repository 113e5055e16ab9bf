"""Start ``world_size`` gloo ranks on this machine, run one notebook function in each, and
bring back what each returned and how many bytes it sent.

How it runs
  - The caller (a test, the benchmark, the chapter) holds the rendezvous: a
    ``torch.distributed.TCPStore`` on ``127.0.0.1`` at a port the kernel picks (port 0),
    so no two runs can race for a port. Nothing listens on any other address, and
    ``GLOO_SOCKET_IFNAME=lo`` keeps gloo's own connections on the loopback interface.
  - One helper process (``python -m distlab.launch SPEC``) imports torch once and forks
    the ranks (importing torch four times on two cores costs more than the whole ring).
    It forks before any tensor exists, so no thread pool is copied into a rank.
  - Each rank loads the notebook with :func:`grading.notebook.loader.load_notebook` (the graders'
    own loader: the student's functions, as the single-process graders see them), binds
    the caller's swap of other exercises' functions for references, if any
    (:func:`grading.contestant.swap.swap_named`: a test of 10.6 runs the student's ``ring_attention``
    over the references of ``ring_step`` and ``shard_positions``), joins
    the process group with ``init_process_group("gloo", store=..., timeout=op_timeout)``
    and calls ``function(*args, **kwargs)`` for each of its calls.
  - Bytes sent: ``torch.distributed.isend`` is wrapped (before the notebook loads, so
    every way of reaching it counts: ``dist.isend``, ``dist.send``, which calls it, and
    ``dist.batch_isend_irecv``'s ``P2POp(dist.isend, ...)``) to add up
    ``tensor.numel() * tensor.element_size()`` of every tensor handed to it.

How it stops (each failure named by :mod:`grading.ranks`, as the judge's ranks name theirs)
  - A deadlock (every rank blocked in a send that no rank receives) ends in gloo's own
    timeout: the blocked call raises after ``op_timeout`` seconds and the rank reports it.
  - Whatever else hangs is killed: after ``timeout`` seconds the caller kills the helper's
    process group, which holds every rank. A rank also dies with its parent
    (``PR_SET_PDEATHSIG``), so a killed caller leaves nothing behind.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from grading.ranks import CallResult, RankResult, RanksFailed, crashed, killed, raise_for_failures, raised

# The records and the failure are the grader's (one vocabulary for both launchers of ranks);
# readers' notebooks and the chapter import them from here.
__all__ = ["CallResult", "RankResult", "RanksFailed", "raise_for_failures", "run_on_ranks"]

ROOT = Path(__file__).resolve().parent.parent
OUTPUT_TAIL_CHARS = 3000
PR_SET_PDEATHSIG = 1  # linux/prctl.h
RENDEZVOUS_TIMEOUT_S = 120  # how long a rank waits for the others to join (loading a notebook included)


# -- the caller's side ------------------------------------------------------------------
_CALLERS = object()  # run_on_ranks' default for ``swap``: the swap in force in the caller


def run_on_ranks(notebook, function: str, world_size: int, calls: list[list], *, op_timeout: float = 10.0,
                 timeout: float = 90.0, swap=_CALLERS) -> list[RankResult]:
    """Run ``function`` of the notebook at ``notebook`` on ``world_size`` gloo ranks.

    ``calls[rank]`` is that rank's list of ``(args, kwargs)``, or of
    ``(other_function, args, kwargs)`` to call another function of the notebook in the same
    process group; every rank has as many calls, made in order. ``op_timeout`` is the
    process group's timeout (a send or a receive that waits longer raises in the rank);
    ``timeout`` bounds the whole run, after which every rank is killed. ``swap`` is the
    swap each rank binds after loading the notebook (``{"chapter": stem, "exercise": "N.M"}``,
    :func:`grading.contestant.swap.swap_named`, or None for none); by default the one in
    force in the caller (the test's). Returns one :class:`RankResult` per rank. Raises
    ValueError when ``calls`` does not hold one list per rank, all of one length."""
    import torch

    if swap is _CALLERS:
        from grading.contestant.swap import swap_in_force

        swap = swap_in_force()

    if len(calls) != world_size or len({len(c) for c in calls}) != 1:
        raise ValueError(f"calls must hold one list per rank ({world_size}), all of one length")
    from grading.proc.zygote import contain, hand_over

    folder = Path(tempfile.mkdtemp(prefix="distlab-"))
    try:
        for rank, rank_calls in enumerate(calls):
            torch.save([_normal(call, function) for call in rank_calls], folder / f"calls{rank}.pt")
        copy = folder / Path(notebook).name  # the sandbox sees this folder, not where the notebook lies
        copy.write_bytes(Path(notebook).read_bytes())
        # The rendezvous store is the helper's (port 0: it picks one): inside the sandbox's
        # own network namespace the ranks reach only each other.
        spec = {"notebook": str(copy), "function": function, "world_size": world_size,
                "port": 0, "op_timeout": op_timeout, "folder": str(folder), "swap": swap}
        (folder / "spec.json").write_text(json.dumps(spec))
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
        timed_out = False
        argv, env = contain([sys.executable, "-m", "distlab.launch", str(folder / "spec.json")], folder, env,
                            show_tests=True)
        hand_over(folder)
        with open(folder / "output.txt", "wb") as output:
            helper = subprocess.Popen(argv, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=output,
                                      stderr=subprocess.STDOUT, process_group=0)
            try:
                helper.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            try:
                os.killpg(helper.pid, signal.SIGKILL)  # the helper's group holds every rank
            except (ProcessLookupError, PermissionError):
                pass
            helper.wait()
        tail = (folder / "output.txt").read_text(errors="replace")[-OUTPUT_TAIL_CHARS:]
        return [_read_rank(folder, rank, timed_out, timeout, tail) for rank in range(world_size)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _normal(call, function: str) -> tuple:
    """(function name, args, kwargs) from (args, kwargs) or (name, args, kwargs)."""
    name, args, kwargs = call if len(call) == 3 else (function, *call)
    return str(name), tuple(args), dict(kwargs)


def _read_rank(folder: Path, rank: int, timed_out: bool, timeout: float, tail: str) -> RankResult:
    import torch

    path = folder / f"rank{rank}.pt"
    if not path.exists():
        if timed_out:
            status, message = killed(f"rank {rank} was still running after {timeout:.0f} s and was killed")
            return RankResult(rank, status, f"{message}\n{_indent(tail)}")
        return RankResult(rank, *crashed(f"rank {rank} ended without a result\n{_indent(tail)}"))
    try:
        saved = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a return value torch cannot load safely
        return RankResult(rank, "error", f"rank {rank}: its return value could not be read back "
                                         f"(return tensors, tuples, lists or numbers): {type(exc).__name__}: {exc}")
    calls = [CallResult(**c) for c in saved["calls"]]
    return RankResult(rank, saved["status"], saved["message"], calls)


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.rstrip().splitlines())


# -- the helper and the ranks -----------------------------------------------------------
def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the caller's killpg still ends everything
        pass


def _helper(spec_path: str) -> int:
    _die_with_parent()
    spec = json.loads(Path(spec_path).read_text())
    import torch  # noqa: F401 - imported once here, inherited by every rank
    import torch.distributed  # noqa: F401

    import grading.contestant.swap  # noqa: F401 - imported once here too: every rank binds the swap with it
    import grading.notebook.loader  # noqa: F401
    from grading.contestant.limits import apply_limits

    apply_limits(json.loads(os.environ.get("GRADING_LIMITS", "{}") or "{}"))
    # A free port for rank 0's rendezvous store, found without starting the store here: a
    # store runs a thread, and a process forked from one with threads may deadlock or crash.
    # (Inside the sandbox's own network namespace nothing else can take the port meanwhile.)
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        spec["port"] = probe.getsockname()[1]  # every rank, forked below, reads it

    pids = []
    for rank in range(spec["world_size"]):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _die_with_parent()
                code = _rank(spec, rank)
            except BaseException:  # noqa: BLE001 - reported in the output, then leave at once
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    return 0


def _rank(spec: dict, rank: int) -> int:
    import torch
    import torch.distributed as dist

    from grading.contestant.ranks import count_sends
    from grading.contestant.swap import swap_named
    from grading.notebook.loader import load_notebook

    torch.set_num_threads(1)
    folder = Path(spec["folder"])
    counter = {"bytes": 0, "sends": 0}
    count_sends(counter)
    record = {"status": "ok", "message": "", "calls": []}

    def save():
        torch.save(record, folder / f"rank{rank}.pt.tmp")
        os.replace(folder / f"rank{rank}.pt.tmp", folder / f"rank{rank}.pt")

    nb = load_notebook(spec["notebook"])
    calls = torch.load(folder / f"calls{rank}.pt", weights_only=True)
    op_timeout = datetime.timedelta(seconds=spec["op_timeout"])
    store = dist.TCPStore("127.0.0.1", spec["port"], is_master=rank == 0, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=spec["world_size"], timeout=op_timeout)
    prefix = f"{Path(spec['notebook']).resolve()}#cell-"
    try:
        with swap_named(nb.module.__dict__, spec.get("swap")):
            for name, args, kwargs in calls:
                fn = getattr(nb, name)
                counter["bytes"] = counter["sends"] = 0
                start = time.perf_counter()
                value = fn(*args, **kwargs)
                record["calls"].append({"value": value, "bytes_sent": counter["bytes"], "sends": counter["sends"],
                                        "seconds": time.perf_counter() - start})
    except NotImplementedError as exc:
        status, message = raised(str(exc), spec["op_timeout"], not_implemented=True)
        record.update(status=status, message=message)
    except BaseException as exc:  # noqa: BLE001 - a student's SystemExit is a failure too
        from grading.notebook.loader import describe_exception

        status, message = raised(describe_exception(exc, prefix), spec["op_timeout"])
        record.update(status=status, message=message)
    save()
    try:
        if record["status"] == "ok":
            dist.barrier()  # no rank leaves while a neighbour still reads from it
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the result is saved; the caller reports the failure
        pass
    return 0


if __name__ == "__main__":
    sys.exit(_helper(sys.argv[1]))
