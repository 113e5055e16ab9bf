"""What a contestant costs, measured by the judge from outside: memory and bytes on the wire.

Some rules are about how the notebook computes: no score matrix (Chapter 5), no
up-projected cache (Chapter 13), no rank that gathers every shard (Chapter 10). Code in
the notebook's process can silence anything that watches from inside it, so these are
read where that process cannot reach: the kernel's own accounts of the contestant's
process tree, found from the judge by the contestant's pid (:class:`Tree`).

- **Memory** (:func:`peak_memory`): the tree's private memory when the call starts
  (what it holds already: a buffer reserved ahead of time counts), plus the peak of what
  it charges during the call. The peak comes from a memory cgroup the judge makes and
  moves the tree into (``memory.max_usage_in_bytes`` of cgroup v1, ``memory.peak`` of
  cgroup v2): every page counts, a child process's and a file's in its tmpfs alike.
  Where the judge may make no cgroup (not root, no delegated cgroup2) the peak is the
  kernel's high-water mark of each process (``VmHWM``), reset by the judge before the
  call (``/proc/PID/clear_refs``), which the process could reset again itself;
  ``Peak.how`` says which. Where neither can be read, :class:`Unmeasurable` says why.
  So that a peak is what the notebook held, and not its allocator's or the protocol's
  history, a contestant's large allocations are returned when freed
  (:data:`grading.proc.zygote.MMAP_THRESHOLD`), its zygote's objects are frozen before it
  forks, and the tensors of a message are sent from their own memory, not from a copy.
- **Bytes** (:func:`loopback_bytes`): what crossed the loopback of the network
  namespace the contestants share (``/proc/PID/net/dev``), read from outside it:
  Chapter 10's ranks talk only there.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
CGROUP_V2 = Path("/sys/fs/cgroup")
ZYGOTE_MODULE = b"grading.contestant.main"
_names = itertools.count()


class Unmeasurable(RuntimeError):
    """The judge cannot read the contestant's accounts here (no ``/proc``, another PID
    namespace): a test that needs them is skipped with this reason, never passed."""


@dataclass
class Peak:
    """What a measured call cost: ``bytes`` = ``held`` (private memory at its start) +
    ``charged`` (the peak of what it added); ``how`` names the account read."""

    held: int = 0
    charged: int = 0
    how: str = ""

    @property
    def bytes(self) -> int:
        return self.held + self.charged


@dataclass
class Tree:
    """The host pids of one contestant's processes (its first fork and all below it)."""

    pids: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, nb) -> "Tree":
        """The tree of ``nb``'s contestant (:class:`grading.judge.proxy.RemoteNotebook`), started if it is not."""
        session = nb._session()
        root = session.launch.proc.pid if session.launch.proc is not None else None
        if root is None or not (PROC / str(root)).is_dir():
            raise Unmeasurable("the grader cannot see its contestants' processes in /proc here")
        zygote = _zygote(root)
        first = [p for p in _children(zygote) if _nspid(p)[-1:] == [session.pid]]
        if len(first) != 1:
            raise Unmeasurable(f"the contestant (pid {session.pid} in its sandbox) is not among its zygote's children")
        return cls(_descendants(first[0]))

    def refresh(self) -> "Tree":
        """The same tree now: the processes it has started since, the ended ones gone."""
        return Tree(_descendants(self.pids[0])) if self.pids else self


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in (PROC / str(pid) / "task").glob("*"):
        out += [int(c) for c in _read(task / "children").split()]
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p not in found and (PROC / str(p)).is_dir():
            found.append(p)
            todo += _children(p)
    return found


def _status(pid: int) -> dict[str, str]:
    fields = {}
    for line in _read(PROC / str(pid) / "status").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _nspid(pid: int) -> list[int]:
    return [int(x) for x in _status(pid).get("NSpid", "").split()]


def _zygote(root: int) -> int:
    """The zygote under ``root`` (bwrap, or the zygote itself unsandboxed): the shallowest
    process started as ``python -m grading.contestant.main`` (its forks, deeper, share its
    command line; bwrap's own holds it among its arguments)."""
    level = [root]
    while level:
        for pid in level:
            with contextlib.suppress(OSError):
                if (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")[1:3] == [b"-m", ZYGOTE_MODULE]:
                    return pid
        level = [c for p in level for c in _children(p)]
    raise Unmeasurable("the grader found no zygote under its sandbox's process")


def _kib(text: str) -> int:
    parts = text.split()
    return int(parts[0]) * 1024 if parts and parts[0].isdigit() else 0


def private_bytes(pids: list[int]) -> int:
    """The memory these processes hold that no other process shares (``Private_*`` of
    ``smaps_rollup``): what a contestant holds beyond its zygote's pages."""
    total = 0
    for pid in pids:
        text = _read(PROC / str(pid) / "smaps_rollup")
        if not text and (PROC / str(pid)).is_dir():
            raise Unmeasurable(f"the grader may not read /proc/{pid}/smaps_rollup of its contestant")
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.startswith("Private_"):
                total += _kib(value)
    return total


# -- the peak: a cgroup, else each process's high-water mark ------------------------------------
class _Cgroup:
    """A memory cgroup of the judge's own, that the tree is moved into for one call."""

    def __init__(self, folder: Path, peak_file: str, reset: bool):
        self.folder, self.peak_file = folder, peak_file
        folder.mkdir()
        if reset:
            (folder / peak_file).write_text("0")
        self.homes: dict[int, Path] = {}

    def enter(self, pids: list[int]) -> None:
        for pid in pids:
            if pid not in self.homes:
                self.homes[pid] = _cgroup_dir(pid, self.folder)
                with contextlib.suppress(OSError):  # ended meanwhile
                    (self.folder / "cgroup.procs").write_text(str(pid))

    def peak(self) -> int:
        return int(_read(self.folder / self.peak_file).strip() or 0)

    def leave(self) -> None:
        for pid in _read(self.folder / "cgroup.procs").split():
            home = self.homes.get(int(pid), self.folder.parent)
            with contextlib.suppress(OSError):
                (home / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.folder.rmdir()


def _cgroup_dir(pid: int, inside: Path) -> Path:
    """The cgroup folder ``pid`` is in, in the hierarchy that holds ``inside``."""
    v1 = inside.is_relative_to(CGROUP_V1)
    for line in _read(PROC / str(pid) / "cgroup").splitlines():
        number, controllers, path = line.split(":", 2)
        if (v1 and "memory" in controllers.split(",")) or (not v1 and number == "0"):
            return (CGROUP_V1 if v1 else CGROUP_V2) / path.lstrip("/")
    return inside.parent


CGROUP_PREFIX = "grading-measure-"


def _new_cgroup() -> _Cgroup | None:
    """A fresh memory cgroup beside the judge's own, or None where it may make none."""
    name = f"{CGROUP_PREFIX}{os.getpid()}-{next(_names)}"
    for base, peak, reset in ((CGROUP_V1, "memory.max_usage_in_bytes", True), (CGROUP_V2, "memory.peak", False)):
        if not (base / "cgroup.procs").exists() or (base == CGROUP_V2 and not (base / "cgroup.controllers").exists()):
            continue
        home = _cgroup_dir(os.getpid(), base / "x")
        _sweep(home)
        with contextlib.suppress(OSError):
            made = _Cgroup(home / name, peak, reset)
            if (made.folder / peak).exists():
                return made
            made.leave()
    return None


@contextlib.contextmanager
def peak_memory(nb):
    """``with peak_memory(nb) as peak:`` the calls inside are measured; on leaving,
    ``peak.bytes`` is what the contestant's tree held at their start plus the most it
    added while they ran. Raises :class:`Unmeasurable` before the calls where the
    judge cannot read it."""
    tree = Tree.of(nb)
    peak = Peak(held=private_bytes(tree.pids))
    group = _new_cgroup()
    if group is None:
        before = {pid: _reset_high_water(pid) for pid in tree.pids}
        peak.how = "high-water mark"
    else:
        group.enter(tree.pids)
        peak.how = "cgroup"
    try:
        yield peak
    finally:
        now = tree.refresh().pids
        if group is not None:
            group.enter(now)  # what it started during the call, if still alive, is already inside
            peak.charged = group.peak()
            group.leave()
        else:
            peak.charged = sum(max(0, _kib(_status(p).get("VmHWM", "")) - before.get(p, 0)) for p in now)


def _sweep(home: Path) -> None:
    """Remove the empty cgroups that a judge killed mid-call left beside ``home``'s (its pid is
    gone): a killed batch must not leave the machine's cgroup tree growing."""
    for folder in home.glob(CGROUP_PREFIX + "*"):
        owner = folder.name.removeprefix(CGROUP_PREFIX).split("-", 1)[0]
        if owner.isdigit() and not (PROC / owner).is_dir():
            with contextlib.suppress(OSError):  # still holds a process, or another judge swept it first
                folder.rmdir()


def _reset_high_water(pid: int) -> int:
    """Set ``pid``'s high-water mark to what it holds now; that amount (bytes)."""
    try:
        (PROC / str(pid) / "clear_refs").write_text("5")
    except OSError as exc:
        raise Unmeasurable(f"the grader may not reset its contestant's high-water mark ({exc.strerror})") from None
    return _kib(_status(pid).get("VmRSS", ""))


def loopback_bytes(nb) -> int:
    """Bytes sent so far on the loopback of the network namespace ``nb``'s contestants
    share (their zygote's, started if it is not), as its kernel counts them."""
    from grading.proc.zygote import launcher

    launch = nb.launch or launcher(nb.extra.get("env"))
    launch.prestart()
    if launch.proc is None or not (PROC / str(launch.proc.pid)).is_dir():
        raise Unmeasurable("the grader cannot see its contestants' processes in /proc here")
    for line in _read(PROC / str(_zygote(launch.proc.pid)) / "net" / "dev").splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[8])  # transmit bytes
    raise Unmeasurable("the grader cannot read its contestants' network counters")
