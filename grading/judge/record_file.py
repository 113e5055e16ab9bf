"""The file of a chapter's record: ``tests/expected/NN_topic.npz``, and what it says.

One ``.npz`` read with ``allow_pickle=False``: the index as JSON bytes (under
:data:`INDEX`), and every recorded array packed into one flat array per dtype. Written by
the recorder (:mod:`grading.judge.replay`, ``pytest --record-expected``), read back by the
release's replay and by the judge's answers (:func:`asks_of`: which calls into other
exercises the solution made in each test).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import numpy as np

FORMAT = 2  # 2: the calls into other exercises the judge answered, per test ("asks")
INDEX = "__index__"


def merge(old: tuple[dict, list], new: tuple[dict, list]) -> tuple[dict, list]:
    """Two records of one module as one: ``new``'s arrays after ``old``'s, its index
    entries pointing at them."""
    (index, arrays), (more, more_arrays) = old, new
    offset = len(arrays)

    def shift(value):
        if isinstance(value, dict):
            return {k: (v + offset if k in ("tensor", "ndarray") and isinstance(v, int) else shift(v))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [shift(v) for v in value]
        return value

    more = shift(more)
    for name, entries in more["calls"].items():
        index["calls"].setdefault(name, []).extend(entries)
    index["instances"].extend(more["instances"])
    index["constants"].update(more["constants"])
    index["tests"] = sorted(set(index["tests"]) | set(more["tests"]))
    asks = index.setdefault("asks", {})
    for test, calls in more.get("asks", {}).items():
        asks[test] = sorted(map(list, {tuple(c) for c in asks.get(test, [])} | {tuple(c) for c in calls}))
    return index, [*arrays, *more_arrays]


def save_file(path: Path, index: dict, arrays: list) -> None:
    """The index as JSON bytes, and the arrays packed into one flat array per dtype (a
    chapter records thousands of small tensors; one zip entry each would cost more than
    their data); ``index["arrays"]`` locates each: ``[dtype, offset, shape]``."""
    flat: dict[str, list[np.ndarray]] = {}
    where, sizes = [], {}
    for a in arrays:
        dtype = a.dtype.str
        where.append([dtype, sizes.get(dtype, 0), list(a.shape)])
        flat.setdefault(dtype, []).append(a.reshape(-1))
        sizes[dtype] = sizes.get(dtype, 0) + a.size
    payload = {f"flat{n}": np.concatenate(parts) for n, parts in enumerate(flat.values())}
    index = {**index, "arrays": where, "flat": list(flat)}
    payload[INDEX] = np.frombuffer(json.dumps(index).encode(), dtype=np.uint8)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **payload)
    tmp.replace(path)


def load_file(path: Path) -> tuple[dict, list]:
    with np.load(path, allow_pickle=False) as data:
        index = json.loads(data[INDEX].tobytes().decode())
        flat = {dtype: data[f"flat{n}"] for n, dtype in enumerate(index.pop("flat"))}
    arrays = [flat[dtype][offset:offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)
              for dtype, offset, shape in index.pop("arrays")]
    return index, arrays


def asks_of(file: Path) -> dict[str, frozenset[tuple[str, str]]] | None:
    """``{"test_06_delta_rule.py::test_layer[...]": {(name, key), ...}}``: the calls into
    other exercises that the solution made in each test when ``file`` was recorded, and the
    judge answered; None when ``file`` is missing or was recorded before they were kept."""
    if not file.is_file():
        return None
    return _asks_of(file, file.stat().st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _asks_of(file: Path, mtime: int) -> dict[str, frozenset[tuple[str, str]]] | None:
    with np.load(file, allow_pickle=False) as data:
        index = json.loads(data[INDEX].tobytes().decode())
    if index.get("format") != FORMAT or not isinstance(index.get("asks"), dict):
        return None
    return {test: frozenset((name, key) for name, key in calls) for test, calls in index["asks"].items()}


@functools.lru_cache(maxsize=None)
def tests_of(file: Path) -> frozenset[str]:
    """The test ids that ran where ``file`` was recorded."""
    with np.load(file, allow_pickle=False) as data:
        return frozenset(json.loads(data[INDEX].tobytes().decode()).get("tests", []))


def stamp_of(paths: list[Path]) -> str:
    """A short digest of the files' names and bytes: a record is stale when it changes."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]
