# rule: may_import
# module: distlab.probe
"""distlab importing a lower package it is not given (gpucompile)."""
import gpucompile.chapter07  # noqa: F401
