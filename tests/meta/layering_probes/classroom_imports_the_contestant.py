# rule: may_import
# module: grading.classroom.probe
"""The classroom never reaches contestant/."""
import grading.contestant.swap  # noqa: F401
