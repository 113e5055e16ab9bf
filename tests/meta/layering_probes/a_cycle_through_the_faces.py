# rule: cycle
# module: grading.layout
"""layout (in place of the real one) importing pins, which imports layout."""
from grading import pins  # noqa: F401
