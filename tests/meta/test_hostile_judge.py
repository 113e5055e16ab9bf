"""Submissions that attack the judge itself, graded as a class would be, hidden tests included.

``test_hostile_values.py`` attacks the points with values that lie; these attack what the
judge keeps private and what it can hold:

- ``detector`` behaves exactly like the solution unless it can tell that a hidden test is
  calling it (its file name, ``__file__``, its cells' file names in ``linecache``, the
  spawn message's fields, ``argv``, the environment, the working folder, the modules
  loaded), and then ends its process. The hidden test's notebook is the chapter's own, in
  a contestant spawned as a public test's, so it must score full marks.
- ``crash_on_hidden_input`` crashes on an input only the hidden test uses: its row says
  so to the instructor, and its feedback names no hidden test and counts none.
- ``alias_forged`` writes its own answer on its channel: one 8 MiB buffer named by 450
  tensors (3.6 GiB if each were copied out). The judge refuses it (tampered) and stays far
  below its own memory limit.
- ``alias_views`` returns 450 views of one 8 MiB tensor, as a notebook may: the encoder
  copies each view, and refuses the value once it passes the message cap.

One batch run (``python -m grading.batch``, through a driver that records each judge's
peak RSS), then checks on what it wrote.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import nbformat
import pytest

from grading.layout import ROOT, SOLUTIONS
from grading.outcome import Status
from grading.proc import judges as runner
from grading.proc import sandbox

STEM = "01_kv_memory"
MEMORY_MB = 3000
CANARY = "secret_canary"  # in every hidden test's name: no feedback file may show it
pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not sandbox.status().sandboxed,
                       reason=f"needs the grading sandbox here: {sandbox.status().line}"),
]

HIDDEN_TEST = f'''
import pytest

from grading.compare import assert_equal


@pytest.mark.ex1_1
def test_{CANARY}_bytes_per_token(nb):
    assert_equal(nb.kv_bytes_per_token(7, 3, 5, "fp16"), 420, "kv_bytes_per_token(7, 3, 5, 'fp16')")


@pytest.mark.ex1_2
def test_{CANARY}_cache_bytes(nb):
    assert_equal(nb.kv_cache_bytes(2, 2, 4, 10, 3, "fp16"), 1920, "kv_cache_bytes(2, 2, 4, 10, 3, 'fp16')")
'''

# Every exercise function wrapped: fn(*a, **k) as `wrap` says.
WRAP_ALL = """
import functools as _ft, types as _types
for _name, _value in list(globals().items()):
    if isinstance(_value, _types.FunctionType) and _value.__module__ == __name__ and not _name.startswith('_'):
        globals()[_name] = _ft.wraps(_value)((lambda _f: (lambda *a, **k: _wrap(_f, a, k)))(_value))
"""

ATTACKS = {
    # Every signal this process can read, taken once at load (each contestant loads anew).
    "detector": """
import os as _os, sys as _sys, gc as _gc, linecache as _lc
_NAME, _STEM = "01_kv_memory.ipynb", "01_kv_memory"
def _signals():
    seen = []
    for what, text in [("__file__", str(globals().get("__file__", ""))), ("co_filename", _signals.__code__.co_filename)]:
        if _NAME not in text or "hidden" in text.lower():
            seen.append(what)
    if any("hidden" in str(k).lower() for k in _lc.cache):
        seen.append("linecache")
    for o in _gc.get_objects():
        if type(o).__name__ == "Spawn":
            if o.name != _NAME or o.stem != _STEM or (o.exercise and o.references is None):
                seen.append("spawn")
    checks = [("argv", list(_sys.argv)), ("env", list(_os.environ.values())), ("cwd", [_os.getcwd()]),
              ("modules", list(_sys.modules))]
    seen += [what for what, texts in checks if any("hidden" in str(t).lower() for t in texts)]
    return seen
_SEEN = _signals()
def _wrap(f, a, k):
    if _SEEN:
        _os._exit(7)
    return f(*a, **k)
""" + WRAP_ALL,  # noqa: E501
    "crash_on_hidden_input": """
import os as _os
def _wrap(f, a, k):
    if a[:3] in ((7, 3, 5), (2, 2, 4)):
        _os._exit(9)
    return f(*a, **k)
""" + WRAP_ALL,
    # The answer forged on the contestant's own socket, before the honest one.
    "alias_forged": """
import gc as _gc
def _wrap(f, a, k):
    if f.__name__ == "kv_bytes_per_token":
        from grading import wire as _w
        for _o in _gc.get_objects():
            if type(_o).__name__ == "Contestant":
                _n = 8 * 2**20
                _node = {"t": "tensor", "dtype": "uint8", "shape": [_n], "device": "cpu", "buf": [0, _n]}
                _w.send(_o.sock, {"value": {"t": "list", "v": [_node] * 450}, "mutated": []}, [bytes(_n)])
                break
    return f(*a, **k)
""" + WRAP_ALL,
    "alias_views": """
import torch as _t
_big = _t.zeros(8 * 2**20, dtype=_t.uint8)
def _wrap(f, a, k):
    if f.__name__ == "kv_cache_bytes":
        return [_big.view(-1) for _ in range(450)]
    return f(*a, **k)
""" + WRAP_ALL,
}
STUDENTS = ("control", *ATTACKS)

# grading.batch's command, with every judge's peak RSS recorded (ChildResult.peak_rss_mb).
DRIVER = """
import json, sys
from pathlib import Path
import grading.batch as batch
import grading.classroom.grade as grade
record = {}
run = grade.run_child
def observed(spec, **kw):
    result = run(spec, **kw)
    if not spec.get("collect_only"):
        student = Path(spec["notebook_files"][spec["chapter"] + ".ipynb"]).parent.name
        record[student] = {"peak_rss_mb": result.peak_rss_mb, "memory_mb": kw["memory_mb"],
                           "finished": result.finished}
    return result
grade.run_child = observed
code = batch.main(sys.argv[2:])
Path(sys.argv[1]).write_text(json.dumps(record))
sys.exit(code)
"""


def _solution_with(cell: str) -> str:
    nb = nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(cell))
    if nb.nbformat_minor < 5:
        nb.cells[-1].pop("id", None)
    return nbformat.writes(nb)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("judge")
    subs, hidden, out = base / "submissions", base / "hidden", base / "grades"
    for name in STUDENTS:
        (subs / name).mkdir(parents=True)
        text = _solution_with(ATTACKS[name]) if name in ATTACKS else (SOLUTIONS / f"{STEM}.ipynb").read_text()
        (subs / name / f"{STEM}.ipynb").write_text(text)
    hidden.mkdir()
    (hidden / "test_01_hidden.py").write_text(HIDDEN_TEST)
    peaks = base / "peaks.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(peaks), str(subs), "--out", str(out), "--chapters", "1",
                           "--workers", "2", "--timeout", "240", "--memory-mb", str(MEMORY_MB),
                           "--extra-tests", str(hidden), "--quiet"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=850)
    rows = []
    if (out / "gradebook.csv").exists():
        with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    return {"proc": proc, "rows": rows, "out": out,
            "peaks": json.loads(peaks.read_text()) if peaks.exists() else {}}


def _rows(graded, student: str) -> dict[str, dict]:
    return {r["exercise"]: r for r in graded["rows"] if r["student"] == student and r["exercise"]}


def test_the_batch_finishes_with_every_row(graded):
    assert graded["proc"].returncode == 0, graded["proc"].stderr[-3000:]
    labels = set(_rows(graded, "control"))
    assert {"1.1 hidden", "1.2 hidden"} <= labels
    for student in STUDENTS:
        assert set(_rows(graded, student)) == labels, student


def test_the_control_and_the_detector_get_full_marks(graded):
    """Nothing the detector reads differs in a hidden test's contestant."""
    for student in ("control", "detector"):
        rows = _rows(graded, student)
        assert all(r["status"] == "passed" for r in rows.values()), {k: (r["status"], r["message"])
                                                                     for k, r in rows.items()}


def test_a_crash_in_a_hidden_test_is_the_instructors_to_read(graded):
    rows = _rows(graded, "crash_on_hidden_input")
    assert rows["1.1 hidden"]["status"] == "crashed" and CANARY in rows["1.1 hidden"]["message"]
    assert all(r["status"] == "passed" for k, r in rows.items() if not k.endswith("hidden"))


def test_no_feedback_names_or_counts_a_hidden_test(graded):
    files = list((graded["out"] / "feedback").glob("*.md"))
    assert len(files) == len(STUDENTS)
    for path in files:
        text = path.read_text()
        assert CANARY not in text and "hidden/" not in text and "failed hidden tests" not in text, path.name
        for line in text.splitlines():
            if "further tests" in line:  # a hidden row: its points and status only
                assert line.endswith(tuple(s.value for s in Status) + ("some of these tests did not pass",)), line
    crashed = (graded["out"] / "feedback" / "crash_on_hidden_input.md").read_text()
    assert "What happened" not in crashed


def test_an_aliased_answer_is_refused_and_the_judge_stays_small(graded):
    rows = _rows(graded, "alias_forged")
    assert rows["1.1"]["status"] == "tampered" and "overlap" in rows["1.1"]["message"], rows["1.1"]
    # A hidden test's call into another exercise is in no record of the solution's calls, so
    # the notebook's own kv_bytes_per_token runs inside 1.2's hidden test, and forges again.
    assert rows["1.2 hidden"]["status"] == "tampered", rows["1.2 hidden"]
    others = {k: (r["status"], r["message"]) for k, r in rows.items() if k not in ("1.1", "1.1 hidden", "1.2 hidden")}
    assert all(status == "passed" for status, _ in others.values()), others
    peak = graded["peaks"]["alias_forged"]
    assert peak["finished"] and peak["memory_mb"] == MEMORY_MB
    # Its judge's own limit is --memory-mb + runner.JUDGE_OWN_MB; 3.6 GiB of copies never happened.
    assert peak["peak_rss_mb"] < min(runner.judge_memory_mb(MEMORY_MB), 1200), peak


def test_views_of_one_tensor_are_refused_at_the_cap(graded):
    rows = _rows(graded, "alias_views")
    assert rows["1.2"]["status"] != "passed" and "MiB of tensors" in rows["1.2"]["message"], rows["1.2"]
    assert graded["peaks"]["alias_views"]["peak_rss_mb"] < runner.judge_memory_mb(MEMORY_MB)
