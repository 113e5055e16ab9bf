# rule: layer
# module: gpucompile.probe
"""gpucompile importing proc/, a package of its own layer."""
from grading.proc import sandbox  # noqa: F401
