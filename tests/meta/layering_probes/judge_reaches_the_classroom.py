# rule: reach
# module: grading.judge.probe
"""The judge imports contestant/ (allowed), which reaches the classroom for it."""
from grading.contestant import probe_relay  # noqa: F401


# module: grading.contestant.probe_relay
def f():
    from grading.classroom import rows

    return rows
