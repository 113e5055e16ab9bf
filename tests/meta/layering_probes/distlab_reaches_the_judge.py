# rule: reach
# module: distlab.probe
"""distlab imports contestant/ (allowed), which reaches the judge for it."""
from grading.contestant import probe_relay  # noqa: F401

# module: grading.contestant.probe_relay
from grading.judge import answers  # noqa: F401
