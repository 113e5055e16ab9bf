"""Values: the one schema of what a call's arguments and answers may be, encoded and decoded."""

from __future__ import annotations

import math

from grading.wire.frames import BUFFERS_CAP, LOGICAL_CAP, MAX_DEPTH, MAX_ITEMS, WireError

# -- values ------------------------------------------------------------------------------------
# Library callables a grader may pass as an argument (``exp=torch.exp2``): they go by name.
ALLOWED_CALLABLES = ("torch.exp", "torch.exp2", "torch.log", "torch.log2", "torch.softmax", "torch.relu",
                     "torch.sigmoid", "torch.tanh", "torch.sqrt", "torch.rsqrt", "math.exp", "math.log", "math.sqrt",
                     "torch.nn.functional.silu", "torch.nn.functional.softplus", "torch.nn.functional.gelu",
                     "torch.nn.functional.scaled_dot_product_attention", "torch.matmul", "torch.einsum")


def callable_name(fn) -> str | None:
    """The allowlisted name of a library callable, or None."""
    import importlib

    for name in ALLOWED_CALLABLES:
        module, _, attr = name.rpartition(".")
        try:
            if getattr(importlib.import_module(module), attr) is fn:
                return name
        except (ImportError, AttributeError):
            continue
    return None


def resolve_callable(name: str):
    import importlib

    if name not in ALLOWED_CALLABLES:
        raise WireError(f"the callable {name!r} is not one that may cross")
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str):
    import torch

    value = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(value, torch.dtype):
        raise WireError(f"{name!r} is not a torch dtype")
    return value


class Encoder:
    """Turns a value into its JSON node and the buffers it names. ``handle`` is called
    for an object that is not a plain value (the contestant's side: it keeps the object
    and returns a handle node; the judge's side: it raises, or sends a handle back)."""

    def __init__(self, handle=None):
        self.buffers: list[bytes] = []
        self.offset = 0
        self.handle = handle
        self.items = 0

    def buffer(self, data: bytes) -> list[int]:
        if self.offset + len(data) > BUFFERS_CAP:
            raise WireError(f"a value with more than {BUFFERS_CAP // 2**20} MiB of tensors and arrays, over the "
                            "cap of one message")
        start = self.offset
        self.buffers.append(data)
        self.offset += len(data)
        return [start, len(data)]

    def encode(self, value, depth: int = 0):
        import numpy as np
        import torch

        self.items += 1
        if depth > MAX_DEPTH or self.items > MAX_ITEMS:
            raise WireError(f"a value nested deeper than {MAX_DEPTH} or with more than {MAX_ITEMS} entries")
        kind = type(value)
        if value is None or kind in (bool, str):
            return value
        if kind is int:
            return value if abs(value) < 2**63 else {"t": "bigint", "v": str(value)}
        if kind is float:
            return value if math.isfinite(value) else {"t": "float", "v": repr(value)}
        if kind in (list, tuple, set, frozenset):
            tag = {list: "list", tuple: "tuple", set: "set", frozenset: "set"}[kind]
            return {"t": tag, "v": [self.encode(v, depth + 1) for v in value]}
        if kind is dict:
            return {"t": "dict",
                    "v": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()]}
        if kind in (torch.Tensor, torch.nn.Parameter):
            return self.tensor(value)
        if kind is torch.Size:
            return {"t": "size", "v": [int(v) for v in value]}
        if kind is torch.dtype:
            return {"t": "dtype", "v": dtype_name(value)}
        if kind is torch.device:
            return {"t": "device", "v": str(value)}
        if kind is slice:
            return {"t": "slice", "v": [self.encode(value.start, depth + 1), self.encode(value.stop, depth + 1),
                                        self.encode(value.step, depth + 1)]}
        if value is Ellipsis:
            return {"t": "ellipsis"}
        if kind is np.ndarray and value.dtype != object:
            data = np.ascontiguousarray(value)
            return {"t": "ndarray", "dtype": data.dtype.str, "shape": list(data.shape),
                    "buf": self.buffer(data.tobytes())}
        if isinstance(value, np.generic) and kind.__module__ == "numpy" and value.dtype != object:
            return {"t": "npscalar", "dtype": value.dtype.str, "buf": self.buffer(value.tobytes())}
        if isinstance(value, tuple) and hasattr(kind, "_fields") and kind.__module__ in ("torch.return_types",):
            return {"t": "tuple", "v": [self.encode(v, depth + 1) for v in value]}
        if isinstance(value, tuple) and hasattr(kind, "_fields"):
            fields = list(kind._fields)
            if all(isinstance(f, str) and f.isidentifier() for f in fields):
                return {"t": "namedtuple", "name": kind.__name__[:100], "fields": fields,
                        "v": [self.encode(v, depth + 1) for v in value]}
        if self.handle is not None:
            return self.handle(value)
        raise WireError(f"a {kind.__module__}.{kind.__qualname__} cannot be sent to the notebook")

    def tensor(self, t):
        import torch

        device = str(t.device)
        if t.device.type == "meta":
            raise WireError("a meta tensor has no values to send")
        data = t.detach().to("cpu")
        if data.is_quantized or data.is_sparse:
            raise WireError("a quantized or sparse tensor cannot cross")
        node = {"t": "tensor", "dtype": dtype_name(data.dtype), "shape": list(data.shape), "device": device,
                "requires_grad": bool(t.requires_grad)}
        if data.numel() and not data.is_contiguous():
            # A strided view (a transposed layout, an expanded head) crosses as itself: the
            # elements it spans, and its strides over them, so a kernel sees the same layout.
            span = 1 + sum((n - 1) * s for n, s in zip(data.shape, data.stride()))
            flat = data.as_strided((span,), (1,), data.storage_offset()).contiguous()
            node["stride"] = list(data.stride())
            data = flat
        flat = data.reshape(-1)
        if flat.numel() and flat.stride(0) != 1:
            # A tensor whose only long dimensions have size 1 counts as contiguous with any
            # stride (x.nonzero()[0]): bytes are read from a dense copy.
            flat = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)
        # A view of the tensor's own bytes, not a copy: a message is sent before its encoder
        # is dropped, and a copy of every tensor a call crosses with is memory the judge would
        # count against the notebook (grading.judge.measure).
        raw = memoryview(flat.view(torch.uint8).numpy()) if data.numel() else b""
        node["buf"] = self.buffer(raw)
        return node


def refused(value, why: str) -> dict:
    """The node for a value that may not cross: the judge raises with ``why``."""
    kind = type(value)
    return {"t": "refused", "type": f"{kind.__module__}.{kind.__qualname__}"[:200], "why": why[:500]}


class Decoder:
    """Builds plain values from a node and its buffers. ``handle(node)`` builds the
    judge's stand-in for a contestant's object (or, in the contestant, finds the object);
    ``strict`` (the judge) refuses anything off the schema."""

    def __init__(self, buffers: bytes, handle=None, strict: bool = True, place=None):
        self.data = memoryview(buffers)
        self.handle = handle
        self.strict = strict
        self.items = 0
        self.place = place  # device for tensors (the contestant: where the judge's tensors were)
        # The byte ranges named so far, as sorted starts and their ends: one decoder may
        # decode several nodes of one message (a call's value and its changed arguments),
        # and no byte may be named twice among all of them.
        self._starts: list[int] = []
        self._ends: list[int] = []
        self.named = 0  # bytes named so far
        self.logical = 0  # bytes the tensors built so far span

    def _buf(self, node) -> memoryview:
        """The bytes ``node["buf"]`` names, once: a range outside the message, or one that
        overlaps a range named before, is a :class:`WireError`."""
        import bisect

        buf = node.get("buf")
        if not (isinstance(buf, list) and len(buf) == 2 and all(type(b) is int and b >= 0 for b in buf)):
            raise WireError("a tensor whose buffer is not a range of the message")
        start, length = buf
        end = start + length
        if end > len(self.data):
            raise WireError(f"a tensor whose buffer (bytes {start} to {end}) lies outside the message's "
                            f"{len(self.data)} bytes")
        if length:
            i = bisect.bisect_right(self._starts, start)
            if (i > 0 and self._ends[i - 1] > start) or (i < len(self._starts) and self._starts[i] < end):
                raise WireError(f"tensors whose buffers overlap (bytes {start} to {end} are named twice): a "
                                "message names each byte once")
            self._starts.insert(i, start)
            self._ends.insert(i, end)
            self.named += length
            if self.named > len(self.data):  # cannot happen with disjoint ranges inside it; said plainly if it did
                raise WireError(f"tensors whose buffers total {self.named} bytes, more than the message's "
                                f"{len(self.data)}")
        return self.data[start:end]

    def decode(self, node, depth: int = 0):
        """The value ``node`` (with its tensors' bytes from the buffers) stands for. Raises
        :class:`RefusedValue` for a value the sender refused to send, MemoryError, and
        :class:`WireError` for anything else that goes wrong: any error decoding a message
        means its sender broke the protocol, never that the value was wrong."""
        try:
            return self._decode(node, depth)
        except (WireError, RefusedValue, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - an int of 5,000 digits, a dtype torch refuses, ...
            raise WireError(f"a value that cannot be decoded ({type(exc).__name__}: {str(exc)[:200]})") from None

    def _decode(self, node, depth: int):
        self.items += 1
        if depth > MAX_DEPTH or self.items > MAX_ITEMS:
            raise WireError(f"a value nested deeper than {MAX_DEPTH} or with more than {MAX_ITEMS} entries")
        if node is None or type(node) in (bool, int, float, str):
            return node
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise WireError(f"a value of no known kind ({type(node).__name__})")
        build = _BUILDERS.get(node["t"])
        if build is None:
            raise WireError(f"a value of the unknown kind {node['t']!r}")
        return build(self, node, depth)

    # -- one builder per kind of node: (self, node, depth) -> the value ----------------------
    def _sequence(self, node, depth: int):
        values = [self.decode(v, depth + 1) for v in self._items(node)]
        if node["t"] == "set":
            try:
                return set(values)
            except TypeError:
                raise WireError("a set of values that cannot be hashed") from None
        return values if node["t"] == "list" else tuple(values)

    def _dict(self, node, depth: int) -> dict:
        out = {}
        for pair in self._items(node):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise WireError("a dict entry that is not a pair")
            key = self.decode(pair[0], depth + 1)
            try:
                out[key] = self.decode(pair[1], depth + 1)
            except TypeError:
                raise WireError("a dict key that cannot be hashed") from None
        return out

    def _float(self, node, depth: int) -> float:
        text = self._text(node, 10)
        if text not in ("nan", "inf", "-inf"):
            raise WireError("a float that is not nan or infinite")
        return float(text)

    def _ndarray(self, node, depth: int):
        import numpy as np

        dtype = self._np_dtype(node)
        shape = self._shape(node)
        raw = self._buf(node)
        if len(raw) % dtype.itemsize or len(raw) // dtype.itemsize != math.prod(shape):
            raise WireError("an array whose bytes do not fill its shape")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    def _npscalar(self, node, depth: int):
        import numpy as np

        dtype = self._np_dtype(node)
        raw = self._buf(node)
        if len(raw) != dtype.itemsize:
            raise WireError("a numpy scalar of more than one value")
        return np.frombuffer(raw, dtype=dtype)[0]

    def _size(self, node, depth: int):
        import torch

        return torch.Size(self._ints(node))

    def _device(self, node, depth: int):
        import torch

        try:
            return torch.device(self._text(node, 50))
        except RuntimeError:
            raise WireError("a device torch does not know") from None

    def _slice(self, node, depth: int) -> slice:
        parts = self._items(node)
        if len(parts) != 3:
            raise WireError("a slice without start, stop and step")
        return slice(*(self.decode(p, depth + 1) for p in parts))

    def _handle(self, node, depth: int):
        if self.handle is None:  # a message that names no contestant's object may hold none
            raise WireError("a value of the unknown kind 'handle'")
        return self.handle(node)

    def _fn(self, node, depth: int):
        if self.strict:  # a library callable crosses from the judge to the contestant only
            raise WireError("a value of the unknown kind 'fn'")
        return resolve_callable(node.get("v"))

    def _refused(self, node, depth: int):
        raise RefusedValue(str(node.get("type", "?"))[:200], str(node.get("why", ""))[:500])

    def _items(self, node) -> list:
        items = node.get("v")
        if not isinstance(items, list):
            raise WireError("a container without its items")
        return items

    def _text(self, node, cap: int) -> str:
        v = node.get("v")
        if not isinstance(v, str) or len(v) > cap:
            raise WireError("a value whose text is missing or too long")
        return v

    def _ints(self, node) -> list[int]:
        v = node.get("v")
        if not (isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)):
            raise WireError("a size that is not a list of counts")
        return v

    def _shape(self, node) -> list[int]:
        shape = node.get("shape")
        if not (isinstance(shape, list) and len(shape) <= 64 and all(type(x) is int and x >= 0 for x in shape)):
            raise WireError("a shape that is not a list of counts")
        return shape

    def _np_dtype(self, node):
        import numpy as np

        try:
            dtype = np.dtype(node.get("dtype"))
        except TypeError:
            raise WireError("an array of no known dtype") from None
        if dtype.hasobject or dtype.kind in "OV":
            raise WireError("an array of Python objects cannot cross")
        return dtype

    def _tensor(self, node):
        import torch

        dtype = torch_dtype(node.get("dtype"))
        shape = self._shape(node)
        raw = self._buf(node)
        element = torch.empty((), dtype=dtype).element_size()
        stride = node.get("stride")
        if stride is None:
            count = math.prod(shape)
        elif (isinstance(stride, list) and len(stride) == len(shape) and all(type(x) is int and x >= 0 for x in stride)
              and math.prod(shape) > 0):
            count = 1 + sum((n - 1) * st for n, st in zip(shape, stride))
        else:
            raise WireError("a tensor whose strides do not fit its shape")
        if len(raw) != count * element:
            raise WireError("a tensor whose bytes do not fill its shape")
        self.logical += math.prod(shape) * element
        if self.logical > LOGICAL_CAP:
            raise WireError(f"tensors that span more than {LOGICAL_CAP // 2**20} MiB once built (a strided view "
                            "repeats its bytes)")
        if raw:
            flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)
            t = flat.reshape(shape) if stride is None else flat.as_strided(shape, stride)
        else:
            t = torch.empty(shape, dtype=dtype)
        device = node.get("device", "cpu")
        if not isinstance(device, str):
            raise WireError("a tensor whose device is not a name")
        target = self.place(device) if self.place else "cpu"
        if target != "cpu":
            t = t.to(target)
        if node.get("requires_grad") is True and t.is_floating_point() and not self.strict:
            t.requires_grad_(True)
        return t

    def _namedtuple(self, node, depth):
        import collections

        name, fields = node.get("name"), node.get("fields")
        if not (isinstance(name, str) and name.isidentifier() and isinstance(fields, list)
                and all(isinstance(f, str) and f.isidentifier() and not f.startswith("_") for f in fields)
                and len(set(fields)) == len(fields) and len(fields) <= 64):
            raise WireError("a namedtuple whose name or fields are not identifiers")
        values = [self.decode(v, depth + 1) for v in self._items(node)]
        if len(values) != len(fields):
            raise WireError("a namedtuple whose values do not match its fields")
        return collections.namedtuple(name, fields)(*values)

_BUILDERS = {  # what each node kind ``t`` is built by (Decoder._decode)
    "list": Decoder._sequence, "tuple": Decoder._sequence, "set": Decoder._sequence, "dict": Decoder._dict,
    "namedtuple": Decoder._namedtuple, "bigint": lambda self, node, depth: int(self._text(node, 5000)),
    "float": Decoder._float, "tensor": lambda self, node, depth: self._tensor(node), "ndarray": Decoder._ndarray,
    "npscalar": Decoder._npscalar, "size": Decoder._size, "dtype": lambda self, node, depth: torch_dtype(node.get("v")),
    "device": Decoder._device, "slice": Decoder._slice, "ellipsis": lambda self, node, depth: Ellipsis,
    "handle": Decoder._handle, "fn": Decoder._fn, "refused": Decoder._refused,
}



class RefusedValue(TypeError):
    """The notebook returned a value of a type that may not cross (an ``int`` subclass, a
    tensor subclass, an object of its own inside a container)."""

    def __init__(self, type_name: str, why: str):
        super().__init__(f"returned a {type_name}, which the grader does not accept: {why}")
        self.type_name, self.why = type_name, why
