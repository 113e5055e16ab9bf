# rule: layer
# module: modellab.probe
"""modellab is a library of the lowest packages: it imports only faces."""
from grading.contestant import swap  # noqa: F401
