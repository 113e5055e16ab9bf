# rule: private
# module: grading.contestant.probe
"""The contestant reading a private name of a face, as an attribute."""
import grading.wire.values


def f():
    return grading.wire.values._no_such_name
