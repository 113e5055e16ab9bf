"""Frames: one JSON header and the raw bytes it names, with the caps a judge reads them under."""

from __future__ import annotations

import json
import re
import socket
import struct
import weakref

HEADER_CAP = 4 * 2**20  # bytes of one message's JSON: values, names, messages
BUFFERS_CAP = 1024 * 2**20  # bytes of one message's tensors and arrays
# Bytes that the tensors of one message may span once built: a strided view (stride 0,
# an expanded head) spans more elements than it sends, and a grader's comparison makes
# full-size tensors of it.
LOGICAL_CAP = BUFFERS_CAP
MESSAGE_TEXT_CAP = 16 * 1024  # characters of an exception message the judge keeps
MAX_DEPTH = 32  # nesting of containers in one value
# Nesting of arrays and objects in one message's JSON, checked before it is parsed: a
# value's container is two levels (``{"t": "list", "v": [...]}``), a dict's entry three
# (``"v": [[key, value], ...]``), and a message wraps its values in a few more (a call's
# changed arguments, a launch record's outputs). A frame nested 100,000 deep would
# otherwise reach the parser's recursion limit instead of this cap.
HEADER_DEPTH = 3 * (MAX_DEPTH + 1) + 12
MAX_ITEMS = 1_000_000  # entries of all containers in one value
_PREFIX = struct.Struct(">IQ")


class WireError(Exception):
    """A message that is not what the protocol allows: too large, not JSON, the wrong
    shape. The judge treats its sender as broken (it may be hostile) and stops it."""


class ChannelClosed(WireError):
    """The other end closed the channel (the contestant exited or was killed)."""


# -- frames ------------------------------------------------------------------------------------
SMALL = 64 * 1024  # a message this small goes out in one write and comes in with one read


def send(sock: socket.socket, header: dict, buffers: list[bytes] = ()) -> None:
    data = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    total = sum(len(b) for b in buffers)
    frame = _PREFIX.pack(len(data), total) + data
    if total + len(frame) <= SMALL:  # one system call: a call's round trip is most of its cost
        sock.sendall(b"".join([frame, *buffers]))
        return
    sock.sendall(frame)
    for b in buffers:
        sock.sendall(b)


_pending: "weakref.WeakKeyDictionary[socket.socket, bytearray]" = weakref.WeakKeyDictionary()


def _read_exact(sock: socket.socket, n: int) -> bytes | bytearray:
    """``n`` bytes: from what an earlier read brought in beyond its message, then from the
    socket, asking for at least SMALL at a time so a small message takes one read. A large
    message is read into one buffer of its size, so that the judge holds it once, not twice."""
    pending = _pending.setdefault(sock, bytearray())
    if n > SMALL and len(pending) < n:
        out = bytearray(n)
        view = memoryview(out)
        filled = len(pending)
        view[:filled] = pending
        del pending[:]
        while filled < n:
            got = sock.recv_into(view[filled:], min(n - filled, 1 << 20))
            if not got:
                raise ChannelClosed("the channel closed")
            filled += got
        return out
    while len(pending) < n:
        chunk = sock.recv(max(SMALL, min(n - len(pending), 1 << 20)))
        if not chunk:
            raise ChannelClosed("the channel closed")
        pending += chunk
    out = bytes(pending[:n])
    del pending[:n]
    return out


def receive(sock: socket.socket, header_cap: int = HEADER_CAP, buffers_cap: int = BUFFERS_CAP) -> tuple[dict, bytes]:
    """One message: ``(header, buffers)``. A frame over a cap is refused before it is
    read (:class:`WireError` says how large it claimed to be)."""
    n_header, n_buffers = _PREFIX.unpack(_read_exact(sock, _PREFIX.size))
    if n_header > header_cap:
        raise WireError(f"a message of {n_header} bytes, over the {header_cap} byte cap")
    if n_buffers > buffers_cap:
        raise WireError(f"a message with {n_buffers} bytes of tensors, over the {buffers_cap} byte cap")
    raw = _read_exact(sock, n_header)
    buffers = _read_exact(sock, n_buffers) if n_buffers else b""
    depth = json_depth(raw)
    if depth > HEADER_DEPTH:
        raise WireError(f"a message nested {depth} deep, over the {HEADER_DEPTH} levels a message may have")
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise WireError(f"a message that is not JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(header, dict):
        raise WireError("a message that is not a JSON object")
    return header, buffers


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # a JSON string, escapes and all


def json_depth(raw: bytes | bytearray) -> int:
    """How deep the arrays and objects of the JSON text ``raw`` nest, counted without
    parsing it (brackets inside strings do not count), or, when even the number of its
    opening brackets is under :data:`HEADER_DEPTH`, that number (a bound, and all a caller
    needs). Linear in ``len(raw)``; text that is not JSON gets some count, and the parser
    refuses it after."""
    opened = raw.count(b"[") + raw.count(b"{")
    if opened <= HEADER_DEPTH:
        return opened  # an upper bound, and under the cap: nothing more to count
    bare = _STRING.sub(b'""', raw)
    import numpy as np

    symbols = np.frombuffer(bare, dtype=np.uint8)
    step = np.zeros(len(symbols), dtype=np.int64)
    step[(symbols == ord("[")) | (symbols == ord("{"))] = 1
    step[(symbols == ord("]")) | (symbols == ord("}"))] = -1
    return int(step.cumsum().max(initial=0))


# -- errors ------------------------------------------------------------------------------------
