"""The judge's bounds: what one answer may cost it, and what a hidden test gives away.

- The wire decoder names each byte of a message once: tensors whose ranges overlap,
  lie outside the message or total more than it are refused (one 8 MiB buffer named by
  450 tensors would be 3.6 GiB in the judge), before anything is copied.
- The judge runs under a memory limit of its own (``grading.proc.judges.judge_memory_mb``).
- A hidden test's notebook is the chapter's, spawned exactly as a public test's.
- Feedback never shows a hidden test's name, message or count.

The batch-level attacks are in ``test_hostile_judge.py``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import nbformat
import pytest
import torch

from grading import gradescope, wire
from grading.classroom import gradebook as gb
from grading.classroom.rows import CRASHED, ERROR, FAILED, MEMORY, PASSED, REVIEW, TAMPERED, TIMED_OUT, Row
from grading.layout import ROOT, SOLUTIONS

STEM = "01_kv_memory"
MiB = 2**20


def _tensor(n: int, start: int, length: int, **extra) -> dict:
    return {"t": "tensor", "dtype": "uint8", "shape": [n], "device": "cpu", "buf": [start, length], **extra}


# -- the decoder --------------------------------------------------------------------------------
def test_an_honest_message_decodes_as_before():
    t = torch.arange(24.0).reshape(4, 6)
    values = [t, t.t(), t[:, ::2], t[None].expand(3, 4, 6), torch.zeros(0), torch.zeros(0), {"k": (1, 2.5)}]
    encoder = wire.Encoder()
    node = encoder.encode(values)
    out = wire.Decoder(b"".join(encoder.buffers)).decode(node)
    for a, b in zip(values[:6], out[:6]):
        assert torch.equal(a, b) and a.stride() == b.stride()
    assert out[6] == {"k": (1, 2.5)}


def test_a_long_strided_dimension_of_size_one_crosses():
    """x.nonzero()[0] counts as contiguous with a stride of 2: it still crosses, values and all."""
    values = [torch.tensor([0, 3, 0, 5]).nonzero()[0], torch.arange(6.0).reshape(3, 2)[1:2, 1], torch.tensor(7)]
    encoder = wire.Encoder()
    node = encoder.encode(values)
    out = wire.Decoder(b"".join(encoder.buffers)).decode(node)
    for a, b in zip(values, out):
        assert torch.equal(a, b) and a.shape == b.shape and a.dtype == b.dtype


def test_a_buffer_named_by_many_tensors_is_refused():
    """The amplification: one 8 MiB buffer, 450 tensors (3.6 GiB once copied out)."""
    size = 8 * MiB
    node = {"t": "list", "v": [_tensor(size, 0, size)] * 450}
    decoder = wire.Decoder(bytes(size))
    with pytest.raises(wire.WireError, match="overlap"):
        decoder.decode(node)
    assert decoder.named == size  # the first one only: the second was refused before its copy


@pytest.mark.parametrize("ranges", [[(0, 8), (4, 8)], [(4, 8), (0, 8)], [(0, 16), (4, 4)], [(4, 4), (0, 16)],
                                    [(0, 4), (8, 4), (2, 8)]])
def test_overlapping_ranges_are_refused_in_any_order(ranges):
    node = {"t": "list", "v": [_tensor(n, start, n) for start, n in ranges]}
    with pytest.raises(wire.WireError, match="overlap"):
        wire.Decoder(bytes(16)).decode(node)


def test_adjacent_and_empty_ranges_are_fine():
    node = {"t": "list", "v": [_tensor(4, 0, 4), _tensor(4, 4, 4), _tensor(0, 4, 0), _tensor(0, 4, 0)]}
    out = wire.Decoder(bytes(range(8))).decode(node)
    assert [t.tolist() for t in out] == [[0, 1, 2, 3], [4, 5, 6, 7], [], []]


@pytest.mark.parametrize("buf", [[0, 17], [16, 1], [2**62, 2**62], [-1, 4], [0, -1], [1.0, 4], [0], "0,4"])
def test_a_range_outside_the_message_is_refused(buf):
    with pytest.raises(wire.WireError, match="outside|not a range"):
        wire.Decoder(bytes(16)).decode({"t": "tensor", "dtype": "uint8", "shape": [4], "device": "cpu", "buf": buf})


def test_the_value_and_the_changed_arguments_share_one_decoder():
    """A call's answer is decoded by one decoder (grading.judge): a range named by the
    value may not be named again by a changed argument."""
    decoder = wire.Decoder(bytes(16))
    decoder.decode(_tensor(16, 0, 16))
    with pytest.raises(wire.WireError, match="overlap"):
        decoder.decode(_tensor(16, 0, 16))


def test_arrays_and_numpy_scalars_are_counted_too():
    node = {"t": "list", "v": [{"t": "ndarray", "dtype": "<f4", "shape": [4], "buf": [0, 16]},
                               {"t": "npscalar", "dtype": "<f4", "buf": [12, 4]}]}
    with pytest.raises(wire.WireError, match="overlap"):
        wire.Decoder(bytes(16)).decode(node)


def test_more_than_the_message_in_total_is_refused():
    """Disjoint ranges inside the message never total more than it; a stride of 0 that
    spans more than LOGICAL_CAP once built is refused as well."""
    node = _tensor(1, 0, 1, stride=[0])
    node["shape"] = [wire.LOGICAL_CAP + 1]
    with pytest.raises(wire.WireError, match="span more than"):
        wire.Decoder(bytes(1)).decode(node)


def test_the_encoder_refuses_a_value_over_the_cap(monkeypatch):
    monkeypatch.setattr(wire.values, "BUFFERS_CAP", 1000)  # where the encoder reads it
    with pytest.raises(wire.WireError, match="over the cap"):
        wire.Encoder().encode([torch.zeros(200), torch.zeros(200)])


def test_a_large_message_is_read_whole(tmp_path):
    import socket
    import threading

    a, b = socket.socketpair()
    data = bytes(range(256)) * 40_000
    sender = threading.Thread(target=wire.send, args=(a, {"value": 1}, [data[:5], data[5:]]))
    sender.start()
    header, buffers = wire.receive(b)
    sender.join()
    assert header == {"value": 1} and bytes(buffers) == data


# -- feedback -------------------------------------------------------------------------------
def _rows(status: str) -> list[Row]:
    names = "test_secret_negative_heads, test_secret_fp8"
    return [Row("s", STEM, "1.1", 3, 3, PASSED, ""),
            Row("s", STEM, "1.1 hidden", 0, 2, status, f"failed hidden tests: {names}"),
            Row("s", STEM, "1.2 hidden", 0, 1, status,
                f"cell 3 ran out of memory (limit 3000 MB); failed hidden tests: {names}")]


@pytest.mark.parametrize("status", [FAILED, ERROR, CRASHED, TIMED_OUT, TAMPERED, MEMORY, REVIEW])
def test_feedback_of_a_student_who_fails_only_hidden_tests_names_none(status):
    for text in (gb.feedback_markdown("s", _rows(status)),
                 json.dumps(gradescope.results_from_rows(_rows(status), 1.0))):
        assert "secret" not in text and "failed hidden tests" not in text, text
        assert "2 more" not in text and "1 more" not in text


def test_a_hidden_node_id_in_a_chapter_wide_message_is_not_shown():
    rows = [Row("s", STEM, "1.1", 0, 3, TAMPERED,
                "a test was reported twice (hidden/test_01_x.py::test_secret[2-3]): the grading process was forked"),
            Row("s", STEM, "1.1 hidden", 0, 2, TAMPERED, "a test was reported twice (hidden/test_01_x.py::"
                                                         "test_secret[2-3])")]
    text = gb.feedback_markdown("s", rows)
    assert "secret" not in text and "test_01_x" not in text, text
    assert "a hidden test" in text


# -- the hidden test's contestant -----------------------------------------------------------------
PROBE = '''
import os as _os, sys as _sys, linecache as _lc, inspect as _inspect, json as _json
def probe():
    """What this contestant can see of how it was started."""
    import gc
    spawns = [o for o in gc.get_objects() if type(o).__name__ == "Spawn"]
    spawn = spawns[0] if spawns else None
    fields = {k: v for k, v in vars(spawn).items() if k != "notebook"} if spawn is not None else None
    env = dict(_os.environ)
    return _json.dumps({"file": globals().get("__file__"), "name": __name__, "argv": list(_sys.argv),
                        "cwd": _os.getcwd(), "env": env, "code": probe.__code__.co_filename,
                        "cells": sorted(k for k in _lc.cache if "cell" in k),
                        "spawn": fields, "modules": sorted(m for m in _sys.modules if "hidden" in m)},
                       sort_keys=True, default=str)
'''

GRADER = '''
import json, pytest

@pytest.mark.ex1_1
def test_probe_{side}(nb):
    with open({out!r}, "w") as f:
        f.write(nb.probe())
'''
ANOTHER_EXERCISE = '''

@pytest.mark.ex1_2
def test_another_exercise(nb):
    assert nb.kv_cache_bytes(1, 1, 1, 1, 1, "fp16") == 4
'''


def test_a_hidden_tests_contestant_is_spawned_as_a_public_ones(tmp_path, monkeypatch):
    """A public and a hidden grader of Chapter 1, one judge (grading.judge.main by way of
    grading.proc.judges), each asking the notebook what it sees of how it was started: the
    two answers are the same, field by field. A test of another exercise runs between
    them, so the hidden test's contestant is a fresh one, not the public test's."""
    from grading.layout import ROOT
    from grading.proc import judges as runner

    # The real graders sit in tests/, from which pytest puts the repository on the judge's
    # path; these stand elsewhere, so the judge is told where `tests.references` is.
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    if nb.nbformat_minor < 5:
        nb.cells[-1].pop("id", None)
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / f"{STEM}.ipynb").write_text(nbformat.writes(nb))
    public, hidden = tmp_path / "public", tmp_path / "hidden"
    public.mkdir()
    hidden.mkdir()
    # The public grader stands where tests/test_01_kv_memory.py would; a hidden one is
    # named as instructors name theirs.
    (public / f"test_{STEM}.py").write_text(GRADER.format(side="public", out=str(tmp_path / "public.json"))
                                            + ANOTHER_EXERCISE)
    (hidden / "test_01_held_out.py").write_text(GRADER.format(side="hidden", out=str(tmp_path / "hidden.json")))
    spec = {"chapter": STEM, "test_files": [str(public / f"test_{STEM}.py")],
            "hidden_files": [str(hidden / "test_01_held_out.py")],
            "notebook_files": {f"{STEM}.ipynb": str(notebooks / f"{STEM}.ipynb")}}
    result = runner.run_child(spec, timeout=240, memory_mb=3000, hide=[hidden])
    tests = {line["nodeid"]: line for line in result.of("test")}
    assert len(tests) == 3 and all(t["outcome"] == "passed" for t in tests.values()), (tests, result.output[-3000:])
    seen = [json.loads((tmp_path / f"{side}.json").read_text()) for side in ("public", "hidden")]
    assert seen[0] == seen[1]
    assert seen[0]["spawn"]["name"] == f"{STEM}.ipynb" and seen[0]["spawn"]["stem"] == STEM
    # The other exercises swapped, as for a public test.
    assert seen[0]["spawn"]["references"] is not None, seen[0]["spawn"]


# -- the judge's own memory limit ------------------------------------------------------------------
def test_the_judge_runs_under_its_own_memory_limit():
    from grading.proc import judges as runner

    assert runner.judge_memory_mb(0) == 0  # no limit asked (the plan's collection)
    assert runner.judge_memory_mb(3000) == 3000 + runner.JUDGE_OWN_MB
    code = ("import json, sys, resource\nfrom grading.judge import main as child\n"
            "child.limit_memory({'judge_memory_mb': 1500})\n"
            "print(json.dumps([resource.getrlimit(resource.RLIMIT_DATA)]))\n"
            "try:\n    bytearray(2000 * 2**20)\nexcept MemoryError:\n    print('refused')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    limits, refused = done.stdout.splitlines()
    soft, hard = json.loads(limits)[0]
    # Soft only: the contestants' zygote, its child, sets its own (lower or higher) limit.
    assert soft == 1500 * 2**20 and hard == resource.getrlimit(resource.RLIMIT_DATA)[1] and refused == "refused"


def test_a_killed_judges_measuring_cgroups_are_swept(tmp_path):
    """A judge killed mid-call leaves its empty memory cgroup: the next judge removes it,
    and never one whose judge still runs."""
    from grading.judge import measure

    dead = 2**22 + 1  # above the kernel's pid_max: no process has it
    gone, mine = tmp_path / f"{measure.CGROUP_PREFIX}{dead}-0", tmp_path / f"{measure.CGROUP_PREFIX}{os.getpid()}-0"
    gone.mkdir()
    mine.mkdir()
    measure._sweep(tmp_path)
    assert not gone.exists() and mine.exists()
