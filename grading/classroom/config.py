"""A class run's settings: what ``python -m grading.batch``'s flags say, as one frozen record.

The command turns its argv into a :class:`ClassConfig` and hands it to
:func:`grading.classroom.run.grade_class`; no step of the run reads a flag any other way,
and none changes one. The policy flags (``due``, ``late_penalty``, ``overrides``,
``submitted``, ``canvas_assignments``, ``chapters``) are kept as given, None when left
out: with ``resume`` a flag left out takes the value the output folder recorded
(:mod:`grading.classroom.policy`), so "not given" must stay apart from "given empty".
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from grading.classroom.grade import GradeConfig
from grading.layout import GRADES
from grading.proc.judges import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class ClassConfig:
    """One class run, as its command line gave it.

    ``submissions``: one entry per student (a folder, a ``.zip``, or an LMS's download);
    ``out``: the output folder (made absolute); ``workers``: judges at a time; ``timeout``
    (seconds), ``memory_mb`` (0: none), ``threads`` and ``cuda_devices`` ("0,1"): what each
    judge gets; ``extra_tests``: the hidden tests' folder (made absolute); ``roster``,
    ``overrides``, ``submitted``: the instructor's CSV sheets; ``canvas_assignments``: each
    ``CHAPTER=ASSIGNMENT`` or file as given; ``chapters``: ``"1,3"`` or stems; ``due``,
    ``late_penalty``: ISO time and ``FRACTION[:CAP]`` as given. Raises TypeError when a
    field is not of its kind (a number where a path belongs, a string for the workers)."""

    submissions: Path
    out: Path = GRADES
    workers: int = 1
    timeout: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    threads: int = 1
    cuda_devices: str = ""
    resume: bool = False
    policy_change: bool = False
    roster: Path | None = None
    canvas_assignments: tuple[str, ...] | None = None
    overrides: Path | None = None
    extra_tests: Path | None = None
    chapters: str | None = None
    due: str | None = None
    late_penalty: str | None = None
    submitted: Path | None = None
    quiet: bool = False

    def __post_init__(self):
        # Absolute once, here: every judge is started in another folder, and the sandbox
        # hides these folders by their real paths.
        object.__setattr__(self, "out", Path(self.out).resolve())
        if self.extra_tests is not None:
            object.__setattr__(self, "extra_tests", Path(self.extra_tests).resolve())
        if self.canvas_assignments is not None:
            object.__setattr__(self, "canvas_assignments", tuple(self.canvas_assignments))
        for f in fields(self):
            _check_kind(f.name, getattr(self, f.name))

    def grade_config(self) -> GradeConfig:
        """What each judge of the run is given (:class:`grading.classroom.grade.Grader`)."""
        return GradeConfig(out=self.out, submissions=self.submissions, timeout=self.timeout,
                           memory_mb=self.memory_mb, threads=self.threads, cuda_devices=self.cuda_devices,
                           extra_tests=self.extra_tests)


# The kind each field must have; None is allowed where the field's default is None.
_KINDS = {"submissions": Path, "out": Path, "workers": int, "timeout": (int, float), "memory_mb": int,
          "threads": int, "cuda_devices": str, "resume": bool, "policy_change": bool, "roster": Path,
          "canvas_assignments": tuple, "overrides": Path, "extra_tests": Path, "chapters": str, "due": str,
          "late_penalty": str, "submitted": Path, "quiet": bool}
_OPTIONAL = {"roster", "canvas_assignments", "overrides", "extra_tests", "chapters", "due", "late_penalty",
             "submitted"}


def _check_kind(name: str, value) -> None:
    if value is None and name in _OPTIONAL:
        return
    kinds = _KINDS[name] if isinstance(_KINDS[name], tuple) else (_KINDS[name],)
    # True is an int to Python, never a count or a limit here.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise TypeError(f"ClassConfig.{name}: expected {' or '.join(k.__name__ for k in kinds)}, "
                        f"got {type(value).__name__}")
