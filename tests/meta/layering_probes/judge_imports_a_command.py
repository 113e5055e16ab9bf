# rule: commands
# module: grading.judge.probe
"""The judge importing a command (as it once did grading.release and grading.diagnosis)."""


def f():
    from grading import release

    return release
