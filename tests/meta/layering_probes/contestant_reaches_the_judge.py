# rule: reach
# module: grading.contestant.probe
"""Imports only notebook/ (allowed), which reaches the judge for it, inside a function."""


def f():
    from grading.notebook import probe_relay

    return probe_relay
# module: grading.notebook.probe_relay
def g():
    import grading.judge.proxy

    return grading.judge.proxy
