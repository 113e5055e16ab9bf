# rule: layer
# module: grading.contestant.probe
"""The contestant importing proc/, a higher layer (it is started by proc/, never the reverse)."""
from grading.proc import zygote  # noqa: F401
