# rule: faces
# module: grading.outcome
"""A face (in place of the real outcome) that imports notebook/: faces import faces only."""
from grading.notebook.loader import load_notebook  # noqa: F401
