# rule: layer
# module: grading.proc.probe
"""proc/ importing classroom/, a higher layer."""
from grading.classroom import rows  # noqa: F401
