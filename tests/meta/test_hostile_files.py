"""What a submission hands the grader besides its code: values, names, files and cells.

The unit tests check each rule where it lives: values of exact types
(:func:`grading.compare.assert_equal`), LMS file names parsed anchored and never as
another student's (:mod:`grading.lms`), submissions read as untrusted files without
following a link or opening a FIFO (:mod:`grading.matching`), and CSV cells that a
spreadsheet would run as formulas (:mod:`grading.gradebook`). The batch test at the end
grades one class holding every attack at once with the real command.
"""

from __future__ import annotations

import numpy as np
import pytest

from grading.compare import GradingFailure, assert_equal


# -- values of exact types ------------------------------------------------------------------
class Count(int):
    """An int subclass, as a notebook could return one (the wire refuses them; a hidden
    test's own helper could still make one)."""


@pytest.mark.parametrize("got, expected", [
    (np.float16("inf"), 65536),
    (np.float16("inf"), 2**40),
    (np.float32("inf"), 10**39),
    (np.int64(4), 4),
    (True, 1),
    (1, True),
    (Count(4), 4),
    (4.0, 4),
    (np.float64(2.5), 2.5),
    (np.str_("fp16"), "fp16"),
    ([4, np.int64(5)], [4, 5]),
    ((1, (2, np.float16("inf"))), (1, (2, 70000))),
    ({"pages": np.int64(3)}, {"pages": 3}),
    ({np.int64(1): 2}, {1: 2}),
    ({np.int64(1), 2}, {1, 2}),
    ([1, 2], np.array([1, 2])),
    (np.array([1, 2], dtype=np.int32), np.array([1, 2], dtype=np.int64)),
])
def test_a_value_of_another_type_is_refused_even_when_it_compares_equal(got, expected):
    with pytest.raises(GradingFailure):
        assert_equal(got, expected, "f()")


@pytest.mark.parametrize("got, expected", [
    (4, 4), (True, True), (2.5, 2.5), (3, 3.0), ("fp16", "fp16"), (None, None),
    ([1, [2, 3]], [1, [2, 3]]), ({"a": (1, 2.0)}, {"a": (1, 2.0)}), ({1, 2}, {1, 2}),
    (np.int64(4), np.int64(4)), (np.array([1.0, np.nan]), np.array([1.0, np.nan])),
])
def test_a_value_of_the_expected_type_passes(got, expected):
    assert_equal(got, expected, "f()")


def test_the_message_names_the_type_a_student_returned_and_the_one_expected():
    with pytest.raises(GradingFailure) as err:
        assert_equal(np.float16("inf"), 131072, "kv_bytes_per_token(32, 8, 128)")
    text = str(err.value)
    assert "numpy.float16" in text and "expected a Python int (131072)" in text, text
    with pytest.raises(GradingFailure) as err:
        assert_equal([4, np.int64(5)], [4, 5], "f()")
    assert "in item [1]" in str(err.value), str(err.value)
    with pytest.raises(GradingFailure) as err:  # the float-for-a-count message is kept
        assert_equal(4.0, 4, "f()")
    assert str(err.value) == "f() returned the float 4.0; expected the int 4"


def test_a_wrong_value_is_shown_whole_whatever_its_type():
    with pytest.raises(GradingFailure) as err:
        assert_equal([np.int64(1), 3], [1, 2], "f()")
    assert str(err.value).startswith("f() is wrong\n  expected: [1, 2]"), str(err.value)
