"""Bounds-checked memory for Triton kernels run by the interpreter (``TRITON_INTERPRET=1``).

Under the interpreter a pointer is a plain 64-bit address and ``tl.load`` is a ``memcpy``
from it: a lane that a mask should have switched off reads whatever lies past the tensor
(another tensor, the allocator's bookkeeping, nothing mapped at all). A kernel that reads
past a tensor and then throws the values away produces the right answer on the CPU and a
crash or a wrong answer on a GPU. Inside :func:`bounds_checked`, every load, store and
atomic that a kernel launch performs is checked against the tensor its pointer came from:

    with bounds_checked():
        paged_decode_attention(q, k_pages, v_pages, tables, seq_lens)
    # OutOfBoundsAccess: load from `Block_tables` at element 20, past its end (20),
    #   in program (1, 0, 0) of paged_decode_kernel (6 of 16 active lanes out of bounds)

How the pointer's origin is known. When a launch starts, every tensor argument is given
a *fake* base address in a region of its own, ``2**40`` bytes wide (region ``i + 1`` for
the ``i``-th tensor argument), in place of its real ``data_ptr()``. The kernel's pointer
arithmetic (``+``, broadcasts, ``tl.where`` on pointers, block pointers) then runs on fake
addresses, so the high bits of any address a kernel computes still name the argument it
started from, and the rest is its byte offset from that argument's start. Each memory
operation decodes its addresses, checks every active lane (where the mask is true) against
``[0, span)`` of its argument, and hands the real addresses, ``data_ptr() + offset``, to
the interpreter. Lanes the mask switches off are not checked and not read (the
interpreter reads no masked-off lane). A lane outside its bounds is never read or written:
the operation raises :class:`OutOfBoundsAccess` before any memory is touched, so an
unmasked access can no longer crash the process either.

The span of an argument is the memory from its first element to its last:
``1 + sum((size_i - 1) * stride_i)`` elements (its ``numel()`` when contiguous, 0 when
empty). For a strided view (``pool[:, 0]`` of an interleaved K/V pool) the span includes
the gaps that belong to the other view, so a read into a gap is not caught: the check is
about memory past the ends of an argument, which is what a missing mask reads.

The first violation is recorded and raised again when the ``with`` block exits, even if
the student's code caught the exception or the interpreter wrapped it (it raises its own
``InterpreterError`` around any exception from a kernel).

Nothing here changes the values a correct kernel computes. A kernel that compares or
prints raw pointer values (never needed, and not portable) would see the fake addresses.
Only launches under the interpreter are checked; compiled launches are left alone.

Raises :class:`OutOfBoundsAccess` (a :class:`grading.compare.GradingFailure`, so the
student sees its message as it is) and ``RuntimeError`` when entered twice at once.

What the kernels wrote. The block yields its checker, which also keeps the name of every
launch and, for every store, the addresses its active lanes wrote and the bytes they
wrote there. :meth:`_Checker.evidence` then says, for each tensor a call returned, how
many of its elements hold the bytes a kernel's store last put there, and which kernels
those stores belong to: Chapter 7's graders require that a kernel computed the result
(``x + y`` in PyTorch is not a Triton kernel; grading.judge.triton_launch reads it in the judge).
This runs in the contestant, which the notebook's code shares, so it is evidence the
notebook could forge by patching this module; the judge's own check of the notebook's
text (grading.judge.triton_launch) does not depend on it.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field

import numpy as np

from grading.compare import GradingFailure

REGION_BITS = 40  # each tensor argument gets 1 TiB of fake address space
# Fake bases start in the middle of their region, so that offsets of up to +-512 GiB
# (far past any kernel's mistake) still decode to the right argument.
REGION_MIDDLE = 1 << (REGION_BITS - 1)
ALIGNMENT_KEPT = 1 << 12  # a fake base keeps the real address modulo 4096 (alignment asserts)
# Stored lanes recorded per block: far more than any graded case writes (the largest, 7.3's,
# writes a few thousand elements); past it, the evidence says it is incomplete.
RECORDED_LANES = 1 << 22
MAX_OUTPUTS = 8  # tensors of one returned value that are checked (7.3 returns two)


class OutOfBoundsAccess(GradingFailure):
    """A kernel's load, store or atomic reached outside the tensor its pointer came from."""


@dataclass
class _Argument:
    name: str  # the kernel's parameter name, with [i] for a member of a tuple argument
    real_base: int  # data_ptr() of the host tensor the interpreter runs on
    fake_base: int
    span_bytes: int
    element_size: int


@dataclass
class _Launch:
    kernel: str
    arguments: list[_Argument] = field(default_factory=list)
    by_id: dict[int, _Argument] = field(default_factory=dict)  # id(host tensor) -> its argument
    # The arguments' fake bases, spans and real bases as arrays, indexed by region - 1.
    fake_bases: np.ndarray | None = None
    spans: np.ndarray | None = None
    real_bases: np.ndarray | None = None

    def freeze(self) -> None:
        """Build the lookup arrays once per launch (every memory operation indexes them)."""
        self.fake_bases = np.array([a.fake_base for a in self.arguments], dtype=np.uint64)
        self.spans = np.array([a.span_bytes for a in self.arguments], dtype=np.int64)
        self.real_bases = np.array([a.real_base for a in self.arguments], dtype=np.uint64)


def _span_bytes(t) -> int:
    """Bytes from the first element of ``t`` to the end of its last (0 when empty)."""
    if t.numel() == 0:
        return 0
    return (1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))) * t.element_size()


class _Checker:
    """The state of one :func:`bounds_checked` block: the current launch, the first violation."""

    def __init__(self, interpreter):
        self.interpreter = interpreter
        self.launch: _Launch | None = None
        self.first: str | None = None
        self.launches: list[str] = []  # the kernel of every launch, in order
        # Every store: (launch index, real addresses of its active lanes, their bytes (lanes, width)).
        self.stores: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.recorded = 0
        self.complete = True  # False once more than RECORDED_LANES lanes were stored

    # -- the launch: fake bases for the tensor arguments -----------------------------------------
    def register(self, executor, args_hst, kwargs_hst) -> None:
        """Called with the host copies of one launch's arguments, before the kernel runs."""
        launch = _Launch(kernel=getattr(executor.fn, "__name__", "the kernel"))
        try:
            named = inspect.getcallargs(executor.fn, *args_hst, **kwargs_hst)
        except TypeError:
            named = {}  # the interpreter raises its own error for a bad call just after
        for name, value in named.items():
            if name not in executor.constexprs:
                self._add(launch, name, value)
        launch.freeze()
        self.launch = launch
        self.launches.append(launch.kernel)

    def _add(self, launch: _Launch, name: str, value) -> None:
        interp = self.interpreter
        if isinstance(value, tuple):
            for i, member in enumerate(value):
                self._add(launch, f"{name}[{i}]", member)
        elif isinstance(value, interp.TensorDescriptor):
            self._add(launch, f"{name}.base", value.base)
        elif hasattr(value, "data_ptr"):
            tensor = interp._unwrap_tensor(value)
            real = tensor.data_ptr()
            fake = ((len(launch.arguments) + 1) << REGION_BITS) + REGION_MIDDLE + real % ALIGNMENT_KEPT
            arg = _Argument(name, real, fake, _span_bytes(tensor), tensor.element_size())
            launch.arguments.append(arg)
            launch.by_id[id(value)] = arg

    def fake_pointer(self, value):
        """The fake base of a registered tensor argument, or None for anything else."""
        arg = self.launch.by_id.get(id(value)) if self.launch is not None else None
        return None if arg is None else arg.fake_base

    # -- every memory operation --------------------------------------------------------------------
    def translate(self, operation: str, ptrs, mask):
        """Check the active lanes of ``ptrs`` (a TensorHandle of fake addresses) and return a
        TensorHandle of the real addresses; raise OutOfBoundsAccess at the first bad lane."""
        interp = self.interpreter
        if self.launch is None or not self.launch.arguments:
            return ptrs
        fake = np.asarray(ptrs.data).astype(np.uint64)
        active = np.ones(fake.shape, dtype=bool) if mask is None else np.broadcast_to(
            np.asarray(mask.data, dtype=bool), fake.shape)
        launch = self.launch
        region = (fake >> np.uint64(REGION_BITS)).astype(np.int64) - 1
        known = (region >= 0) & (region < len(launch.arguments))
        index = np.where(known, region, 0)
        offsets = (fake - launch.fake_bases[index]).view(np.int64)  # wraps below the base to a negative offset
        spans = launch.spans[index]
        width = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)  # bytes one lane touches
        inside = known & (offsets >= 0) & (offsets + width <= spans)
        bad = active & ~inside
        if bad.any():
            self._fail(operation, bad, known, index, offsets)
        # Masked-off lanes get address 0: the interpreter never reads or writes them.
        real = np.where(active, launch.real_bases[index] + offsets.view(np.uint64), np.uint64(0))
        return interp.TensorHandle(real, ptrs.dtype)

    def record_store(self, real, value, mask) -> None:
        """Keep what one store wrote: the real address and the bytes of every active lane."""
        if not self.launches:
            return
        addresses = np.asarray(real.data)
        values = np.asarray(value.data)
        if values.dtype.kind not in "biufc" or values.dtype.itemsize == 0:
            return
        active = (np.ones(addresses.shape, dtype=bool) if mask is None
                  else np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)).reshape(-1)
        lanes = int(active.sum())
        if lanes == 0:
            return
        if self.recorded + lanes > RECORDED_LANES:
            self.complete = False
            return
        self.recorded += lanes
        written = np.ascontiguousarray(np.broadcast_to(values, addresses.shape).reshape(-1)[active])
        self.stores.append((len(self.launches) - 1, addresses.astype(np.uint64).reshape(-1)[active],
                            written.view(np.uint8).reshape(lanes, written.dtype.itemsize)))

    def written(self, tensor) -> dict:
        """``{"elements": n, "written": k, "kernels": [...]}``: of the ``n`` elements of
        ``tensor``, the ``k`` whose bytes are those the last store to their address wrote,
        and the kernels of those stores."""
        import torch

        n = tensor.numel()
        result = {"elements": int(n), "written": 0, "kernels": []}
        width = tensor.element_size()
        stores = [s for s in self.stores if s[2].shape[1] == width]
        if n == 0 or tensor.device.type != "cpu" or not stores:
            return result
        addresses = np.concatenate([s[1] for s in stores])
        values = np.concatenate([s[2] for s in stores])
        launch = np.concatenate([np.full(len(s[1]), s[0], dtype=np.int64) for s in stores])
        # The last write to each address: the first one met walking the stores backwards.
        unique, first = np.unique(addresses[::-1], return_index=True)
        last = len(addresses) - 1 - first
        offsets = np.zeros((), dtype=np.int64)
        for size, stride in zip(tensor.shape, tensor.stride()):  # row-major, as contiguous() orders them
            offsets = offsets[..., None] + np.arange(size, dtype=np.int64) * stride
        elements = np.uint64(tensor.data_ptr()) + (offsets.reshape(-1) * width).astype(np.uint64)
        position = np.minimum(np.searchsorted(unique, elements), len(unique) - 1)
        found = unique[position] == elements
        source = last[position]
        held = tensor.detach().contiguous().reshape(-1).view(torch.uint8).reshape(n, width).numpy()
        same = found & (values[source] == held).all(axis=1)
        result["written"] = int(same.sum())
        result["kernels"] = sorted({self.launches[i] for i in np.unique(launch[source[same]])})[:10]
        return result

    def evidence(self, value) -> dict:
        """What the launches of one call did, for the judge: the kernels launched, and for
        each tensor of the returned value (itself, or the tensors of a returned tuple or list)
        how much of it a kernel's stores wrote (:meth:`written`)."""
        import torch

        items = value if isinstance(value, (tuple, list)) else (value,)
        tensors = [t for t in items if isinstance(t, torch.Tensor)][:MAX_OUTPUTS]
        return {"launches": self.launches[:100], "launch_count": len(self.launches), "complete": self.complete,
                "outputs": [self.written(t) for t in tensors]}

    def _fail(self, operation, bad, known, index, offsets):
        first = np.flatnonzero(bad.reshape(-1))[0]
        grid = tuple(int(i) for i in (self.interpreter.interpreter_builder.grid_idx or ()))
        where = f"in program {grid} of {self.launch.kernel} ({int(bad.sum())} of {bad.size} lanes out of bounds)"
        if not known.reshape(-1)[first]:
            text = f"{operation} a pointer that no tensor argument of {self.launch.kernel} points into, {where}"
        else:
            arg = self.launch.arguments[int(index.reshape(-1)[first])]
            element = int(offsets.reshape(-1)[first]) // arg.element_size
            end = arg.span_bytes // arg.element_size
            if element < 0:
                text = f"{operation} `{arg.name}` at element {element}, before its start, {where}"
            else:
                text = f"{operation} `{arg.name}` at element {element}, past its end ({end}), {where}"
        if self.first is None:
            self.first = text
        raise OutOfBoundsAccess(text)


_ACTIVE: list[_Checker] = []


@contextlib.contextmanager
def bounds_checked():
    """Check every memory access of the interpreted Triton launches inside the block.

    Raises :class:`OutOfBoundsAccess` with the first out-of-bounds access, for example
    ``load from `K` at element 4160, past its end (4096), in program (0, 3, 0) of
    attn_kernel (64 of 512 lanes out of bounds)``. Without Triton installed it checks nothing."""
    if _ACTIVE:
        raise RuntimeError("bounds_checked() is already active; it does not nest")
    try:
        from triton.runtime import interpreter as interp
    except ImportError:
        yield
        return
    checker = _Checker(interp)
    builder = interp.interpreter_builder
    original_cvt = interp._implicit_cvt
    original_init = interp.GridExecutor._init_args_hst
    operations = _checked_operations(checker, builder)
    saved = {name: builder.__dict__[name] for name in operations if name in builder.__dict__}
    _ACTIVE.append(checker)
    interp._implicit_cvt, interp.GridExecutor._init_args_hst = _checked_arguments(checker, original_cvt, original_init)
    builder.__dict__.update(operations)
    try:
        yield checker
    except BaseException:
        if checker.first is None:
            raise
        raise OutOfBoundsAccess(checker.first) from None  # unwrap the interpreter's InterpreterError
    finally:
        interp._implicit_cvt = original_cvt
        interp.GridExecutor._init_args_hst = original_init
        for name in operations:  # back to the class's methods (or to what was there before)
            builder.__dict__.pop(name)
        builder.__dict__.update(saved)
        _ACTIVE.pop()
    if checker.first is not None:  # the student's code caught it; the access happened all the same
        raise OutOfBoundsAccess(checker.first)


def _checked_arguments(checker: _Checker, original_cvt, original_init) -> tuple:
    """The interpreter's ``_implicit_cvt`` and ``GridExecutor._init_args_hst``, wrapped so
    that ``checker`` learns every tensor a launch is given, and every pointer argument
    points into the checker's fake address space."""

    def init_args_hst(executor, args_dev, kwargs):
        args_hst, kwargs_hst = original_init(executor, args_dev, kwargs)
        checker.register(executor, args_hst, kwargs_hst)
        return args_hst, kwargs_hst

    def implicit_cvt(arg):
        converted = original_cvt(arg)
        fake = checker.fake_pointer(arg)
        if fake is not None:  # a fresh one-element array made for this argument
            converted.handle.data[0] = fake
        return converted

    return implicit_cvt, init_args_hst


def _checked_operations(checker: _Checker, builder) -> dict:
    """The interpreter builder's four memory operations (masked load and store, atomic
    read-modify-write and compare-and-swap), each translating its pointers through
    ``checker`` first, which raises on an access out of bounds. By attribute name."""
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def masked_load(ptrs, mask, other, *rest, **kwargs):
        return load(checker.translate("load from", ptrs, mask), mask, other, *rest, **kwargs)

    def masked_store(ptrs, value, mask, *rest, **kwargs):
        real = checker.translate("store to", ptrs, mask)
        checker.record_store(real, value, mask)
        return store(real, value, mask, *rest, **kwargs)

    def atomic_rmw(op, ptr, val, mask, *rest, **kwargs):
        return rmw(op, checker.translate("atomic on", ptr, mask), val, mask, *rest, **kwargs)

    def atomic_cas(ptr, cmp, val, *rest, **kwargs):
        return cas(checker.translate("atomic on", ptr, None), cmp, val, *rest, **kwargs)

    return {"create_masked_load": masked_load, "create_masked_store": masked_store,
            "create_atomic_rmw": atomic_rmw, "create_atomic_cas": atomic_cas}
