# rule: layer
# module: grading.notebook.probe
"""notebook/ (the notebook as data) importing proc/, a higher layer."""
from grading.proc.judges import run_judge  # noqa: F401
