"""A class folder with hostile submissions among honest ones, graded in the sandbox.

Each hostile student hands in the Chapter 1 *stub* (nothing solved) with one attack in
its first code cell, so any point it earns is a point it did not earn. Two control
students hand in the solution. One batch run grades the whole class; the tests then
check that the gradebook is complete, the controls have full marks, every hostile
student has zero, the attacks that leave a trace got the right status, and nothing of
the instructor's changed: the graders, the references, the output folder, ``$HOME``.

Every attack that could hurt this machine if it ran unsandboxed (killing every process,
a fork bomb) is guarded inside the cell by ``os.getpid() < 10``: it acts only in a fresh
PID namespace. Without a working sandbox the whole module is skipped, with the reason.
"""

from __future__ import annotations

import csv
import hashlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pytest

from grading.layout import EXERCISES, ROOT, SOLUTIONS, TESTS
from grading.proc import sandbox

STEM = "01_kv_memory"
CONTROLS = ("control_a", "control_b")
TIMEOUT_S = 120
MEMORY_MB = 3000
pytestmark = [
    pytest.mark.timeout(1500),
    pytest.mark.skipif(not sandbox.status().sandboxed,
                       reason=f"needs the grading sandbox here: {sandbox.status().line}"),
]
# In a PID namespace of its own the grading child is pid 2 or 3; outside one it never is.
IN_SANDBOX = "import os\nif os.getpid() < 10:\n"


def _indent(code: str) -> str:
    return "".join("    " + line + "\n" for line in code.strip().splitlines())


def attacks(out: Path, home: Path, port: int, canary: Path) -> dict[str, str]:
    """Student name -> the cell it adds. Paths are literal: a real attacker would guess them."""
    solution = SOLUTIONS / f"{STEM}.ipynb"
    grader = TESTS / f"test_{STEM}.py"
    return {
        "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "kill_group": "import os, signal\nos.killpg(0, signal.SIGKILL)",
        "kill_everything": IN_SANDBOX + _indent("import signal\nos.kill(-1, signal.SIGKILL)"),
        "fork_bomb": IN_SANDBOX + _indent("while True:\n    os.fork()"),
        "daemon": IN_SANDBOX + _indent(
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        os.execvp('sleep', ['sleep', '4242'])\n    os._exit(0)"),
        "write_via_subprocess": "import subprocess\nsubprocess.run(['sh', '-c', "
                                f"'echo forged >> {out}/gradebook.csv; echo x >> {grader}; echo x > {home}/pwned; "
                                f"echo x > {canary}'])",
        "read_solutions_via_subprocess": (
            "import json, subprocess\n"
            f"_nb = json.loads(subprocess.run(['cat', '{solution}'], capture_output=True, text=True).stdout)\n"
            "for _c in _nb['cells']:\n"
            "    if _c['cell_type'] == 'code':\n"
            "        exec(''.join(_c['source']), globals())"),
        "network": "import socket\n"
                   f"socket.create_connection(('127.0.0.1', {port}), timeout=5).sendall(b'pwned')",
        "ctypes_patch": "import ctypes, grading.compare\n"
                        "ctypes.pythonapi.PyObject_SetAttr(ctypes.py_object(grading.compare), "
                        "ctypes.py_object('assert_close'), ctypes.py_object(lambda *a, **k: None))",
        "output_flood": "import os\nfor _ in range(200):\n    os.write(1, b'x' * 1_000_000)",
        "huge_file": "with open('huge.bin', 'wb') as f:\n    for _ in range(1024):\n        f.write(b'0' * 2**20)",
        "forge_results": "import os, json\nfor fd in range(3, 30):\n    try:\n"
                         "        os.write(fd, (json.dumps({'kind': 'test', 'nodeid': 'x', 'outcome': 'passed'}) "
                         "+ '\\n').encode())\n    except OSError:\n        pass",
    }


def _stub_with(cell: str):
    nb = nbformat.read(EXERCISES / f"{STEM}.ipynb", as_version=4)
    nb.cells.insert(2, nbformat.v4.new_code_cell(cell))
    return nb


def _digest(folders: list[Path]) -> dict[str, str]:
    out = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


class Listener:
    """A TCP listener on loopback that records whether anything connected."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                self.received.append(conn.recv(100) or b"(connected)")

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        self.sock.close()


def build_class(base: Path) -> dict:
    """The class folder: the controls' solutions and one stub with one attack per student.
    Returns what grading it needs: the folders, the listener, the names."""
    subs, out, home = base / "submissions", base / "grades", base / "home"
    home.mkdir(parents=True)
    listener = Listener()
    for name in CONTROLS:
        (subs / name).mkdir(parents=True)
        (subs / name / f"{STEM}.ipynb").write_bytes((SOLUTIONS / f"{STEM}.ipynb").read_bytes())
    cells = attacks(out, home, listener.port, base / "canary")
    for name, cell in cells.items():
        (subs / name).mkdir(parents=True)
        (subs / name / f"{STEM}.ipynb").write_text(nbformat.writes(_stub_with(cell)))
    return {"subs": subs, "out": out, "home": home, "canary": base / "canary", "listener": listener,
            "names": list(cells)}


def grade_class(made: dict) -> dict:
    """Grade the class with the real command, as an instructor would; what came out."""
    watched = [ROOT / "grading", TESTS, SOLUTIONS]
    before = _digest(watched)
    env = {**os.environ, "HOME": str(made["home"])}
    try:
        proc = subprocess.run([sys.executable, "-m", "grading.batch", str(made["subs"]), "--out", str(made["out"]),
                               "--chapters", "1", "--workers", "2", "--timeout", str(TIMEOUT_S),
                               "--memory-mb", str(MEMORY_MB), "--quiet"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=1400)
        leftover = subprocess.run(["pgrep", "-f", "sleep 4242"], capture_output=True, text=True).stdout.split()
    finally:
        made["listener"].close()
    with open(made["out"] / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {**made, "proc": proc, "rows": rows, "before": before, "after": _digest(watched),
            "received": made["listener"].received, "leftover": leftover}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_class(build_class(tmp_path_factory.mktemp("hostile")))


def _rows(graded, student: str) -> list[dict]:
    return [r for r in graded["rows"] if r["student"] == student and r["exercise"]]


def test_the_batch_finishes_and_writes_everything(graded):
    proc = graded["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("gradebook.csv", "needs_review.md"):
        assert (graded["out"] / name).is_file()
    for student in (*CONTROLS, *graded["names"]):
        assert (graded["out"] / "feedback" / f"{student}.md").is_file(), student


def test_no_row_is_lost(graded):
    expected = {r["exercise"] for r in _rows(graded, CONTROLS[0])}
    assert len(expected) >= 6
    for student in (*CONTROLS, *graded["names"]):
        got = [r["exercise"] for r in _rows(graded, student)]
        assert sorted(got) == sorted(expected), f"{student}: rows {got}"


def test_controls_get_full_marks(graded):
    for student in CONTROLS:
        rows = _rows(graded, student)
        assert all(r["status"] == "passed" for r in rows), rows
        assert sum(float(r["points"]) for r in rows) == sum(float(r["max_points"]) for r in rows)


@pytest.mark.parametrize("student", ["kill_parent", "kill_group", "kill_everything", "fork_bomb", "daemon",
                                     "write_via_subprocess", "read_solutions_via_subprocess", "network",
                                     "ctypes_patch", "output_flood", "huge_file", "forge_results"])
def test_hostile_students_earn_nothing(graded, student):
    rows = _rows(graded, student)
    assert rows and all(float(r["points"]) == 0 for r in rows), rows


@pytest.mark.parametrize("student, statuses", [
    ("kill_group", {"crashed"}),
    # The judge runs no notebook code: a patch of grading.compare and forged lines on
    # every descriptor reach only the contestant, whose stubs are then graded as stubs.
    ("ctypes_patch", {"not attempted"}),
    ("forge_results", {"not attempted", "tampered"}),
])
def test_attacks_that_leave_a_trace_get_their_status(graded, student, statuses):
    got = {r["status"] for r in _rows(graded, student)}
    assert got <= statuses, f"{student}: {got}"


def test_instructor_files_are_unchanged(graded):
    changed = [p for p in graded["before"] if graded["after"].get(p) != graded["before"][p]]
    assert not changed, changed
    assert not (graded["home"] / "pwned").exists()
    assert not graded["canary"].exists()
    # The attack appends a line "forged" (a note may quote the cell's source; that is fine).
    lines = (graded["out"] / "gradebook.csv").read_text().splitlines()
    assert "forged" not in lines


def test_nothing_outlives_its_sandbox_and_nothing_leaves_it(graded):
    assert graded["leftover"] == [], "a daemon started by a notebook is still running"
    assert graded["received"] == [], "a notebook reached a socket on this machine"


def test_the_review_list_names_the_sandbox(graded):
    assert "sandbox: bwrap" in (graded["out"] / "needs_review.md").read_text()
