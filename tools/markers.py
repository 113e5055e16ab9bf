"""Generated text between two markers of a hand-written page (the README's table of
chapters, docs/benchmarks.md's table of records)."""

from __future__ import annotations


def between_markers(text: str, start: str, end: str, body: str, page: str) -> str:
    """``text`` with what lies between ``start`` and ``end`` replaced by ``body`` (which
    carries the markers itself). ValueError when ``page`` lacks either marker."""
    if start not in text or end not in text:
        raise ValueError(f"{page} lacks the markers {start!r} and {end!r}")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + body + tail
