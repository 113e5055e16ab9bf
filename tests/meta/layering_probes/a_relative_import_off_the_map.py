# rule: may_import
# module: grading.classroom.probe
"""A relative import counts as any other: ``..judge`` from classroom/ is grading.judge."""
from ..judge import substitute  # noqa: F401
