# rule: reach
# module: grading.classroom.probe
"""Imports proc/ (allowed), which reaches the judge for it."""
from grading.proc import probe_relay  # noqa: F401
# module: grading.proc.probe_relay
from grading.judge import messages  # noqa: F401
