"""Grade a folder of submissions: ``python -m grading.batch SUBMISSIONS --out DIR``.

This command is argv -> :class:`grading.classroom.ClassConfig` -> one call of
:func:`grading.classroom.grade_class` -> exit code; the run itself, step by step, is the
classroom's (:mod:`grading.classroom.run`).

Each entry of SUBMISSIONS is one student: a folder of notebooks, or a ``.zip`` of
one. Notebooks are matched to chapters by name (renamed copies are fine; what
cannot be matched is reported). Every student and chapter is graded in a child
process of its own (:mod:`grading.proc.judges`), several at a time, under a wall-clock
timeout and a memory limit. The results:

  DIR/gradebook.csv      student, chapter, exercise, points, max_points, status, message
                         (appended as each chapter finishes; sorted at the end)
  DIR/gradebook_wide.csv one row per student: id, name, email (--roster), total, one column per exercise
  DIR/gradebook_canvas.csv  the same points in Canvas's gradebook import layout (ids from --roster;
                         a chapter's column names the course's assignment it updates, --canvas-assignments),
                         rows only for students with a grade: one file per chapter (gradebook_canvas_NN_topic.csv)
                         where the students graded differ between chapters
  DIR/policy.json        the policy the grades were given by, for --resume
  DIR/feedback/<student>.md   what each student reads
  DIR/needs_review.md    timeouts, crashes, memory limits, tampering, unreadable notebooks,
                         notebooks no chapter claimed, roster and overrides problems

``--overrides FILE`` (student, exercise, points, reason) corrects grades on every run;
``--resume`` regrades a student whose files changed (content hashes); ``--due`` and
``--late-penalty`` take points from late work (:mod:`grading.classroom.late`). SUBMISSIONS may be
an LMS's bulk download as it comes (:mod:`grading.classroom.lms`). Without ``--chapters``, the
chapters graded are those the submissions hold notebooks of.

The run's policy (due date, penalty, overrides, submission times, Canvas assignments,
chapters) is recorded in ``DIR/policy.json`` (:mod:`grading.classroom.policy`): ``--resume``
takes every such flag it is not given from there, and stops before grading (exit 2), saying
what would change and for whom, when one is given with another value, unless
``--policy-change`` confirms it.

Statuses: passed, failed, not attempted, error, timed out, memory limit, crashed,
tampered, needs review, missing, skipped (a GPU test without a GPU), note.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from grading.classroom import ClassConfig, grade_class
from grading.layout import GRADES
from grading.proc.judges import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S


def parse_args(argv: list[str]) -> ClassConfig:
    """The run ``argv`` asks for (``--help`` prints every flag); argparse exits 2 on a bad one."""
    p = argparse.ArgumentParser(
        prog="python -m grading.batch",
        description="Grade a folder of student submissions (each a folder of notebooks or a .zip of one): "
                    "writes gradebook.csv, one Markdown feedback file per student and needs_review.md.")
    p.add_argument("submissions", type=Path, help="folder with one entry per student (a folder or a .zip)")
    p.add_argument("--out", type=Path, default=GRADES,
                   help="output folder (default: _build/grades)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="chapters graded at the same time, each in its own process (default: all cores)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"wall-clock seconds per student and chapter (default {DEFAULT_TIMEOUT_S})")
    p.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB,
                   help="memory limit per student and chapter in MB (RLIMIT_DATA per process; 0: none; "
                        f"default {DEFAULT_MEMORY_MB})")
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP/BLAS threads per child (default 1)")
    p.add_argument("--cuda-devices", default="",
                   help="GPUs the children may see, shared round-robin, e.g. '0,1' (default: none, CPU only)")
    p.add_argument("--resume", action="store_true",
                   help="keep what an earlier run in --out finished; grade the rest, and grade again every "
                        "student whose files changed since (content hashes). The policy flags left out (--due, "
                        "--late-penalty, --overrides, --submitted, --canvas-assignments, --chapters) keep the "
                        "values recorded in --out/policy.json; one given with another value stops the run, "
                        "saying what it changes for whom, unless --policy-change")
    p.add_argument("--policy-change", action="store_true",
                   help="with --resume: apply the policy flags given although they differ from the recorded "
                        "ones (the run says what changes and for whom)")
    p.add_argument("--roster", type=Path, default=None,
                   help="CSV with a header naming a student id column and optionally name, email, folder: "
                        "maps submission names to ids in gradebook_wide.csv (Canvas's gradebook export works "
                        "as it is)")
    p.add_argument("--canvas-assignments", action="append", default=None, metavar="CHAPTER=ASSIGNMENT|FILE",
                   help="the course's assignment a chapter's grades update in gradebook_canvas.csv, named as in "
                        "--roster (Canvas's export) by id, column name or exact title, e.g. 1=90001; or a CSV "
                        "file with the header chapter,assignment; may be given several times")
    p.add_argument("--overrides", type=Path, default=None,
                   help="CSV with the header student,exercise,points,reason: an instructor's corrections, "
                        "applied on every run and recorded in the gradebook and the feedback")
    p.add_argument("--extra-tests", type=Path, default=None,
                   help="folder of hidden test files test_NN_*.py: graded and in the gradebook, "
                        "never shown in feedback")
    p.add_argument("--chapters", default=None,
                   help="grade only these chapters, e.g. '01_kv_memory' or '1,3' (default: every chapter "
                        "that at least one submission holds a notebook of)")
    p.add_argument("--due", default=None, help="the due date, an ISO time (2026-12-01T23:59, or with an offset: "
                                             "...+01:00); work handed in later loses --late-penalty")
    p.add_argument("--late-penalty", default=None,
                   help="FRACTION[:CAP]: the fraction of the points taken per started day after --due, at most "
                        "CAP (default 1), e.g. 0.1:0.5 (needs --due; '' with --due '': no penalty)")
    p.add_argument("--submitted", type=Path, default=None,
                   help="CSV with the header student,submitted (ISO times): when each submission was handed in, "
                        "for --due (an LMS download's names give Blackboard's attempt time and Canvas's late mark)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return ClassConfig(**vars(p.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    """Grade the class ``argv`` (default: the command line) describes; the exit code: 0, 2 for
    input or a policy change it refuses (nothing graded), 3 when the grader's files changed
    while grading, 130 when interrupted (``--resume`` grades the rest)."""
    return grade_class(parse_args(sys.argv[1:] if argv is None else argv)).code


if __name__ == "__main__":
    sys.exit(main())
