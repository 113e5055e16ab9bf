# rule: reach
# module: grading.notebook.probe
"""notebook/ imports a module of its own, which reaches the judge for it."""
from grading.notebook import probe_relay  # noqa: F401
# module: grading.notebook.probe_relay
from grading.judge import proxy  # noqa: F401
