"""What keeps one contestant from the next: namespaces of its own inside the sandbox.

Every contestant of a judge is a fork of one zygote (:mod:`grading.proc.zygote`), in one
bubblewrap sandbox (:mod:`grading.proc.sandbox`), under one uid. Left at that, what one
contestant wrote the next could read: the work folder, ``/tmp``, ``/dev/shm``, System V
IPC, a process left running, the kernel's keyrings. Contestant 5.3, which is sent the
reference of 5.2 to call, could leave it where contestant 5.2 finds it. So:

- The zygote, before it runs anything of a submission, installs a seccomp filter that
  makes the keyring system calls (``add_key``, ``request_key``, ``keyctl``) fail with
  ENOSYS, in it and every fork (:func:`deny_keyrings`). Keys are not namespaced: a
  possessed session keyring is shared with every process that inherited it, sandbox or
  not, and a uid's keyring with every process of that uid.
- Each fork, before it reads its spawn message (:func:`enter_own_world`), enters user,
  mount, IPC and PID namespaces of its own (an unprivileged process may, in a user
  namespace of its own); sees every mount of the sandbox read-only (``/tmp`` among them),
  but for a fresh tmpfs of :data:`WORK_QUOTA_BYTES` over its work folder (its ``HOME``
  and ``TMPDIR``) and one over ``/dev/shm``, so what it writes is its own, capped in
  total, and gone when it ends; and forks twice more: a small init, PID 1 of the new PID
  namespace, and under it the contestant. When the contestant ends, the init ends, and
  the kernel kills every process left in the namespace. The first fork waits and ends
  as the contestant did.

Both are probed, not assumed: where the kernel refuses (no unprivileged user
namespaces, no seccomp), the contestant runs as before and :func:`enter_own_world`
says why, which the contestant reports to the judge.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import signal
import struct
from pathlib import Path

WORK_QUOTA_BYTES = 256 * 2**20  # all a contestant may write in its work folder (HOME and TMPDIR)
SHM_QUOTA_BYTES = 64 * 2**20  # and in /dev/shm (torch's shared tensors)
SHARED_MEMORY = "/dev/shm"

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x08000000, 0x10000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE = 0x400, 0x800, 0x1000, 0x4000, 1 << 18
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
_KEPT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
               "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 38, 22, 2

# seccomp: the audit architecture of this machine, and its keyring system calls.
_KEYRING_CALLS = {
    "x86_64": (0xC000003E, (248, 249, 250)),  # add_key, request_key, keyctl
    "aarch64": (0xC00000B7, (217, 218, 219)),
}
X32_SYSCALL_BIT = 0x40000000  # x86-64's x32 ABI numbers its calls from here: refused whole
ENOSYS = 38
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def keyring_filter() -> bytes | None:
    """The BPF program that refuses the keyring calls (and any call of a foreign ABI,
    through which they could be reached under other numbers); None on an architecture
    whose numbers are not known here."""
    known = _KEYRING_CALLS.get(platform.machine())
    if known is None:
        return None
    arch, (add_key, request_key, keyctl) = known
    deny = SECCOMP_RET_ERRNO | ENOSYS
    program = [
        (BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (BPF_JEQ_K, 0, 6, arch),  # a foreign ABI: deny
        (BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        (BPF_JGE_K, 4, 0, X32_SYSCALL_BIT),
        (BPF_JEQ_K, 3, 0, add_key),
        (BPF_JEQ_K, 2, 0, request_key),
        (BPF_JEQ_K, 1, 0, keyctl),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_RET_K, 0, 0, deny),
    ]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


def deny_keyrings() -> str:
    """Install :func:`keyring_filter` in this process (inherited by every fork); '' when
    done, else why not."""
    program = keyring_filter()
    if program is None:
        return f"keyrings: no seccomp filter for {platform.machine()}"
    buffer = ctypes.create_string_buffer(program)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    try:
        _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
        _check(_prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog)), "seccomp")
    except OSError as exc:
        return f"keyrings: not filtered ({exc})"
    return ""


def _prctl(option: int, *args: int) -> int:
    """prctl(2) with every argument an unsigned long, as the kernel reads them."""
    values = [*args, 0, 0, 0, 0][:4]
    return _libc.prctl(ctypes.c_int(option), *(ctypes.c_ulong(v) for v in values))


def _mount(source, target, fstype, flags: int, data) -> None:
    def encode(v):
        return None if v is None else str(v).encode()

    _check(_libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def _unescaped(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline and backslash as octal)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def writable_mounts() -> list[tuple[str, int]]:
    """Each mount of this mount namespace that may be written, with the flags a read-only
    remount must keep (a user namespace may add ``ro`` to a mount it inherited, not drop
    ``nosuid``, ``nodev`` or ``noexec``)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point, options = _unescaped(fields[4]), fields[5].split(",")
        if "rw" not in options or point == "/proc" or point.startswith(("/proc/", "/sys")):
            continue
        flags = sum(flag for name, flag in _KEPT_FLAGS.items() if name in options)
        found.append((point, flags))
    return found


def enter_own_world(work: Path, quota_bytes: int = WORK_QUOTA_BYTES) -> str:
    """Give this process (a fresh fork of the zygote, single-threaded) namespaces of its
    own; every mount it sees read-only but a fresh tmpfs of ``quota_bytes`` as its work
    folder and a small one as ``/dev/shm``; and a PID namespace of its own, whose PID 1
    waits for it: this function returns in a new process (PID 2 there), and the process
    that called it waits for that one and ends as it did, never returning. '' when done; else why not, with
    nothing changed."""
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID) != 0:
        return f"contestants: not in namespaces of their own ({os.strerror(ctypes.get_errno())})"
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing mounted here is seen outside
    # The sandbox's /tmp (and, under an unprivileged bwrap, its other tmpfs mounts) could
    # carry a file from one contestant to the next: read-only here. Writing to a device
    # (/dev/null) is not writing to its file system, and still works.
    for point, flags in writable_mounts():
        with contextlib.suppress(OSError):  # a mount this namespace may not change stays as it is
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, None)
    _mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, f"size={quota_bytes},mode=0700")
    if Path(SHARED_MEMORY).is_dir():
        _mount("tmpfs", SHARED_MEMORY, "tmpfs", MS_NOSUID | MS_NODEV, f"size={SHM_QUOTA_BYTES},mode=0700")
    os.chdir(work)  # the folder now, not the one the tmpfs covers
    # PID 1 of a namespace ignores the signals it sends itself (a notebook's own
    # os.kill(os.getpid(), SIGKILL) would do nothing): so PID 1 is a small init that only
    # waits, and the contestant is its child. The init hands the contestant's wait status
    # to this process through a pipe; this process then ends the same way.
    read, write = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(read)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # its parent killed: so is it, and its namespace
        contestant = os.fork()
        if contestant == 0:
            os.close(write)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            return ""
        status = _wait(contestant)
        os.write(write, struct.pack("i", status))
        os._exit(0)  # the kernel now kills whatever the contestant left in the namespace
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read(4)
    _wait(init)
    _end_as(struct.unpack("i", data)[0] if len(data) == 4 else signal.SIGKILL)


def _wait(child: int) -> int:
    """``child``'s wait status, once it has ended."""
    while True:
        try:
            return os.waitpid(child, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1 << 8


def _end_as(status: int):
    """End this process as a process with wait status ``status`` ended: the same exit
    code, or the same signal (which the zygote reports to the judge)."""
    if os.WIFSIGNALED(status):
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's and SIGSTOP's cannot be set
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
