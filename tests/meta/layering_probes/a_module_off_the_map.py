# rule: map
# module: grading.probe_module
"""A top-level module that is neither a face nor a command."""
