# rule: commands
# module: distlab.probe
"""distlab importing a command."""
from grading import release  # noqa: F401
