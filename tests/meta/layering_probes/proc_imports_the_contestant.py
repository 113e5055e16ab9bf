# rule: may_import
# module: grading.proc.probe
"""proc/ starts the contestant by its command line, and never imports it."""
from grading.contestant import swap  # noqa: F401
