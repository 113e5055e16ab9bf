# rule: cycle
# module: grading.nbgrader
"""nbgrader (in place of the real one) importing stubs, which imports nbgrader."""


def f():
    from grading import stubs

    return stubs
