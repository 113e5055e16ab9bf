# rule: layer
# module: grading.judge.probe
"""The judge never imports classroom/."""
from grading.classroom import rows  # noqa: F401
