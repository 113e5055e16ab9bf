"""A class's submissions, turned into grades.

- ``matching``:  which notebook is which chapter, tolerating students' renames.
- ``lms``:       an LMS's bulk download (Canvas, Moodle, Blackboard) as one submission per student.
- ``late``:      the due date and the late policy, applied in one place.
- ``gradebook``: rows, ``gradebook.csv``, the roster, overrides, feedback, the review list.
- ``exports``:   the wide and Canvas exports.
"""
