# rule: faces
# module: grading.wire.probe
"""A module of a face package that imports a command."""


def f():
    from grading import release

    return release
