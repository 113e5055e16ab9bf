"""Assertions whose failure messages a student can act on.

Every failure raises :class:`GradingFailure` (an ``AssertionError``) whose text is the
whole report: the call that was made, what was expected, what came back, and for
tensors the largest error and the first element that is out of tolerance.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import torch


class GradingFailure(AssertionError):
    """A wrong answer. Its message is shown to the student as it is.

    ``observed`` is what the student's code produced at the check that failed, in the
    compact form :mod:`grading.diagnosis` compares with the catalogue's known mistakes
    (``None`` where the message itself is the observation). ``finding`` is the kind of
    mistake the check recognised in the wrong value (a key of ``grading.alternatives.KINDS``),
    or ``None``."""

    def __init__(self, message: str = "", observed: dict | None = None, finding: str | None = None):
        super().__init__(message)
        self.observed = observed
        self.finding = finding


OBSERVED_SAMPLES = 16  # values of a wrong tensor kept for diagnosis, at fixed positions


def observed_tensor(got: torch.Tensor, call: str, *, atol: float, rtol: float, what: str) -> dict:
    """What a tensor check saw, small enough to store for every catalogue bug: the
    shape and the values at ``OBSERVED_SAMPLES`` evenly spaced flat positions (NaN as
    ``None``), with the check's tolerance, so two wrong answers can be compared later
    as the grader compared them with the right one."""
    flat = got.detach().to("cpu", torch.float64).reshape(-1)
    n = flat.numel()
    positions = sorted({round(i * (n - 1) / max(OBSERVED_SAMPLES - 1, 1))
                        for i in range(OBSERVED_SAMPLES)}) if n else []
    values = [None if v != v else v for v in (flat[i].item() for i in positions)]
    return {"kind": "close", "check": f"{call}: {what}", "shape": list(got.shape),
            "values": values, "atol": atol, "rtol": rtol}


DESCRIBE_CHARS = 60  # one argument's description; longer ones are cut between whole items


def _cut(items: list[str], opening: str, closing: str) -> str:
    """``opening + ", ".join(items) + closing``, keeping whole items: when too long, the
    first items that fit and then ``...`` (never half a name or half a number)."""
    kept: list[str] = []
    for item in items:
        if len(opening) + len(", ".join(kept + [item, "..."])) + len(closing) > DESCRIBE_CHARS and kept:
            return opening + ", ".join(kept + ["..."]) + closing
        kept.append(item)
    return opening + ", ".join(kept) + closing


def describe(value: Any) -> str:
    """Short description of an argument: tensors by shape and dtype, never by value;
    a dataclass by the fields that differ from their defaults; a long list by its
    length. What is cut is cut between whole items, never inside a name."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"tensor{tuple(value.shape)} {dtype}" + ("" if value.device.type == "cpu" else f" on {value.device}")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f for f in dataclasses.fields(value) if f.repr]
        shown = [f"{f.name}={describe(getattr(value, f.name))}" for f in fields
                 if f.default is dataclasses.MISSING or getattr(value, f.name) != f.default]
        return f"{type(value).__name__}({', '.join(shown)})"  # every field the caller set, whole
    if isinstance(value, (list, tuple)):
        if len(value) > 6:
            return f"{type(value).__name__} of {len(value)}"
        items = [describe(v) for v in value]
        if isinstance(value, tuple):
            return _cut(items, "(", ",)" if len(items) == 1 else ")")
        return _cut(items, "[", "]")
    if isinstance(value, dict):
        return _cut([f"{k!r}: {describe(v)}" for k, v in value.items()], "{", "}")
    if callable(value) and hasattr(value, "__name__"):  # torch.exp2, not "<built-in method ...>"
        module = "torch" if getattr(torch, value.__name__, None) is value else getattr(value, "__module__", None)
        return f"{module}.{value.__name__}" if module else value.__name__
    text = repr(value)
    if len(text) <= DESCRIBE_CHARS:
        return text
    if isinstance(value, str):  # cut between words
        return repr(value[: value.rfind(" ", 0, DESCRIBE_CHARS - 8)] + " ...")
    return f"<{type(value).__name__}>"  # an object whose repr does not fit: its type, never half of it


def args_text(*args, **kwargs) -> str:
    """``tensor(5, 16) float32, bits=4``: the arguments of a call as :func:`call_text` writes them."""
    return ", ".join([describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()])


def call_text(name: str, *args, **kwargs) -> str:
    """``name(arg, ..., key=value)``. Every argument is kept, each described whole
    (:func:`describe`): the argument a test varies is never the one cut away."""
    return f"{name}({args_text(*args, **kwargs)})"


def chunks_text(sizes) -> str:
    """A stream of chunk lengths as a test id writes it: ``[1] * 23``, ``[3, 6, 1]``, or
    ``37 chunks, 91 tokens: [1, 2, 3, 4, ...]``, always with the whole stream's length."""
    sizes = list(sizes)
    if len(sizes) > 1 and len(set(sizes)) == 1:
        return f"[{sizes[0]}] * {len(sizes)}"
    if len(sizes) <= 8:
        return str(sizes)
    return f"{len(sizes)} chunks, {sum(sizes)} tokens: [{', '.join(map(str, sizes[:4]))}, ...]"


def _pair(expected: float, got: float) -> tuple[str, str]:
    """Expected and got with enough significant digits to tell them apart (6 at least)."""
    for digits in range(6, 18):
        e, g = f"{expected:.{digits}g}", f"{got:.{digits}g}"
        if e != g:
            return e, g
    return f"{expected!r}", f"{got!r}"


def _kind(value: Any) -> str:
    """A value's exact type as a student reads it: ``int``, ``float``, ``numpy.float16``."""
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _equal(got: Any, expected: Any) -> bool:
    """``got == expected`` as a plain truth: False where it raises, or where it answers with
    something that is not a bool (an array compared with a number answers with an array)."""
    try:
        with np.errstate(all="ignore"):  # np.float16 against an int past its range: a cast to inf
            same = got == expected
    except Exception:
        return False
    return bool(same) if isinstance(same, (bool, np.bool_)) else False


def _scalar_fits(got: Any, expected: Any) -> bool:
    """Whether ``got``'s exact type may stand for ``expected``'s: a Python ``bool``, ``int``
    or ``str`` only for itself (no subclass, no NumPy scalar: ``np.float16("inf") == 65520``
    is true), a Python ``int`` also for a ``float``, a NumPy scalar only for a NumPy
    scalar of the same type, anything else only for its own type."""
    if type(expected) is float:
        return type(got) in (float, int)
    return type(got) is type(expected)


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _expected_kind(expected: Any) -> str:
    if type(expected).__module__ == "builtins":
        return f"a Python {_kind(expected)} ({expected!r})"
    return f"{_a(_kind(expected))} ({expected!r})"


def _difference(got: Any, expected: Any, at: str = "") -> tuple[bool, str] | None:
    """None when ``got`` equals ``expected`` and is of its kind at every level (the
    containers' items and keys included); else ``(wrong_value, text)``: whether the values
    differ (the whole values are then shown), or the values agree but ``got`` (at ``at``)
    is of a type the exercise does not return (``text`` says which)."""
    if isinstance(expected, np.ndarray):
        if type(got) is not np.ndarray:
            return False, f"returned {_a(_kind(got))}{at}; expected a numpy array"
        if got.shape != expected.shape:
            return True, ""
        if got.dtype != expected.dtype:
            return False, f"returned a numpy array of dtype {got.dtype}{at}; expected dtype {expected.dtype}"
        return None if np.array_equal(got, expected, equal_nan=expected.dtype.kind in "fc") else (True, "")
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, list if isinstance(expected, list) else tuple) or len(got) != len(expected):
            return True, ""
        pairs = [(g, e, f"{at or ' in item '}[{i}]") for i, (g, e) in enumerate(zip(got, expected))]
    elif isinstance(expected, dict):
        if not isinstance(got, dict) or not _equal(got.keys(), expected.keys()):
            return True, ""
        own = {k: k for k in got}  # the key of got that equals each expected key, to check its type
        pairs = [(own[k], k, f"{at} in the keys") for k in expected]
        pairs += [(got[k], v, f"{at or ' in item '}[{k!r}]") for k, v in expected.items()]
    elif isinstance(expected, (set, frozenset)):
        if not isinstance(got, (set, frozenset)) or not _equal(set(got), set(expected)):
            return True, ""
        own = {e: e for e in expected}  # the expected item each of got's items equals
        pairs = [(g, own[g], f"{at} in the set") for g in got]
    else:
        if not _equal(got, expected):
            return True, ""
        if _scalar_fits(got, expected):
            return None
        if type(got) is float and type(expected) is int:
            return False, f"returned the float {got!r}{at}; expected the int {expected!r}"
        return False, (f"returned {_a(_kind(got))} ({got!r}){at}; expected {_expected_kind(expected)}. "
                       "Return the plain Python value (int(x), float(x), bool(x)), not a NumPy or torch scalar")
    first_type = None  # a wrong value anywhere is reported before a wrong type
    for g, e, where in pairs:
        d = _difference(g, e, where)
        if d is not None and d[0]:
            return d
        first_type = first_type or d
    return first_type


def assert_equal(got: Any, expected: Any, call: str) -> None:
    """Exact comparison for integers, floats, strings, booleans, NumPy values and
    containers of them: equal values, and at every level a value of the type the exercise
    returns. An expected ``int`` (or ``bool``, ``str``) accepts only a value of exactly
    that Python type: not a ``bool`` for an ``int``, not an ``int`` subclass, not a NumPy
    scalar (``np.float16("inf")`` equals every int from 65520 up); an expected ``float``
    accepts a Python ``float`` or ``int``; a NumPy scalar or array is accepted only where
    the expected value is one (same type; an array of the same shape and dtype). An
    integer count returned as a float (``4.0`` for ``4``) is reported, because float
    arithmetic on token counts is a real bug past 2**53."""
    difference = _difference(got, expected)
    if difference is None:
        return
    wrong_value, text = difference
    if wrong_value:
        raise GradingFailure(f"{call} is wrong\n  expected: {expected!r}\n  got:      {got!r}")
    raise GradingFailure(f"{call} {text}")


def assert_trace(got: Any, expected: list, call: str, *, unit: str = "step",
                 state: Callable[[int], str] | None = None, show: Callable[[Any], str] = repr) -> None:
    """Compare a trace, item ``i`` the outcome of ``unit`` ``i`` (a step, an event), with
    the expected one, and on a difference say where the answer first departs from it:
    that ``unit``, the ``state`` before it (``state(i)``, a line the grader writes from
    the reference, such as who is running and how many pages are free), and that item
    expected and got (``show``), instead of two whole traces. ``got`` of another length
    departs where the shorter one ends; ``got`` that is not a list is compared whole.
    Each item is compared as :func:`assert_equal` compares (values and types)."""
    if not isinstance(got, list):
        assert_equal(got, expected, call)
        return
    for i, (g, e) in enumerate(zip(got, expected)):
        difference = _difference(g, e)
        if difference is None:
            continue
        wrong_value, text = difference
        where = f"{call} departs from the expected trace at {unit} {i} (of {len(expected)})"
        before = f"\n  before it: {state(i)}" if state is not None else ""
        if not wrong_value:
            raise GradingFailure(f"{where}: {unit} {i} {text}{before}")
        raise GradingFailure(f"{where}{before}\n  expected: {show(e)}\n  got:      {show(g)}")
    if len(got) != len(expected):
        i = min(len(got), len(expected))
        before = f"\n  before it: {state(i)}" if state is not None and i < len(expected) else ""
        more = f"expected {unit} {i}: {show(expected[i])}" if i < len(expected) else f"got {unit} {i}: {show(got[i])}"
        raise GradingFailure(f"{call} departs from the expected trace at {unit} {i}: it has {len(got)} {unit}s, "
                             f"expected {len(expected)}{before}\n  {more}")


def _as_tensor(value: Any, call: str, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (int, float)):
        return torch.tensor(value, dtype=torch.float64)
    raise GradingFailure(f"{call} returned {type(value).__name__} for {what}; expected a torch.Tensor")


def assert_close(
    got: Any,
    expected: Any,
    call: str,
    *,
    atol: float,
    rtol: float = 0.0,
    dtype: torch.dtype | None = None,
    what: str = "the result",
    alternatives=(),
) -> None:
    """``|got - expected| <= atol + rtol * |expected|`` elementwise, in fp64.

    Checks type, device, shape and (if given) dtype first, because those are the
    mistakes that otherwise surface as a confusing broadcast or a NaN. ``alternatives``
    (``grading.alternatives.Alternative``) are the expected values under wrong readings of
    the statement: a wrong value within the same tolerance of one is recognised as that
    kind of mistake."""
    try:
        _assert_close(got, expected, call, atol=atol, rtol=rtol, dtype=dtype, what=what)
    except GradingFailure as exc:
        if alternatives and exc.observed is not None:  # a wrong value, not a wrong type, shape or dtype
            from grading.alternatives import recognise

            exc.finding = recognise(got, alternatives, lambda g, e: _within(g, e, atol, rtol))
        raise
    if alternatives:
        from grading.alternatives import record_alternatives

        record_alternatives(alternatives)


def _within(got: torch.Tensor, expected: Any, atol: float, rtol: float) -> bool:
    """Whether ``got`` passes the check :func:`assert_close` makes against ``expected``."""
    if not isinstance(expected, torch.Tensor) or tuple(got.shape) != tuple(expected.shape):
        return False
    g, e = got.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)
    err = (g - e).abs()
    same = (torch.isnan(g) & torch.isnan(e)) | (torch.isinf(e) & (g == e))
    return bool(((err <= atol + rtol * e.abs()) | same).all())


def _assert_close(got: Any, expected: Any, call: str, *, atol: float, rtol: float, dtype: torch.dtype | None,
                  what: str) -> None:
    got_t = _as_tensor(got, call, what)
    exp_t = _as_tensor(expected, call, what)
    if got_t.device.type != "cpu" and exp_t.device.type == "cpu":
        raise GradingFailure(f"{call}: {what} is on {got_t.device}; expected a CPU tensor")
    if tuple(got_t.shape) != tuple(exp_t.shape):
        raise GradingFailure(f"{call}: {what} has shape {tuple(got_t.shape)}; expected {tuple(exp_t.shape)}")
    if dtype is not None and got_t.dtype != dtype:
        raise GradingFailure(f"{call}: {what} has dtype {got_t.dtype}; expected {dtype}")
    g = got_t.detach().to("cpu", torch.float64)
    e = exp_t.detach().to("cpu", torch.float64)
    nan_got, nan_exp = torch.isnan(g), torch.isnan(e)
    if (nan_got & ~nan_exp).any():
        idx = tuple(int(i) for i in (nan_got & ~nan_exp).nonzero()[0])
        count = int((nan_got & ~nan_exp).sum())
        raise GradingFailure(f"{call}: {what} has {count} NaN value(s); first at index {idx} (expected "
                             f"{e[idx].item():.6g})",
                             observed_tensor(g, call, atol=atol, rtol=rtol, what=what))
    err = (g - e).abs()
    err = torch.where(nan_exp & nan_got, torch.zeros_like(err), err)
    err = torch.where(torch.isinf(e) & (g == e), torch.zeros_like(err), err)
    bound = atol + rtol * e.abs()
    bad = ~(err <= bound)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0]) if g.dim() else ()
        max_err = err.max().item()
        want, have = _pair(e[idx].item(), g[idx].item())
        raise GradingFailure(
            f"{call}: {what} is wrong\n"
            f"  max abs error {max_err:.3g} (tolerance atol={atol:g}, rtol={rtol:g}); "
            f"{int(bad.sum())} of {bad.numel()} elements out of tolerance\n"
            f"  first at index {idx}: expected {want}, got {have} (off by {err[idx].item():.3g})",
            observed_tensor(g, call, atol=atol, rtol=rtol, what=what),
        )


def derived_atol(dtype: torch.dtype, expected: torch.Tensor, correct: Callable[[], torch.Tensor],
                 factor: float) -> float:
    """A low-precision tolerance from the error of a correct implementation on the same
    inputs: ``factor * max|correct() - expected| + eps(dtype) / 16`` (the eps term for a
    case where that error is 0). ``correct`` is called only here, so a grader that does not
    need the tolerance never computes it."""
    error = (correct().double() - expected.double()).abs().max().item() if expected.numel() else 0.0
    return factor * error + torch.finfo(dtype).eps / 16


def relative_rms_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """``||got - expected||_2 / ||expected||_2`` in fp64 (0 when both are zero)."""
    g, e = got.detach().double(), expected.detach().double()
    denom = e.norm().item()
    num = (g - e).norm().item()
    return num / denom if denom > 0 else num


def assert_raises(
    fn: Callable,
    *args,
    exc: type[BaseException] | tuple[type[BaseException], ...] = (ValueError, TypeError),
    names: str | None = None,
    call: str | None = None,
    **kwargs,
) -> None:
    """Calling ``fn(*args, **kwargs)`` must raise ``exc``; if ``names`` is given the
    message must mention that argument, so the user knows what to fix."""
    call = call or call_text(getattr(fn, "__name__", "function"), *args, **kwargs)
    expected = exc if isinstance(exc, tuple) else (exc,)
    wanted = " or ".join(e.__name__ for e in expected)
    try:
        result = fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except expected as err:
        if names and names not in str(err):
            raise GradingFailure(f"{call} raised {type(err).__name__}({str(err)!r}); the message should name "
                                 f"`{names}`") from None
        return
    except Exception as err:
        raise GradingFailure(f"{call} raised {type(err).__name__}: {err}; expected {wanted}") from None
    raise GradingFailure(f"{call} returned {describe(result)}; expected it to raise {wanted}")

