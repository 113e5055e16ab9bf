"""Files handed in, read as untrusted bytes: regular files with one name, never a link.

A submission is whatever a student (or their LMS) put in a folder: a symbolic link to
another student's work or to ``/proc``, a hard link, a FIFO that blocks a reader, a
device, a file of 500 MB. Every process that reads one (the front doors, the judge) reads
it here: opened without following links and without waiting, checked on the open
descriptor, and read whole only when its size is under a cap (a larger file is hashed and
copied in chunks, never held).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

LINK = "is a link, not a notebook"  # what needs_review.md says of a link handed in as a notebook
SPECIAL = "is not a regular file (a FIFO, a device or a socket)"  # and of anything else that is not a file
# The largest notebook read whole. The book's largest solution, outputs and all, is a few
# MB; a notebook far past this one holds data or outputs, and grading it would hold it in
# the batch process, its judge and its contestant at once.
NOTEBOOK_CAP = 50 * 2**20
CHUNK = 1 << 20  # bytes read at a time where a file is hashed or copied, never held whole


class TooLarge(OSError):
    """A file over the size cap it was read under; its size is in the message."""


def file_kind(info: os.stat_result) -> str:
    """``""`` for a regular file with one name; else what it is, in the words of the
    review list (a link of either kind, a FIFO, a device, a socket)."""
    if stat.S_ISLNK(info.st_mode):
        return LINK
    if not stat.S_ISREG(info.st_mode):
        return SPECIAL
    if info.st_nlink > 1:
        return f"is a link (a file with {info.st_nlink} names), not a notebook"
    return ""


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A descriptor on ``path`` and its ``fstat``, when it is a regular file with one name:
    opened without following a link and without waiting on a FIFO, and checked on the
    open descriptor (so a file swapped for a link after a walk is still refused). OSError
    otherwise (the descriptor is then closed)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    info = os.fstat(fd)
    kind = file_kind(info)
    if kind:
        os.close(fd)
        raise OSError(f"{Path(path).name} {kind}")
    return fd, info


def _read_capped(fd: int, size: int, cap: int, name: str) -> bytes:
    """At most ``cap`` bytes from ``fd``, whose ``fstat`` said ``size``: refused before
    any byte is read when ``size`` is over the cap, and again if the file grew past it
    since (a read never asks for more than one byte past the cap)."""
    if size > cap:
        raise TooLarge(f"{name} is {size / 2**20:.0f} MB, over the {cap // 2**20} MB a notebook may be "
                       "(outputs or data saved in it?)")
    data = bytearray(min(size, cap) + 1)
    view, filled = memoryview(data), 0
    while filled < len(data) and (got := os.readv(fd, [view[filled:filled + CHUNK]])):
        filled += got
    if filled > cap:
        raise TooLarge(f"{name} grew past the {cap // 2**20} MB a notebook may be while it was read")
    return bytes(view[:filled])


def read_untrusted(path: Path, cap: int = NOTEBOOK_CAP) -> bytes:
    """The bytes of ``path`` when it is a regular file with one name (see
    :func:`_open_regular`) of at most ``cap`` bytes: its size is read first and a larger
    file is refused (:class:`TooLarge`) before it is read. OSError otherwise."""
    fd, info = _open_regular(path)
    try:
        return _read_capped(fd, info.st_size, cap, Path(path).name)
    finally:
        os.close(fd)


def digest_untrusted(path: Path) -> str:
    """The SHA-256 of ``path`` (a regular file with one name, as :func:`read_untrusted`
    requires), read in chunks: a file of any size costs one chunk of memory."""
    fd, _ = _open_regular(path)
    digest = hashlib.sha256()
    try:
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def copy_one_untrusted(src: Path, target: Path) -> None:
    """Copy the regular file ``src`` (as :func:`read_untrusted` requires) to ``target`` in
    chunks: a file of any size costs one chunk of memory."""
    fd, _ = _open_regular(src)
    try:
        with open(target, "wb") as out:
            while chunk := os.read(fd, CHUNK):
                out.write(chunk)
    finally:
        os.close(fd)


def walk_untrusted(root: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Every entry under ``root`` (any depth, sorted), found with ``lstat`` only: the
    regular files with one name, and the rest with what each is (a link, which is never
    followed, into a folder or out of the submission; a FIFO, a device, a socket).
    Folders are entered only when they are real folders. ``root`` itself is not
    followed either: a link or a FIFO handed in as the submission is the one entry."""
    files: list[Path] = []
    others: list[tuple[Path, str]] = []
    info = os.lstat(root)
    if not stat.S_ISDIR(info.st_mode):
        kind = file_kind(info)
        (others.append((root, kind)) if kind else files.append(root))
        return files, others
    stack = [root]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name, reverse=True):
                path = Path(entry.path)
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    stack.append(path)
                elif kind := file_kind(info):
                    others.append((path, kind))
                else:
                    files.append(path)
    return sorted(files), sorted(others)


def copy_untrusted(src: Path, dest: Path) -> list[tuple[str, str]]:
    """Copy the regular files under ``src`` (a student's folder) into ``dest``, keeping
    their relative paths; a link, a FIFO, a device or a socket is left out (never read,
    never followed) and returned with what it is, as (relative path, kind), for review."""
    files, others = walk_untrusted(src)
    for path in files:
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_one_untrusted(path, target)
    return [(str(p.relative_to(src)), kind) for p, kind in others]


def entry_kind(path: Path) -> str:
    """What ``path`` is when it is not a real folder or a regular file with one name (in
    the review list's words: a link, a FIFO...), found with ``lstat``; "" when it is one."""
    try:
        info = path.lstat()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    return "" if stat.S_ISDIR(info.st_mode) else file_kind(info)


def not_a_regular_file(path: Path) -> bool:
    """A symbolic link, a hard link (a file with other names, which may lie outside the
    submission), a FIFO or a device: read as a notebook, it would be some other file."""
    try:
        info = path.lstat()
    except OSError:
        return True
    return bool(file_kind(info))


def read_submission(path: Path, cap: int = NOTEBOOK_CAP) -> str:
    """The text of a notebook handed in, read as a regular file only: a symbolic link, a
    hard link (a file with other names), a FIFO, a device or a file over ``cap`` bytes (its
    size read before any byte) is refused (NotebookLoadError). Here, not in the judge, so
    that the processes that only copy submissions for their judges (grading.proc.judges,
    the Gradescope front door) need not import torch."""
    from grading.notebook.loader import NotebookLoadError

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise NotebookLoadError(f"{path} does not exist") from None
    except OSError as exc:
        if Path(path).is_symlink():
            raise NotebookLoadError(f"{Path(path).name} is a link, not a notebook") from None
        raise NotebookLoadError(f"{path} cannot be read: {exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotebookLoadError(f"{Path(path).name} is not a regular file, not a notebook")
        if info.st_nlink > 1:
            raise NotebookLoadError(f"{Path(path).name} is a link (a file with {info.st_nlink} names), not a notebook")
        data = _read_capped(fd, info.st_size, cap, Path(path).name)
    except TooLarge as exc:
        raise NotebookLoadError(str(exc)) from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise NotebookLoadError(f"{Path(path).name} is not UTF-8 text, not a notebook") from None
