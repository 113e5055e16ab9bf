# rule: reach
# module: grading.classroom.probe
"""Imports proc/ (allowed), which reaches the judge for it."""
# module: grading.proc.probe_relay
from grading.judge import messages  # noqa: F401
from grading.proc import probe_relay  # noqa: F401
