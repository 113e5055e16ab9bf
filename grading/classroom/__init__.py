"""A class's submissions, turned into grades.

:func:`grade_class` grades a class (``python -m grading.batch`` calls it once, with a
:class:`ClassConfig` made from its argv, and returns its :class:`ClassResult`'s code). The
run is a declared sequence of steps over one state:

- ``config``:    :class:`ClassConfig`, the run's settings as its command line gave them.
- ``run``:       :func:`grade_class` and ``STEPS``, the order the steps run in.
- ``state``:     the run's state the steps fill in, how a step stops the run, the result.
- ``steps``:     the steps before grading: read the policy and the roster, gather, match,
                 choose the chapters, map Canvas's columns, resolve overrides and late work,
                 record the policy.
- ``pool``:      the steps that grade: open the gradebook, list the tasks, grade them.
- ``write``:     the last step: the gradebook, the feedback, the exports, the review list.

What the steps use:

- ``grade``:     one submission graded: a judge per chapter, its records turned into rows
                 (``grade_submission``, ``grade_chapter``: what every front door calls).
- ``matching``:  which notebook is which chapter, tolerating students' renames.
- ``lms``:       an LMS's bulk download (Canvas, Moodle, Blackboard) as one submission per student.
- ``late``:      the due date and the late policy, applied in one place.
- ``policy``:    a run's policy recorded in its output folder, and what a resume that changes it changes.
- ``rows``:      a gradebook row, and how a judge's outcomes become rows.
- ``gradebook``: ``gradebook.csv`` as grading goes, overrides, feedback, the review list.
- ``exports``:   the wide export, and the Canvas files (which name only the students with a grade).
- ``sheets``:    which submission a line of an instructor's sheet means.
"""

__all__ = ["ClassConfig", "ClassResult", "grade_class"]


def __getattr__(name: str):
    # Imported when first used (PEP 562): the judges' front doors import single modules of
    # this package (grade, rows) and need not load the whole class run with them.
    if name == "grade_class":
        from grading.classroom.run import grade_class

        return grade_class
    if name == "ClassConfig":
        from grading.classroom.config import ClassConfig

        return ClassConfig
    if name == "ClassResult":
        from grading.classroom.state import ClassResult

        return ClassResult
    raise AttributeError(f"module 'grading.classroom' has no attribute {name!r}")
