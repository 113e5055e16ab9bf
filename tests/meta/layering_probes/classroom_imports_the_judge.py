# rule: may_import
# module: grading.classroom.probe
"""The classroom never reaches judge/: a lower layer, but not one it may import."""


def f():
    from grading.judge import substitute

    return substitute
