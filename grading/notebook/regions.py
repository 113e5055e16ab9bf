"""Solution regions in notebook cells.

A graded cell names its exercise on a comment line and marks the answer with the
nbgrader markers (``grading.nbgrader`` adds nbgrader's cell metadata), so an
instructor can also run the course under nbgrader::

    # Exercise 1.2: total bytes of the cache for a batch of sequences.
    def kv_cache_bytes(...):
        ...validation stays visible to the student...
        ### BEGIN SOLUTION
        return ...
        ### END SOLUTION

The stub replaces each region with ``raise NotImplementedError("Exercise 1.2: ...")``.
A region at the top level of a cell whose first line assigns a name
(``answer = ...``) becomes ``answer = ...  # Exercise 1.2: ...`` instead, so the
notebook still loads and the grader reports the Ellipsis as "not implemented".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grading.layout import EXERCISE_LINE

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)\s*(?::[^=]+)?=(?!=)")


class RegionError(ValueError):
    """A notebook's solution markers are malformed."""


@dataclass(frozen=True)
class Region:
    """One solution region: lines ``start`` (BEGIN) to ``end`` (END), inclusive."""

    exercise: str  # "1.2"
    task: str  # what the student has to do, from the "# Exercise" line
    start: int
    end: int
    indent: str


def find_regions(source: str, where: str = "cell") -> list[Region]:
    """All solution regions of one cell's source, each tied to the nearest preceding
    ``# Exercise N.M: ...`` line of the same cell."""
    lines = source.splitlines()
    regions: list[Region] = []
    exercise = task = None
    start = None
    for i, line in enumerate(lines):
        m = EXERCISE_LINE.match(line)
        if m and start is None:
            exercise, task = m.group(1), m.group(2)
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if start is not None:
                raise RegionError(f"{where}: line {i + 1}: nested {BEGIN}")
            if exercise is None:
                raise RegionError(f"{where}: line {i + 1}: {BEGIN} without a '# Exercise N.M: ...' line above it")
            start = i
        elif stripped.startswith(END):
            if start is None:
                raise RegionError(f"{where}: line {i + 1}: {END} without {BEGIN}")
            indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
            regions.append(Region(exercise, task, start, i, indent))
            start = None
    if start is not None:
        raise RegionError(f"{where}: line {start + 1}: {BEGIN} is never closed")
    return regions


def stub_lines(region: Region, body: list[str]) -> list[str]:
    """What a region becomes in the exercise notebook."""
    message = f"Exercise {region.exercise}: {region.task}"
    first = next((line for line in body if line.strip()), "")
    m = ASSIGNMENT.match(first) if not region.indent else None
    if m:
        return [f"{m.group(1)} = ...  # {message}"]
    return [f"{region.indent}raise NotImplementedError({message!r})"]


def replace_regions(source: str, replacement, where: str = "cell", only: str | None = None) -> str:
    """Rewrite every region of ``source`` (or those of exercise ``only``) with
    ``replacement(region, body_lines) -> list[str]``."""
    lines = source.splitlines()
    out: list[str] = []
    cursor = 0
    for region in find_regions(source, where):
        if only is not None and region.exercise != only:
            continue
        out.extend(lines[cursor : region.start])
        out.extend(replacement(region, lines[region.start + 1 : region.end]))
        cursor = region.end + 1
    out.extend(lines[cursor:])
    text = "\n".join(out)
    return text + ("\n" if source.endswith("\n") else "")


def exercises_in(source: str, where: str = "cell") -> list[str]:
    return sorted({r.exercise for r in find_regions(source, where)})
