"""What crosses between the judge and a contestant: framed messages of plain values.

The judge (pytest with the graders, the references and the hidden tests) never runs a
submission's code; a contestant (:mod:`grading.contestant.main`, in the sandbox) loads the
notebook and answers calls. Everything between them is one kind of message:

    frame   = header length (4 bytes, big-endian) | buffers length (8 bytes) | header | buffers
    header  = one JSON object (UTF-8), at most HEADER_CAP bytes
    buffers = the raw bytes of every tensor and array the header names, back to back

A value is JSON's own ``null``, ``true``/``false``, an integer, a float (``NaN`` and
``Infinity`` included) or a string, each read back as exactly that Python type, or an
object ``{"t": kind, ...}``:

    list, tuple, set, dict (as pairs), namedtuple (fields and values)
    tensor (dtype, shape, device, a buffer), ndarray, npscalar (dtype, a buffer)
    dtype, device, size (torch.Size), slice, ellipsis
    handle (an object that stays in the contestant: its id, kind and name)
    fn (judge to contestant only: a library callable from :data:`ALLOWED_CALLABLES`)
    refused (contestant to judge: a value of a type that may not cross, named)

The judge decodes strictly: an unknown kind, a wrong field, a frame over its cap is a
:class:`WireError`, and what it builds are plain values of the types above, never an
object the submission chose. Every byte of a message's buffers is named by at most one
tensor or array: ranges that overlap, or that lie outside the buffers, are refused, so
what a message decodes to is never larger than the message (one 8 MiB buffer named by
450 tensors would otherwise be 3.6 GiB in the judge); a strided tensor's logical size,
which may exceed its bytes (an expanded head), is capped by :data:`LOGICAL_CAP`. The contestant
decodes what the judge sends leniently.
An exception crosses as :class:`RemoteError` (its type's name, its built-in bases,
the message, where in the notebook it was raised).
"""

from grading.wire.frames import (
                                 BUFFERS_CAP,
                                 HEADER_CAP,
                                 LOGICAL_CAP,
                                 MAX_DEPTH,
                                 MAX_ITEMS,
                                 MESSAGE_TEXT_CAP,
                                 SMALL,
                                 ChannelClosed,
                                 WireError,
                                 receive,
                                 send,
)
from grading.wire.records import (
                                 BUILTIN_ERRORS,
                                 EXIT_STATUSES,
                                 CellProblem,
                                 ExitRecord,
                                 LoadReport,
                                 RemoteError,
                                 SetupRecord,
                                 Spawn,
                                 cell_problems,
)
from grading.wire.values import (
                                 ALLOWED_CALLABLES,
                                 Decoder,
                                 Encoder,
                                 RefusedValue,
                                 callable_name,
                                 dtype_name,
                                 refused,
                                 resolve_callable,
                                 torch_dtype,
)

__all__ = ["ALLOWED_CALLABLES", "BUFFERS_CAP", "BUILTIN_ERRORS", "HEADER_CAP", "LOGICAL_CAP", "MAX_DEPTH", "MAX_ITEMS",
           "MESSAGE_TEXT_CAP", "SMALL", "EXIT_STATUSES", "CellProblem", "ChannelClosed", "Decoder", "Encoder",
           "ExitRecord", "LoadReport", "SetupRecord",
           "RefusedValue", "RemoteError", "Spawn", "WireError", "callable_name", "cell_problems", "dtype_name",
           "receive", "refused", "resolve_callable", "send", "torch_dtype"]
