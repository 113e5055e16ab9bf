"""A class's submissions, turned into grades.

- ``grade``:     one submission graded: a judge per chapter, its records turned into rows
                 (``grade_submission``, ``grade_chapter``: what every front door calls).
- ``matching``:  which notebook is which chapter, tolerating students' renames.
- ``lms``:       an LMS's bulk download (Canvas, Moodle, Blackboard) as one submission per student.
- ``late``:      the due date and the late policy, applied in one place.
- ``policy``:    a run's policy recorded in its output folder, and what a resume that changes it changes.
- ``rows``:      a gradebook row, and how a judge's outcomes become rows.
- ``gradebook``: ``gradebook.csv`` as grading goes, overrides, feedback, the review list.
- ``exports``:   the wide export, and the Canvas files (which name only the students with a grade).
"""
