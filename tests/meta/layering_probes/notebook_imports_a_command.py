# rule: commands
# module: grading.notebook.probe
"""notebook/ importing a command."""
from grading import stubs  # noqa: F401
