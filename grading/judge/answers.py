"""Which calls into another exercise the judge answers: only the solution's, in the same test.

A contestant's call of another exercise's plain function is answered by the judge, which
runs the reference (:func:`grading.judge.substitute.judge_answers`). An answer must never
be an oracle: 6.3's delta rule is 6.4's gated rule with every gate 0, so a stub whose 6.3
asked for 6.4 would be graded on the reference. So each answer goes through a
:class:`Gate`: the call is answered only if the solution made the same call, with
bit-equal arguments (:func:`grading.judge.expected.ask_key`), in the same test, as the
record of the solution's graded run holds it (``make release``, :func:`grading.judge.recording.record`,
with :mod:`grading.judge.replay`'s recorder). Any other call raises
:class:`~grading.contestant.swap.NotAnswered`, and the contestant runs the notebook's own
function instead.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from grading.contestant.swap import NotAnswered
from grading.judge import expected, replay
from grading.layout import BUILD, SOLUTIONS

_TESTS: list[str] = []  # the test running in this judge (test_key), innermost last
RECORDS = BUILD / "expected"  # grading.judge.recording.EXPECTED: the records make release writes
# A tree shipped without solutions (the Gradescope autograder) cannot make the record, and
# the whole record holds every expected value (12 MB for Chapter 5): it ships the calls alone.
SHIPPED_SUFFIX = ".asks.json"
SHIPPED_FORMAT = 1


@contextlib.contextmanager
def running(test: str):
    """Within the block, the calls answered are the ones the solution made in ``test``."""
    _TESTS.append(test)
    try:
        yield
    finally:
        _TESTS.pop()


def test_key(item) -> str:
    """``test_06_delta_rule.py::test_layer_step[B2]``: a test as the records name it, whatever
    the folder pytest runs from, without ``--prove``'s variant (``[solution-B2]``): the
    solution's calls are the ones every variant of the test may have answered."""
    name = item.nodeid.split("::", 1)[-1]
    variant = getattr(getattr(item, "callspec", None), "params", {}).get("nb")
    vid = getattr(variant, "id", None)
    head, bracket, params = name.partition("[")
    if isinstance(vid, str) and bracket:
        params = params[:-1]
        params = "" if params == vid else params.removeprefix(vid + "-") if params.startswith(vid + "-") \
            else params.removesuffix("-" + vid) if params.endswith("-" + vid) else params
        name = f"{head}[{params}]" if params else head
    return f"{Path(str(item.path)).name}::{name}"


class Gate:
    """A reference the judge runs for a contestant, on the calls the solution made in the
    test running (:data:`_TESTS`), with bit-equal arguments; any other call raises
    :class:`NotAnswered`, and the contestant runs the notebook's own function. While the
    records are made (``--record-expected``: the solution graded), every call is answered
    and kept."""

    def __init__(self, stem: str, name: str, reference):
        self.stem, self.name, self.reference = stem, name, reference

    def __call__(self, *args, **kwargs):
        key = expected.ask_key(self.name, args, kwargs)
        test = _TESTS[-1] if _TESTS else None
        recorder = replay.recorder()
        if recorder is not None:
            if test is not None:
                recorder.record_ask(self.stem, test, self.name, key)
        elif test is None or (self.name, key) not in answered_calls(self.stem).get(test, ()):
            raise NotAnswered(
                f"`{self.name}` is another exercise's: the grader answers it with its reference only where the "
                "solution makes the same call, with equal arguments, in the same test; this call is not one of "
                f"them, so the notebook's own `{self.name}` runs")
        return self.reference(*args, **kwargs)


def answered_calls(stem: str) -> dict[str, frozenset[tuple[str, str]]]:
    """``{test: {(name, key), ...}}``: the calls into other exercises the solution of ``stem``
    made in each test (:func:`grading.judge.replay.asks_of`); empty where no record is."""
    record = RECORDS / f"{stem}.npz"
    shipped = RECORDS / f"{stem}{SHIPPED_SUFFIX}"
    if not record.is_file() and shipped.is_file():
        data = json.loads(shipped.read_text())
        if data.get("format") != SHIPPED_FORMAT:
            return {}
        return {test: frozenset((name, key) for name, key in calls) for test, calls in data["asks"].items()}
    return replay.asks_of(record) or {}


def ship_calls(stem: str, folder: Path) -> Path | None:
    """Write the calls of ``stem``'s record (made first if missing or stale) as
    ``folder/NN_topic.asks.json``, for a tree that ships without solutions; None where the
    solution makes no call into another exercise."""
    make_record(stem)
    calls = answered_calls(stem)
    if not calls:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}{SHIPPED_SUFFIX}"
    path.write_text(json.dumps({"format": SHIPPED_FORMAT,
                                "asks": {test: sorted(map(list, pairs)) for test, pairs in sorted(calls.items())}},
                               indent=0) + "\n")
    return path


def make_record(stem: str) -> None:
    """The record of ``stem`` made if it is missing or stale (:func:`make_records`)."""
    make_records([stem])


def make_records(stems: list[str]) -> None:
    """The records of ``stems`` made (:func:`grading.judge.recording.record`) where missing or
    stale, side by side (one pytest per chapter, as many at once as the machine has CPUs),
    by one process at a time (pytest-xdist's workers collect at once: the one that waits
    finds them made). Where they cannot be made (a solution that fails its graders while
    being edited, a judge that may not start pytest), a warning says so and no call is
    answered: every exercise then runs the notebook's own functions, so a notebook's
    mistake in one exercise may cost it in another."""
    import fcntl
    import warnings

    # A tree without solutions answers the calls it was shipped with (ship_calls).
    stems = [stem for stem in stems if (SOLUTIONS / f"{stem}.ipynb").is_file()]
    if not stems:
        return
    try:
        RECORDS.mkdir(parents=True, exist_ok=True)
        with open(RECORDS / "records.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            from grading.judge import recording

            recording.record(stems)
    except (OSError, RuntimeError) as exc:
        warnings.warn(f"no record of the calls the solutions of {', '.join(stems)} make into other exercises ({exc}); "
                      "the judge answers none of them, and the notebook's own functions run", stacklevel=2)
