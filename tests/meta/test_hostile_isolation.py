"""Nothing crosses from one contestant to the next (grading.contestant.isolation).

One student's notebook, graded exercise by exercise: each exercise's contestant is a
fork of the same zygote, under the same uid, in the same sandbox. The contestant of the
first exercise leaves everything it can where the next might look: a file in its work
folder, in ``$HOME`` and ``$TMPDIR``, in ``/tmp`` and ``/dev/shm``, a key in each
keyring, a System V message queue, a process that keeps running. The contestant of the
next exercise looks for each, and must find none.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from grading.judge import open_notebook
from grading.layout import EXERCISES

STEM = "01_kv_memory"

LEAVE_AND_LOOK = '''
def leave_behind():
    import ctypes, os, pathlib, subprocess
    libc = ctypes.CDLL(None, use_errno=True)
    done = {}
    for place in (".", os.environ.get("HOME", "."), os.environ.get("TMPDIR", "."), "/tmp", "/dev/shm"):
        try:
            pathlib.Path(place, "relay.txt").write_text("the reference of 1.2")
            done[place] = "written"
        except OSError as exc:
            done[place] = exc.strerror
    for ring in (-3, -4, -5):  # session, user and user-session keyrings
        done[f"key{ring}"] = libc.syscall(248, b"user", b"relay", b"the reference", 13, ctypes.c_int(ring))
    done["msgget"] = libc.msgget(0x5EED, 0o1666)
    subprocess.Popen(["sleep", "600"], start_new_session=True)
    return done


def look():
    import ctypes, os, pathlib
    libc = ctypes.CDLL(None, use_errno=True)
    found = [p for p in (".", os.environ.get("HOME", "."), os.environ.get("TMPDIR", "."), "/tmp", "/dev/shm")
             if pathlib.Path(p, "relay.txt").exists()]
    for ring in (-3, -4, -5):
        if libc.syscall(249, b"user", b"relay", None, ctypes.c_int(ring)) > 0:  # request_key
            found.append(f"key{ring}")
    if libc.msgget(0x5EED, 0o666) >= 0:
        found.append("message queue")
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if pathlib.Path("/proc", pid, "cmdline").read_bytes().startswith(b"sleep"):
                    found.append(f"process {pid}")
            except OSError:
                pass
    return found, os.getpid()
'''


def open_stub_with(stem: str, code: str, folder: Path):
    """Chapter ``stem``'s stub with a code cell ``code`` added, written to ``folder`` and
    opened as the judge holds a notebook (each exercise's calls go to a contestant)."""
    nb = nbformat.read(EXERCISES / f"{stem}.ipynb", as_version=4)
    cell = nbformat.v4.new_code_cell(code)
    cell.pop("id", None)  # the stubs are nbformat 4.4, whose cells carry no id
    nb.cells.append(cell)
    path = folder / f"{stem}.ipynb"
    nbformat.write(nb, path)
    return open_notebook(path, stem, trusted=True)


def open_relay(folder: Path):
    """The Chapter 1 stub with :data:`LEAVE_AND_LOOK` added, as the judge holds it."""
    return open_stub_with(STEM, LEAVE_AND_LOOK, folder)


def relay(notebook) -> tuple[dict, str, list[str], int]:
    """What 1.1's contestant left (and whether it could), why contestants are not isolated
    here ('' if they are), what 1.2's contestant found of it, and 1.2's pid as it sees it
    (also ``make bench``'s ``grade.cross_student_effects``)."""
    notebook.use("1.1")
    left = notebook.leave_behind()
    isolation = notebook.session.launch.isolation
    notebook.use("1.2")
    found, pid = notebook.look()
    return left, isolation, found, pid


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    proxy = open_relay(tmp_path_factory.mktemp("isolation"))
    yield proxy
    proxy.close()


def test_the_next_contestant_finds_nothing_the_last_one_left(notebook):
    left, isolation, found, pid = relay(notebook)
    if isolation:
        pytest.skip(f"this kernel does not give contestants namespaces of their own: {isolation}")
    assert left["."] == "written", left  # its own work folder is writable
    assert all(left[f"key{ring}"] < 0 for ring in (-3, -4, -5)), left  # no keyring at all
    assert found == [], f"the contestant of 1.2 found what 1.1's left: {found}"
    assert pid == 2  # under the init of a PID namespace of its own: what it leaves dies with it
