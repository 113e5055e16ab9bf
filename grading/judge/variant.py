"""Which notebook a test runs on, and which chapter a test file grades.

Under ``pytest --prove`` every grader runs on several notebooks of one chapter: the one
graded, the solution, the stubs, each catalogue bug, and the stubs with one exercise
solved (``alone-N.M``). A :class:`Variant` names one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from grading.layout import TESTS, chapter_of_test_file
from grading.notebook.catalogue import Bug


@dataclass(frozen=True)
class Variant:
    kind: str  # "graded" (the --notebooks dir), "solution", "stub", "bug", "alone"
    bug: Bug | None = None
    exercise: str | None = None  # "alone": the stubs with only this exercise solved

    @property
    def id(self) -> str:
        if self.kind == "alone":
            return f"alone-{self.exercise}"
        return f"bug-{self.bug.name}" if self.bug else self.kind


def chapter_stem(path) -> str | None:
    """The stem of the chapter a test file grades. A test file outside ``tests/`` (an
    instructor's hidden test, ``test_NN_anything.py``) grades chapter NN: its notebook is
    the chapter's own, loaded under the chapter's name and spawned exactly as for the
    public graders (the same contestant, even), so that nothing the notebook can read
    (``__file__``, its cells' file names, the spawn's fields) tells a hidden test apart."""
    chapter = chapter_of_test_file(path)
    if chapter is None:
        return None
    if TESTS in Path(str(path)).resolve().parents:
        return chapter.stem
    return public_stems().get(chapter.number, chapter.stem)


@functools.lru_cache(maxsize=1)
def public_stems() -> dict[int, str]:
    """Chapter number -> stem, from the graders in ``tests/`` (one per number)."""
    found: dict[int, list[str]] = {}
    for path in TESTS.glob("test_[0-9][0-9]_*.py"):
        chapter = chapter_of_test_file(path)
        if chapter is not None:
            found.setdefault(chapter.number, []).append(chapter.stem)
    return {number: stems[0] for number, stems in found.items() if len(stems) == 1}
