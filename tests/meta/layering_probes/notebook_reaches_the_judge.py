# rule: reach
# module: grading.notebook.probe
"""notebook/ imports a module of its own, which reaches the judge for it."""
# module: grading.notebook.probe_relay
from grading.judge import proxy  # noqa: F401
from grading.notebook import probe_relay  # noqa: F401
