# rule: commands
# module: grading.contestant.probe
"""A contestant module that imports a command: the faces are apart from the commands."""
from grading.batch import main  # noqa: F401
