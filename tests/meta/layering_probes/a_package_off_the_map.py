# rule: map
# package: grading.probe_package
"""A package the map does not name."""
