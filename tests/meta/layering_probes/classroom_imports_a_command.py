# rule: commands
# module: grading.classroom.probe
"""The classroom importing a command: the class run's command calls the classroom, not the other way."""
from grading.batch import main  # noqa: F401
