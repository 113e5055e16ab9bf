"""The operating system's sandbox around the processes that run a submission: bubblewrap (``bwrap``).

A student's notebook runs in contestants (:mod:`grading.contestant.main`), forks of one
zygote per judge, so that zygote and everything it forks are treated as hostile. Detection
inside a process sees only what raises an audit event; a subprocess, ``ctypes`` or a signal
walks around it. So the zygote runs in namespaces of its own, built by ``bwrap`` (the
sandbox Flatpak uses), and each contestant adds its own inside (:mod:`grading.contestant.isolation`):

- its own PID, network, IPC, UTS and user namespaces (``--unshare-all``): ``kill -9 -1``
  or ``os.kill(os.getppid(), ...)`` reaches nothing outside; no network at all;
- a new session (``--new-session``: no terminal to inject keystrokes into) and
  ``--die-with-parent``: if the batch dies, the sandbox goes with it;
- a file system built from nothing (deny by default): the system's ``/usr``, ``/etc``
  and library folders, the Python installation and the repository, all read-only,
  with ``solutions/``, ``.git`` (which holds the solutions' history), ``_build/`` and the
  grader's output and input folders covered by empty folders; ``/tmp`` private; the
  child's work folder the only writable place;
- when the batch runs as root, ``bwrap`` builds the namespaces with root's rights and
  ``setpriv`` then drops to an unprivileged uid of its own (one per concurrent child,
  leased machine-wide from ``SANDBOX_UIDS``, :class:`UidLease`) with no capabilities,
  before the child starts: the kernel does not apply ``RLIMIT_NPROC`` to root, so only
  then does the process limit stop a fork bomb, and without capabilities nothing inside
  can remount what is read-only. Run as an ordinary user, ``bwrap`` adds a user namespace
  and the child keeps that user's uid.

Resource limits (memory, CPU seconds, processes, file size, open files) are set by the
zygote itself before any student code runs (:func:`grading.contestant.limits.apply_limits`).

Where ``bwrap`` is missing or not permitted (macOS, a locked-down container), grading
falls back to plain child processes and says so loudly: :func:`status` gives the line
the CLI prints and ``needs_review.md`` repeats.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from grading.layout import BUILD, ROOT

# The uids (and gids) a root-run batch drops to, one per child running at once: the process
# limit counts a uid's processes machine-wide, so two children must never share one.
SANDBOX_UIDS = range(61000, 61256)
# Read-only system folders the child needs (Python, its libraries, the C compiler that
# torch.compile calls, certificates and locale data); each bound only if it exists.
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Inside the repository, what a submission must not see: the solutions, their history
# and the build folder (which holds the default gradebook). Kept visible below _build:
# the real model's converted weights, which Chapter 8's graders load.
HIDDEN_IN_REPO = ("solutions", ".git", "_build")
VISIBLE_IN_BUILD = ("modellab",)
NO_SANDBOX = "sandbox: none (bwrap not available): a hostile submission can stop this run"


@dataclass(frozen=True)
class SandboxState:
    """Whether the contestants run sandboxed, and the line that says so (the one `Status` of a
    result is grading.outcome's)."""

    sandboxed: bool
    line: str


def _once(function):
    """``functools.lru_cache(maxsize=1)`` for a function of no arguments, whose first call
    runs once even when two threads make it at once: a judge probes the sandbox and leases
    its uid in a thread while its main thread imports torch (grading.proc.zygote.head_start),
    and a second probe would cost its time again, a second lease a second uid."""
    cached = functools.lru_cache(maxsize=1)(function)
    lock = threading.Lock()

    @functools.wraps(function)
    def once():
        with lock:
            return cached()

    once.cache_clear = cached.cache_clear
    return once


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _as_root() -> bool:
    return os.geteuid() == 0


@_once
def status() -> SandboxState:
    """Probe once per process: does ``bwrap`` exist here, may it make namespaces, and does
    what runs inside really get its own PID namespace (and, for a root-run batch, an
    unprivileged uid)? Only then is anything sandboxed. ``GRADING_SANDBOX=none`` turns the
    sandbox off on purpose (the benchmark of its cost)."""
    if os.environ.get("GRADING_SANDBOX", "").lower() == "none":
        return SandboxState(False, "sandbox: none (GRADING_SANDBOX=none): a hostile submission can stop this run")
    if bwrap_path() is None:
        return SandboxState(False, NO_SANDBOX)
    if _as_root() and shutil.which("setpriv") is None:
        return SandboxState(False, "sandbox: none (running as root, and setpriv, which drops root inside the "
                             "sandbox, is missing): a hostile submission can stop this run")
    # The probe imports the grader as the child will: a repository the sandbox's uid cannot
    # enter turns the sandbox off (a 0700 clone folder itself is re-made 0755, _read_only).
    # Its work folder is a folder of its own, as a child's is: binding all of /tmp would
    # cover a repository cloned under /tmp with the host's /tmp, where a 0700 clone folder
    # shuts the sandbox's uid out.
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as tmp, child_uid() as probe_uid:
        work = Path(tmp)
        prepare_work_dir(work, probe_uid)
        probe = wrap([sys.executable, "-c", "import grading.judge.main, os; print(os.getpid(), os.getuid())"],
                     work=work, hide=[], uid=probe_uid, chdir=False)
        try:
            done = subprocess.run(probe, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            return SandboxState(False, f"sandbox: none (bwrap failed: {exc}): a hostile submission can stop this run")
    why = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1][:200]
    try:
        pid, uid = map(int, done.stdout.split())
    except ValueError:
        return SandboxState(False, f"sandbox: none (bwrap is not permitted here: {why}): "
                             "a hostile submission can stop this run")
    if pid > 3 or (_as_root() and uid != probe_uid):
        return SandboxState(False, f"sandbox: none (the probe ran as pid {pid}, uid {uid}: no isolation): "
                             "a hostile submission can stop this run")
    user = ", unprivileged uid" if _as_root() else ""
    return SandboxState(True, f"sandbox: bwrap (own PID, network, IPC and mount namespaces{user}; repository "
                        "read-only; solutions hidden)")


# Where the uid leases live: one lock file per uid, locked (flock) by the process that holds
# it. The kernel drops a lock when its holder dies, so no lease outlives a crashed batch, and
# a lock file is machine-wide where a set in memory is not: two batches, or two pytest
# workers and the grader a release test starts, each drew 61000 from a set of their own,
# their contestants shared one process count, and Chapter 10's four gloo ranks could then
# not start their threads ("Resource temporarily unavailable").
# A fixed path (not $TMPDIR, which two graders may set apart), and only root uses it.
UID_LEASES = Path("/tmp/grading-sandbox-uids")


class UidLease:
    """An unprivileged uid that no other process on this machine holds until :meth:`release`
    (or until this process ends). Raises ``RuntimeError`` when every uid in
    ``SANDBOX_UIDS`` is held."""

    def __init__(self):
        import fcntl

        self._fd: int | None = None
        UID_LEASES.mkdir(mode=0o700, exist_ok=True)
        held = UID_LEASES.lstat()
        if not stat.S_ISDIR(held.st_mode) or held.st_uid != os.geteuid() or held.st_mode & 0o022:
            # Someone else made it: they could hold every lock and stop every batch.
            raise RuntimeError(f"{UID_LEASES} is not a folder of this user's that only it may write")
        for uid in SANDBOX_UIDS:
            fd = os.open(UID_LEASES / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise RuntimeError(f"every sandbox uid ({SANDBOX_UIDS.start}-{SANDBOX_UIDS.stop - 1}) is held "
                           "by a running grader")

    def release(self):
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the lock
            self._fd = None


@contextlib.contextmanager
def child_uid():
    """An unprivileged uid no other running child on this machine holds (root-run batches
    only; else None)."""
    if not _as_root():
        yield None
        return
    lease = UidLease()
    try:
        yield lease.uid
    finally:
        lease.release()


@_once
def _process_lease() -> UidLease:
    return UidLease()  # kept by the cache, so the lease is held as long as this process lives


def process_uid() -> int | None:
    """This process's own uid for the contestants it starts, held until it exits (root only;
    else None): what a pytest run's judge uses when no batch gave it one."""
    return _process_lease().uid if _as_root() else None


def _within(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def python_dirs() -> list[Path]:
    """The folders the Python in use lives in: the virtual environment and its base."""
    dirs = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent.parent}
    return sorted(dirs)


def _read_only(folder: Path) -> list[str]:
    """The bwrap arguments that show ``folder`` read-only. A folder others may not enter
    (a clone made in ``mktemp -d``'s 0700 folder) would shut out the uid a root-run batch
    drops to, and a bind keeps its mode; so it becomes a 0755 folder of the sandbox's own
    with each of its entries bound in it, which keep their own modes."""
    if not (_as_root() and folder.is_dir() and not folder.stat().st_mode & stat.S_IXOTH):
        return ["--ro-bind", str(folder), str(folder)]
    out = ["--perms", "0755", "--dir", str(folder)]
    for entry in sorted(folder.iterdir()):
        out += ["--ro-bind", str(entry), str(entry)]
    return out


def wrap(argv: list[str], *, work: Path, hide: list[Path], uid: int | None = None, gpu: bool = False,
         extra_read_only: list[Path] = (), chdir: bool = True) -> list[str]:
    """The ``bwrap`` command line that runs ``argv`` in a sandbox whose only writable
    folder is ``work``. ``hide`` lists folders (the grader's output, the submissions,
    the hidden tests) that are covered by an empty folder wherever they would be visible.
    ``uid``: for a root-run batch, the unprivileged uid the child drops to (:func:`child_uid`)."""
    cmd = [bwrap_path() or "bwrap", "--die-with-parent", "--new-session"]
    if _as_root():
        # No user namespace: bwrap mounts with root's rights, then setpriv drops them for good.
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        cmd += ["--unshare-all"]
    for d in SYSTEM_DIRS:
        p = Path(d)
        if p.is_symlink():
            cmd += ["--symlink", os.readlink(p), d]  # /lib -> usr/lib on merged-/usr systems
        elif p.is_dir():
            cmd += ["--ro-bind", d, d]
    visible = [*python_dirs(), ROOT, *map(Path, extra_read_only)]
    cmd += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # bwrap makes the folders leading to a mount point 0700; the unprivileged uid must pass.
    mounted = {Path(d) for d in SYSTEM_DIRS} | {Path("/tmp"), Path("/dev"), Path("/proc")}
    ancestors = sorted({a for d in [*visible, Path(work)] for a in Path(d).parents
                        if a != Path("/") and a not in mounted
                        and not any(_within(a, m) for m in mounted - {Path("/tmp")})},
                       key=lambda p: len(p.parts))
    for a in ancestors:
        cmd += ["--perms", "0755", "--dir", str(a)]
    for d in visible:
        cmd += _read_only(Path(d))
    if gpu:
        for dev in sorted(Path("/dev").glob("nvidia*")):
            cmd += ["--dev-bind", str(dev), str(dev)]
        cmd += ["--ro-bind", "/sys", "/sys"]
    covered = [ROOT / name for name in HIDDEN_IN_REPO] + [Path(h).resolve() for h in hide]
    for path in covered:
        if path.exists() and any(_within(path, v) for v in visible):
            # A folder gets an empty one over it; a file (``.git`` in a git worktree) an empty file.
            cmd += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    model_cache = os.environ.get("MODELLAB_CACHE")
    for name in VISIBLE_IN_BUILD:
        kept = Path(model_cache) if (name == "modellab" and model_cache) else BUILD / name
        if kept.is_dir():
            cmd += ["--ro-bind", str(kept), str(kept)]
    cmd += ["--bind", str(work), str(work)]
    if chdir:
        cmd += ["--chdir", str(work)]
    cmd.append("--")
    if _as_root():
        uid = SANDBOX_UIDS[0] if uid is None else uid
        cmd += [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--"]
    return cmd + list(argv)


def prepare_work_dir(work: Path, uid: int | None) -> None:
    """Make the child's work folder writable by the uid the sandbox drops to."""
    if uid is None:
        return
    for folder, _, files in os.walk(work):
        os.chown(folder, uid, uid)
        for name in files:
            os.chown(os.path.join(folder, name), uid, uid)
