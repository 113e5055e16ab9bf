"""The grader's pinned requirements, ``requirements-grader.txt``, and its sections.

The file pins what the graders import (a subset of ``requirements.txt``, at the same
versions). Its lines before the first section header are needed everywhere; a section
opened by ``# == only with PACKAGE/ ...`` is needed only where ``PACKAGE/`` ships (Chapter
7's ``gpucompile``: triton; Chapter 8's ``modellab``: transformers and the rest). The
student edition ships the whole file; a Gradescope zip ships :func:`grader_requirements`
of the packages its chapters need, so that an assignment of Chapter 1 does not install
triton or transformers.
"""

from __future__ import annotations

import re
from pathlib import Path

from grading.layout import ROOT

GRADER_REQUIREMENTS = ROOT / "requirements-grader.txt"
AUTHOR_REQUIREMENTS = ROOT / "requirements.txt"
SECTION = re.compile(r"^# == only with (\w+)/")
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)")


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): lower case, runs of ``-_.`` as ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """``{canonical name: version}`` of every ``name==version`` line of a requirements text."""
    return {canonical(m.group(1)): m.group(2) for line in text.splitlines() if (m := PIN.match(line.strip()))}


def sections(text: str) -> dict[str | None, list[str]]:
    """The pin lines of a requirements text by section: ``None`` for those before the first
    ``# == only with PACKAGE/`` header, ``"PACKAGE"`` for those after it."""
    out: dict[str | None, list[str]] = {None: []}
    current = None
    for line in text.splitlines():
        header = SECTION.match(line)
        if header:
            current = header.group(1)
            out.setdefault(current, [])
        elif PIN.match(line.strip()):
            out[current].append(line.strip())
    return out


def grader_requirements(packages: set[str] | list[str], source: Path = GRADER_REQUIREMENTS) -> str:
    """``source`` without the sections of packages not in ``packages``: its header comment,
    the lines every grader needs, and the sections of the packages named."""
    kept, keep = [], True
    for line in source.read_text().splitlines():
        header = SECTION.match(line)
        if header:
            keep = header.group(1) in packages
        if keep:
            kept.append(line)
    return "\n".join(kept) + "\n"
