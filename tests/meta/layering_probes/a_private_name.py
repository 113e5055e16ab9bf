# rule: private
# module: grading.judge.probe
"""A private name of another module."""
from grading.notebook.loader import _no_such_name  # noqa: F401
