# rule: layer
# module: distlab.launch
"""distlab (in place of the real launch) importing the judge's reference reader."""


def rank():
    from grading.judge.substitute import swap_for

    return swap_for
