"""Expected values as the student edition stores them: encoded beside their arrays, keyed
by their arguments, and matched on the reader's CPU (:mod:`grading.judge.replay`)."""

from __future__ import annotations

import hashlib
import json
import math
import types

import numpy as np

# A float input may differ in its last bits on another CPU (MKL's kernels), never by
# more than a few units of its dtype's precision relative to its size: distinct cases
# (other seeds, shapes or scales) differ at order one, so the match is unambiguous.
ULPS = 8
FLOAT_EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
PY_FLOAT_RTOL = 1e-9

# -- values: encoded as JSON with arrays beside it -------------------------------------------

def _torch():
    import torch

    return torch


# Tensor dtypes numpy cannot hold (Chapter 3's FP8 codes, bf16): stored as their bits, in an
# int of the same width.
BITS_ONLY = {"bfloat16": "int16", "float8_e4m3fn": "uint8", "float8_e4m3fnuz": "uint8",
             "float8_e5m2": "uint8", "float8_e5m2fnuz": "uint8"}


def encode(value, arrays: list[np.ndarray]):
    """``value`` as JSON, its tensors appended to ``arrays`` (referred to by index)."""
    torch = _torch()
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else {"int": str(value)}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return {type(value).__name__: [encode(v, arrays) for v in value]}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple: its fields, as a tuple
        return {"tuple": [encode(v, arrays) for v in value]}
    if isinstance(value, torch.Size):
        return {"size": list(value)}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted((encode(v, arrays) for v in value), key=json.dumps)}
    if isinstance(value, dict):
        return {"dict": [[encode(k, arrays), encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype in BITS_ONLY:  # numpy has no such dtype: keep the bits, in an int of the same width
            t = t.view(getattr(torch, BITS_ONLY[dtype]))
        arrays.append(t.numpy().copy())
        return {"tensor": len(arrays) - 1, "dtype": dtype}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError("an object array")
        arrays.append(np.ascontiguousarray(value))
        return {"ndarray": len(arrays) - 1}
    if isinstance(value, np.generic):
        return {"npscalar": encode(value.item(), arrays), "dtype": str(value.dtype)}
    raise TypeError(f"cannot record a {type(value).__qualname__}")


def decode(value, arrays):
    torch = _torch()
    if not isinstance(value, dict):
        return value
    (kind, body), *rest = value.items()
    if kind == "int":
        return int(body)
    if kind == "float":
        return float(body)
    if kind == "list":
        return [decode(v, arrays) for v in body]
    if kind == "tuple":
        return tuple(decode(v, arrays) for v in body)
    if kind == "size":
        return torch.Size(body)
    if kind == "set":
        return {decode(v, arrays) for v in body}
    if kind == "dict":
        return {decode(k, arrays): decode(v, arrays) for k, v in body}
    if kind == "dtype":
        return getattr(torch, body)
    if kind == "tensor":
        t = torch.from_numpy(np.array(arrays[body]))
        return t.view(getattr(torch, value["dtype"])) if value["dtype"] in BITS_ONLY else t
    if kind == "ndarray":
        return np.array(arrays[body])
    if kind == "npscalar":
        return np.dtype(value["dtype"]).type(decode(body, arrays))
    raise ValueError(f"unknown record {kind!r}")


# -- arguments: an exact key and a fingerprint of the floats ---------------------------------

def _weights(n: int) -> np.ndarray:
    return np.cos(np.arange(n, dtype=np.float64) * 0.7548776662466927)  # fixed, irregular


def describe(value, floats: list) -> object:
    """The exact part of an argument's key (JSON); its float fingerprints go to ``floats``
    as ``[eps, scale, values...]``."""
    torch = _torch()
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else {"int": str(value)}
    if isinstance(value, float):
        if math.isfinite(value):
            floats.append([PY_FLOAT_RTOL, abs(value), value])
            return "float"
        return {"float": repr(value)}
    if isinstance(value, torch.Size):
        return {"size": list(value)}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [describe(v, floats) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[describe(k, floats), describe(v, floats)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted(json.dumps(describe(v, [])) for v in value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value)}
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        head = {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
        if not t.is_floating_point():
            head["digest"] = hashlib.sha1(t.contiguous().view(-1).to(torch.int64).numpy().tobytes()).hexdigest()[:16]
            return head
        x = t.to(torch.float64).reshape(-1).numpy()
        finite = np.isfinite(x)
        head["nonfinite"] = hashlib.sha1(np.where(finite, 0.0, x).tobytes()).hexdigest()[:16]
        x = np.where(finite, x, 0.0)
        if x.size:
            scale = float(np.abs(x).sum())
            w = _weights(x.size)
            fp = [float(x.sum()), scale, float((x * w).sum()), float((x * w[::-1]).sum()), float(x[0]), float(x[-1])]
            eps = ULPS * FLOAT_EPS.get(head["dtype"], 2.0**-23)
            floats.append([eps, scale, *fp[:4]])
            floats.append([eps, max(abs(fp[4]), abs(fp[5])), fp[4], fp[5]])
        return head
    if isinstance(value, types.FunctionType) or callable(value):
        return {"callable": getattr(value, "__qualname__", type(value).__qualname__)}
    if hasattr(value, "__dict__"):  # a plain record (a dataclass): its fields
        return {"object": type(value).__qualname__, "fields": describe(dict(vars(value)), floats)}
    raise TypeError(f"cannot key a {type(value).__qualname__}")


def call_key(args, kwargs) -> tuple[str, list]:
    floats: list = []
    exact = describe([list(args), sorted(kwargs.items())], floats)
    return json.dumps(exact, sort_keys=True), floats


def floats_match(recorded: list, got: list, rtol: float | None = None) -> bool:
    if len(recorded) != len(got):
        return False
    for (_, scale_a, *a), (eps, scale_b, *b) in zip(recorded, got):  # the tolerance of this lookup
        if len(a) != len(b):
            return False
        tol = (eps if rtol is None else max(eps, rtol)) * max(scale_a, scale_b)
        if any(abs(x - y) > tol for x, y in zip(a, b)):
            return False
    return True


# -- the calls into another exercise that the judge answers: an exact key ---------------------

def _canonical(value):
    """``value`` with every tensor made contiguous, so that a key says what the values are,
    not how the sender laid them out in memory; containers keep their exact types."""
    torch = _torch()
    if type(value) in (torch.Tensor, torch.nn.Parameter):
        return value.detach().contiguous()
    if type(value) in (list, tuple):
        return type(value)(_canonical(v) for v in value)
    if type(value) is dict:
        return {k: _canonical(v) for k, v in value.items()}
    return value


def ask_key(name: str, args, kwargs) -> str:
    """The exact key of a call of another exercise's ``name`` on ``args`` and ``kwargs``
    (plain values, as the wire decodes them): a SHA-256 of their wire encoding, so two calls
    have one key exactly when every type is the same and every tensor is bit-equal (its
    dtype, shape and bytes). No tolerance: a key is a permission, never a lookup of a value.

    Raises ``grading.wire.WireError`` for a value the wire cannot carry."""
    from grading import wire

    def library_callable(value):  # torch.exp passed on (5.2's ``exp=``): its allowlisted name
        name = wire.callable_name(value)
        if name is None:
            raise wire.WireError(f"a {type(value).__qualname__} in a call of another exercise")
        return {"t": "fn", "v": name}

    encoder = wire.Encoder(handle=library_callable)
    node = encoder.encode([name, _canonical(list(args)), _canonical(dict(sorted(kwargs.items())))])
    digest = hashlib.sha256(json.dumps(node, sort_keys=True).encode())
    for buffer in encoder.buffers:
        digest.update(buffer)
    return digest.hexdigest()
