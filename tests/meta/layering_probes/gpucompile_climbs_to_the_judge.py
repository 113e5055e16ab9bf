# rule: layer
# module: gpucompile.probe
"""gpucompile runs in a child of the judge, and never imports it."""
import grading.judge.session  # noqa: F401
