"""Submissions that try to earn points from inside the grader, graded as a class would be.

``test_hostile_submissions.py`` attacks the machine; these attack the points. Each hostile
student hands in the Chapter 1 stub with one cell appended that replaces every exercise
function by one that lies, or that reaches for what the grader keeps: its result writer,
its result channel, the hidden tests in memory or on disk. Others hand in a link instead
of a notebook, or a message far too large. The judge never runs a notebook's code and
rebuilds what comes back as plain values, so every one of them must earn 0, while the
two controls (the solution) earn full marks, the hidden test included, and no text of the
hidden test appears in any file the batch writes.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grading.layout import EXERCISES, ROOT, SOLUTIONS
from grading.proc import sandbox

STEM = "01_kv_memory"
CONTROLS = ("control_a", "control_b")
CANARY = "HIDDEN-CANARY-4b1d"  # in the hidden test's docstrings: no file the batch writes may show it
pytestmark = [
    pytest.mark.timeout(1500),
    pytest.mark.skipif(not sandbox.status().sandboxed,
                       reason=f"needs the grading sandbox here: {sandbox.status().line}"),
]

# Every function of the notebook (the exercises' stubs among them) replaced by one that
# returns ``value``: what a submission that "answers" without computing hands in.
REPLACE_ALL = """
import types as _types
for _name, _value in list(globals().items()):
    if isinstance(_value, _types.FunctionType) and _value.__module__ == __name__ and not _name.startswith('_'):
        globals()[_name] = (lambda _v: (lambda *a, **k: _v))({value})
"""

LIARS = {
    "lying_int": "class Liar(int):\n    def __eq__(self, other): return True\n    __hash__ = int.__hash__\n"
                 + REPLACE_ALL.format(value="Liar(0)"),
    "lying_float": "class Liar(float):\n    def __eq__(self, other): return True\n"
                   "    def __lt__(self, o): return False\n"
                   "    def __gt__(self, o): return False\n    def __le__(self, o): return True\n"
                   "    def __ge__(self, o): return True\n    __hash__ = float.__hash__\n"
                   + REPLACE_ALL.format(value="Liar(0.0)"),
    "lying_object": "class Liar:\n    def __eq__(self, other): return True\n    def __bool__(self): return True\n"
                    "    def __index__(self): return 0\n    def __int__(self): return 0\n"
                    "    def __array__(self, *a, **k):\n        import numpy\n        return numpy.zeros(1)\n"
                    + REPLACE_ALL.format(value="Liar()"),
    "lying_tensor": "import torch\nclass Liar(torch.Tensor):\n    @classmethod\n"
                    "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                    "        others = [a for a in args if isinstance(a, torch.Tensor) and not isinstance(a, cls)]\n"
                    "        return others[0] if others else torch.tensor(True)\n"
                    + REPLACE_ALL.format(value="torch.zeros(1).as_subclass(Liar)"),
    # The judge's own result writer, patched where the notebook can reach it.
    "patch_collector": "import sys, importlib\ntry:\n    _c = importlib.import_module('grading.judge.main')\n"
                       "    _c.Collector.emit = lambda self, obj: None\nexcept Exception:\n    pass\n"
                       "for _m in list(sys.modules.values()):\n    _cls = getattr(_m, 'Collector', None)\n"
                       "    if isinstance(_cls, type):\n        _cls.emit = lambda self, obj: None\n",
    # Forged frames on every descriptor: the contestant's own channel among them.
    "forge_channel": "import os, json, struct\n_h = json.dumps({'value': 128, 'mutated': []}).encode()\n"
                     "for _fd in range(0, 64):\n    try:\n        os.write(_fd, struct.pack('>IQ', len(_h), 0) + _h)\n"
                     "    except OSError:\n        pass\n" + REPLACE_ALL.format(value="128"),
    # Everything the process can reach, searched for the hidden test, and raised as a message.
    "hidden_from_memory": "import gc, sys\n_found = []\nfor _o in gc.get_objects():\n    try:\n"
                          "        _d = getattr(_o, '__doc__', None)\n"
                          "        if isinstance(_d, str) and 'CANARY' in _d:\n"
                          "            _found.append(_d)\n    except Exception:\n        pass\n"
                          "for _m in list(sys.modules.values()):\n    _d = getattr(_m, '__doc__', None)\n"
                          "    if isinstance(_d, str) and 'CANARY' in _d:\n        _found.append(_d)\n"
                          "def _leak(*a, **k):\n"
                          "    raise ValueError('found: ' + ' | '.join(_found) if _found else 'nothing')\n"
                          + REPLACE_ALL.format(value="0").replace("(lambda _v: (lambda *a, **k: _v))(0)", "_leak"),
    "huge_message": "def _huge(*a, **k):\n    raise ValueError('x' * 30_000_000)\n"
                    + REPLACE_ALL.format(value="0").replace("(lambda _v: (lambda *a, **k: _v))(0)", "_huge"),
}


def hidden_test(folder: Path) -> Path:
    """A hidden test for Chapter 1 whose every text carries the canary."""
    folder.mkdir()
    path = folder / "test_01_hidden.py"
    path.write_text(f'''"""{CANARY}: a hidden test."""
import pytest

from grading.compare import assert_equal


@pytest.mark.ex1_1
def test_bytes_per_token_held_out(nb):
    """{CANARY}"""
    assert_equal(nb.kv_bytes_per_token(32, 8, 128, "fp16"), 131072, "kv_bytes_per_token(32, 8, 128)")
''')
    return folder


def _stub_with(cell: str) -> str:
    nb = nbformat.read(EXERCISES / f"{STEM}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(cell))
    return nbformat.writes(nb)


def build_class(base: Path) -> dict:
    subs = base / "submissions"
    for name in CONTROLS:
        (subs / name).mkdir(parents=True)
        (subs / name / f"{STEM}.ipynb").write_bytes((SOLUTIONS / f"{STEM}.ipynb").read_bytes())
    hidden = hidden_test(base / "hidden")
    # The hidden test read from disk, where the instructor keeps it (a real attacker would guess).
    from_disk = (f"_found = []\nfor _p in [{str(hidden / 'test_01_hidden.py')!r}]:\n    try:\n"
                 "        _found.append(open(_p).read())\n    except OSError:\n        pass\n"
                 "def _leak(*a, **k):\n    raise ValueError('found: ' + ' | '.join(_found) if _found else 'nothing')\n"
                 + REPLACE_ALL.format(value="0").replace("(lambda _v: (lambda *a, **k: _v))(0)", "_leak"))
    for name, cell in {**LIARS, "hidden_from_disk": from_disk}.items():
        (subs / name).mkdir(parents=True)
        (subs / name / f"{STEM}.ipynb").write_text(_stub_with(cell))
    # A link to the instructor's solution, as a student's git repository can hold one.
    (subs / "symlink").mkdir()
    (subs / "symlink" / f"{STEM}.ipynb").symlink_to(SOLUTIONS / f"{STEM}.ipynb")
    # The same link inside a zip (Unix mode bits of a symbolic link in external_attr).
    with zipfile.ZipFile(subs / "zip_link.zip", "w") as zf:
        info = zipfile.ZipInfo(f"{STEM}.ipynb")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, str(SOLUTIONS / f"{STEM}.ipynb"))
    return {"subs": subs, "out": base / "grades", "hidden": hidden,
            "names": [*LIARS, "hidden_from_disk", "symlink", "zip_link"]}


def grade_class(made: dict) -> dict:
    """Grade the class with the real command, its hidden test included; what came out."""
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(made["subs"]), "--out", str(made["out"]),
                           "--chapters", "1", "--workers", "2", "--timeout", "120", "--memory-mb", "3000",
                           "--extra-tests", str(made["hidden"]), "--quiet"],
                          cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=1400)
    with open(made["out"] / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {**made, "proc": proc, "rows": rows}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_class(build_class(tmp_path_factory.mktemp("values")))


def _rows(graded, student: str) -> list[dict]:
    return [r for r in graded["rows"] if r["student"] == student and r["exercise"]]


def test_the_batch_finishes(graded):
    assert graded["proc"].returncode == 0, graded["proc"].stderr[-3000:]


def test_controls_get_full_marks_with_the_hidden_test(graded):
    for student in CONTROLS:
        rows = _rows(graded, student)
        assert rows and all(r["status"] == "passed" for r in rows), rows
        assert sum(float(r["points"]) for r in rows) == sum(float(r["max_points"]) for r in rows)


@pytest.mark.parametrize("student", [*LIARS, "hidden_from_disk", "symlink", "zip_link"])
def test_a_wrong_answer_earns_nothing(graded, student):
    rows = [r for r in graded["rows"] if r["student"] == student]
    assert rows, f"{student} has no row"
    assert sum(float(r["points"] or 0) for r in rows) == 0, [r for r in rows if float(r["points"] or 0)]


def test_a_huge_message_is_cut_not_timed_out(graded):
    statuses = {r["status"] for r in _rows(graded, "huge_message")}
    assert "timed out" not in statuses, statuses


def test_links_are_listed_for_review(graded):
    review = (graded["out"] / "needs_review.md").read_text()
    assert "is a link, not a notebook" in review


def test_no_output_holds_the_hidden_test(graded):
    for path in graded["out"].rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text(errors="replace"), f"{path.name} shows the hidden test"
