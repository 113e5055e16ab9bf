"""A class graded: :func:`grade_class` runs the declared steps over one run state.

As nbgrader declares its preprocessors, a class run is the list :data:`STEPS`, each a
function of the run's state (:class:`grading.classroom.state.ClassRun`) that fills in its
own fields. Every step that can refuse the run's input (the flags, the sheets, the roster,
a policy change) comes before the first one that writes a grade, so a run that stops with
exit 2 has written nothing but its scratch folder, which is removed.

    check_inputs -> read_policy -> find_chapters -> read_class_roster     what the run is given
    -> gather -> match -> choose_chapters -> map_canvas                   who handed in what
    -> resolve_overrides -> late_work -> record_policy                    the policy, per student
    -> open_gradebook -> list_tasks -> grade -> write                     the grades
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from grading.classroom import pool, steps
from grading.classroom.config import ClassConfig
from grading.classroom.state import ClassResult, ClassRun, Step, Stop
from grading.classroom.write import write

STEPS: tuple[Step, ...] = (
    steps.check_inputs, steps.read_policy, steps.find_chapters, steps.read_class_roster,
    steps.gather, steps.match, steps.choose_chapters, steps.map_canvas,
    steps.resolve_overrides, steps.late_work, steps.record_policy,
    pool.open_gradebook, pool.list_tasks, pool.grade, write,
)


def grade_class(config: ClassConfig, run_steps: tuple[Step, ...] = STEPS) -> ClassResult:
    """Grade the class ``config`` describes: each of ``run_steps`` in order over one state,
    in a scratch folder of its own (unpacked zips, an LMS's files gathered) removed at the
    end. A step that stops the run says why on stderr; the result carries the exit code."""
    run = ClassRun(config, Path(tempfile.mkdtemp(prefix="grade-unzip-")))
    try:
        for step in run_steps:
            step(run)
    except Stop as stop:
        if stop.message:
            print(stop.message, file=sys.stderr)
        return ClassResult(stop.code, config.out)
    finally:
        shutil.rmtree(run.scratch, ignore_errors=True)
    return ClassResult(run.code, config.out, tuple(run.final))
