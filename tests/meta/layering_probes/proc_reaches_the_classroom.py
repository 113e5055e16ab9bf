# rule: reach
# module: grading.proc.probe
"""proc/ imports notebook/ (allowed), which reaches the classroom for it."""
# module: grading.notebook.probe_relay
from grading.classroom import gradebook  # noqa: F401
from grading.notebook import probe_relay  # noqa: F401
