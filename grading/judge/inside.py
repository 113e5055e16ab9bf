"""What only the contestant's process can see, asked for by a grader: watches and addresses.

Some rules are about how the notebook computes, not what it returns, and only the
notebook's process can see them: no NaN on the way to a finite answer (Chapter 3), a
buffer written in place (Chapter 4). The watch runs where the code runs
(:mod:`grading.contestant.watch`); the judge starts it, makes its calls and reads back plain
values. The notebook could answer them falsely, so each is worth at most a point; memory
and bytes on the wire are measured from outside instead (:mod:`grading.judge.measure`).
"""

from __future__ import annotations

import contextlib

from grading.judge.proxy import Remote, RemoteNotebook


class Watched:
    """What a watch saw (its fields are those of grading.contestant.watch's ``result()``)."""

    def __init__(self):
        self.seen: list[str] = []


@contextlib.contextmanager
def watching(nb: RemoteNotebook, name: str):
    """``with watching(nb, "non_finite") as watch:`` the calls inside run under that watch of
    grading.contestant.watch in the contestant; on leaving, ``watch`` holds what it saw."""
    if not isinstance(nb, RemoteNotebook):  # a notebook loaded in this process (make bench's baseline)
        from grading.contestant.watch import WATCHES

        with WATCHES[name]() as watch:
            yield watch
        return
    watched = Watched()
    nb._ask("watch", f"starting the {name} watch", name=name)
    try:
        yield watched
    finally:
        seen = nb._ask("watch", "reading the watch", name="stop") if nb.session and not nb.session.dead else None
        if isinstance(seen, dict):
            watched.seen = [str(s) for s in seen.get("seen", [])] if isinstance(seen.get("seen"), list) else []


def data_ptr(obj: Remote, attribute: str) -> int:
    """Where the tensor ``obj.attribute`` ("recent.k") keeps its memory, in the contestant."""
    if not isinstance(obj, Remote):  # an object of this process (make bench's in-process baseline)
        for part in attribute.split("."):
            obj = getattr(obj, part)
        return obj.data_ptr()
    return obj._ask("protocol", f"reading {obj._name}.{attribute}.data_ptr()", name="data_ptr", args=[attribute])
