"""What a class run knows as it goes: the one state its steps read and fill in, and its result.

A run (:func:`grading.classroom.run.grade_class`) is a declared sequence of steps, each a
function of a :class:`ClassRun`: it reads what the steps before it filled in and fills in
its own fields, in the order :data:`grading.classroom.run.STEPS` declares. A step that must
end the run raises :class:`Stop` with the exit code and what to say; the run's outcome is a
:class:`ClassResult`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grading.classroom.config import ClassConfig
from grading.classroom.exports import CanvasAssignment, Student
from grading.classroom.grade import Grader
from grading.classroom.gradebook import Gradebook, Override
from grading.classroom.lms import LmsStudent
from grading.classroom.matching import Chapter, Submission
from grading.classroom.policy import Resolved
from grading.classroom.rows import Row
from grading.classroom.sheets import StudentKeys

# The exit codes a run ends with (``python -m grading.batch`` returns them).
DONE, BAD_INPUT, GRADER_CHANGED, INTERRUPTED = 0, 2, 3, 130


class Stop(Exception):
    """A step ends the run with exit ``code``, having said ``message`` (stderr) when it has one."""

    def __init__(self, code: int, message: str = ""):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class ClassRun:
    """The run's state, field by field in the order the steps fill it in.

    ``policy``: what the run grades by (flags and the record); ``chapters``: those the
    policy allows, then those graded; ``roster``/``course``: the roster's students and
    Canvas's assignments; ``students``: (name, entry) sorted; ``lms``: {name: what an LMS's
    download said}; ``ignored``: the review lines of entries nobody reads; ``subs``: {name:
    its notebooks matched to every chapter}; ``matched``: {name: roster entry};
    ``chapters_line``: why these chapters; ``columns``/``unmapped``: each graded chapter's
    Canvas assignment and the lines for those with none; ``overrides``/``lateness``: per
    student, as the policy says; ``policy_lines``: what a policy change changes; ``grader``,
    ``book``: the judges' front and ``gradebook.csv``; ``final``: the rows written."""

    config: ClassConfig
    scratch: Path
    policy: Resolved | None = None
    chapters: list[Chapter] = field(default_factory=list)
    roster: list[Student] = field(default_factory=list)
    course: list[CanvasAssignment] = field(default_factory=list)
    students: list[tuple[str, Path]] = field(default_factory=list)
    lms: dict[str, LmsStudent] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    subs: dict[str, Submission] = field(default_factory=dict)
    matched: dict[str, Student] = field(default_factory=dict)
    roster_problems: list[str] = field(default_factory=list)
    chapters_line: str = ""
    columns: dict[str, CanvasAssignment] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)
    overrides: list[Override] = field(default_factory=list)
    lateness: dict = field(default_factory=dict)  # {student: grading.classroom.late.Lateness}
    policy_lines: list[str] = field(default_factory=list)
    grader: Grader | None = None
    book: Gradebook | None = None
    tasks: list = field(default_factory=list)  # grading.classroom.grade.Task, one per chapter to grade
    final: list[Row] = field(default_factory=list)
    code: int = DONE

    @property
    def names(self) -> list[str]:
        return [s for s, _ in self.students]

    @property
    def aliases(self) -> dict[str, list[str]]:
        """{student: what an LMS's file names said of them}, for the roster and the sheets."""
        return {x.name: x.keys for x in self.lms.values()}

    def keys(self) -> StudentKeys:
        """The resolver of the sheets' student keys for this run's students."""
        return StudentKeys(self.names, self.matched, self.aliases, self.roster)

    @property
    def stems(self) -> list[str]:
        return [c.stem for c in self.chapters]


Step = Callable[[ClassRun], None]


@dataclass(frozen=True)
class ClassResult:
    """How a run ended: its exit ``code`` (:data:`DONE`, :data:`BAD_INPUT` before anything was
    graded, :data:`GRADER_CHANGED`, :data:`INTERRUPTED`), the output folder, and the rows
    written (none when the run stopped before writing)."""

    code: int
    out: Path
    rows: tuple[Row, ...] = ()


def say(line: str) -> None:
    """One line of the class run's progress, for the instructor: on stderr, never in a file."""
    print(line, file=sys.stderr)
