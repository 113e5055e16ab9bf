# rule: cycle
# module: grading.judge.probe_a
"""Two judge modules that import each other, one of them inside a function."""
from grading.judge import probe_b  # noqa: F401


# module: grading.judge.probe_b
def f():
    from grading.judge import probe_a

    return probe_a
