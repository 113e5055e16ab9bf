"""Catching a notebook that games the grader, from inside the grading process.

This is a tripwire, not a sandbox: it notices the ways a student's notebook could
plausibly fake a grade, and it blocks the ones it can see before they happen.

- **Writes outside the working directory** (a results file, the gradebook, the
  graders, site-packages): an audit hook (:func:`sys.addaudithook`) refuses every
  ``open`` for writing, rename, remove, ``mkdir``, ``chmod`` ... whose path lies outside
  the child's temporary directory, and records it.
- **Reading the graders or the references** (``tests/``, ``solutions/``, hidden tests):
  refused when a notebook cell is on the call stack.
- **Reaching into the grader's frames** (``sys._getframe(1).f_globals["ref"]``,
  ``tb.tb_frame``) from a notebook cell: recorded.
- **Patching** ``torch``, ``numpy``, ``math``, ``builtins``, ``pytest``, ``pluggy``,
  ``grading`` or ``tests`` (``torch.matmul = ...``, ``grading.compare.assert_close =
  ...``, ``torch.Tensor.__eq__ = ...``): :class:`Snapshot` remembers every function
  and class those modules hold before the notebook runs, and compares identities
  after the tests (``torch.matmul is original``).
- **Importing the references**: the graders' modules are taken out of
  ``sys.modules`` before the notebook runs, so ``import tests.references...`` has to
  read the file (refused above), and a notebook whose names come from ``tests`` is flagged.

What it cannot stop: native code (``ctypes``), walking frames through attributes
that raise no audit event (``inspect.currentframe().f_back``), subprocesses
(their file writes are not audited; the parent's file fingerprint catches changes
to the graders and to installed packages afterwards), or code written to undo
these checks. Run hostile submissions in a container or a throwaway VM.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from pathlib import Path

CELL_MARK = "#cell-"  # grading.loader compiles every cell as "<notebook path>#cell-<n>"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PATH_EVENTS = {  # event -> indices of the path arguments it writes to
    "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.symlink": (1,),
    "os.link": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.rmtree": (0,), "shutil.move": (0, 1),
}
FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}
WATCHED_PREFIXES = ("torch", "numpy", "math", "builtins", "operator", "json", "pytest", "_pytest", "pluggy", "grading",
                    "tests", "nbformat")
TORCH_MODULES = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.testing", "torch.special")


class Tripwire:
    """The audit hook and what it saw. One per process (audit hooks cannot be removed)."""

    def __init__(self, work_dir: Path, protected: list[Path]):
        self.work_dir = os.path.realpath(work_dir)
        self.protected = [os.path.realpath(p) for p in protected]
        self.violations: list[str] = []
        self._busy = threading.local()

    # -- helpers ---------------------------------------------------------------
    @staticmethod
    def _in_cell(frame) -> bool:
        while frame is not None:
            if CELL_MARK in frame.f_code.co_filename:
                return True
            frame = frame.f_back
        return False

    def _resolve(self, path) -> str | None:
        if isinstance(path, int) or path is None:
            return None
        try:
            path = os.fsdecode(path)
            return os.path.realpath(os.path.join(os.getcwd(), path))
        except (TypeError, ValueError, OSError):
            return None

    def _inside(self, path: str, root: str) -> bool:
        return path == root or path.startswith(root + os.sep)

    def _writable(self, path: str) -> bool:
        return self._inside(path, self.work_dir) or path == os.devnull or path.startswith(("/dev/shm/", "/dev/pts/"))

    def _note(self, what: str):
        if what not in self.violations:
            self.violations.append(what)

    def _refuse(self, what: str):
        self._note(what)
        raise PermissionError(f"refused by the grader: {what}")

    # -- the hook --------------------------------------------------------------
    def __call__(self, event: str, args: tuple):
        if event not in PATH_EVENTS and event not in ("open", "sys._getframe", "object.__getattr__"):
            return
        if getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            self._check(event, args)
        finally:
            self._busy.on = False

    def _check(self, event: str, args: tuple):
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            target = self._resolve(path)
            if target is None:
                return
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS)
            if writing and not self._writable(target):
                self._refuse(f"wrote to {target}, outside its temporary directory")
            if not writing and any(self._inside(target, p) for p in self.protected):
                if self._in_cell(sys._getframe(1)):
                    self._refuse(f"read the grader's file {target}")
        elif event in PATH_EVENTS:
            for i in PATH_EVENTS[event]:
                target = self._resolve(args[i]) if i < len(args) else None
                if target is not None and not self._writable(target):
                    self._refuse(f"{event} on {target}, outside its temporary directory")
        elif event == "sys._getframe":
            caller = sys._getframe(2)  # 0: this method, 1: __call__, 2: who called sys._getframe
            returned = args[0]
            if caller is None or returned is None:
                return
            by_cell = CELL_MARK in caller.f_code.co_filename
            via_inspect = caller.f_code.co_filename.endswith("inspect.py") and caller.f_back is not None and \
                CELL_MARK in caller.f_back.f_code.co_filename
            if (by_cell and CELL_MARK not in returned.f_code.co_filename) or via_inspect:
                self._note("inspected the grader's stack frames (sys._getframe / inspect)")
        elif event == "object.__getattr__" and len(args) > 1 and args[1] in FRAME_ATTRS:
            caller = sys._getframe(2)
            if caller is not None and CELL_MARK in caller.f_code.co_filename:
                self._note(f"reached into stack frames ({args[1]})")


def install(work_dir: Path, protected: list[Path]) -> Tripwire:
    wire = Tripwire(work_dir, protected)
    sys.addaudithook(wire)
    return wire


def _watched_modules() -> list[types.ModuleType]:
    out = []
    for name, module in sorted(sys.modules.items()):
        if not isinstance(module, types.ModuleType):
            continue
        top = name.split(".")[0]
        if top == "torch" and name not in TORCH_MODULES:
            continue  # torch has hundreds of submodules; the ones graders call are enough
        if top == "numpy" and name not in ("numpy", "numpy.linalg", "numpy.testing"):
            continue
        if top in WATCHED_PREFIXES:
            out.append(module)
    return out


def _members(owner) -> dict[str, object]:
    try:
        items = dict(vars(owner))
    except TypeError:
        return {}
    return {k: v for k, v in items.items() if callable(v) or isinstance(v, (types.ModuleType, type, staticmethod,
                                                                              classmethod, property))}


class Snapshot:
    """Identities of the functions and classes of the watched modules (and of the
    methods of their classes), to compare after the notebook ran. Holders are kept
    by reference, so a module later taken out of ``sys.modules`` is still checked."""

    def __init__(self):
        self.holders: list[tuple[str, object, dict[str, object]]] = []
        classes: dict[int, type] = {}
        for module in _watched_modules():
            members = _members(module)
            self.holders.append((module.__name__, module, members))
            for value in members.values():
                if isinstance(value, type) and str(getattr(value, "__module__", "")).split(".")[0] in WATCHED_PREFIXES:
                    classes[id(value)] = value
        for owner, attr in (("torch", "Tensor"), ("numpy", "ndarray")):
            if owner in sys.modules and hasattr(sys.modules[owner], attr):
                cls = getattr(sys.modules[owner], attr)
                for c in cls.__mro__[:-1]:  # torch.Tensor and torch._C.TensorBase, not object
                    classes[id(c)] = c
        for c in classes.values():
            self.holders.append((f"{c.__module__}.{c.__qualname__}", c, _members(c)))
        self.builtin_names = set(vars(__import__("builtins")))

    def changes(self) -> list[str]:
        """What was replaced or removed since the snapshot (and names added to builtins)."""
        out = []
        for label, holder, members in self.holders:
            now = vars(holder)
            for key, value in members.items():
                current = now.get(key, _MISSING)
                if current is not value and not _wrapped_by_torch(current, value):
                    out.append(f"{'removed' if current is _MISSING else 'replaced'} {label}.{key}")
        added = set(vars(__import__("builtins"))) - self.builtin_names
        out += [f"added builtins.{name}" for name in sorted(added)]
        return out


_MISSING = object()


def _wrapped_by_torch(current, original) -> bool:
    """Is ``current`` torch's own ``_disable_dynamo`` wrapper around ``original``?

    The first import of ``torch._dynamo`` (transformers triggers it, so Chapter 8's
    model does) replaces ``torch.manual_seed`` with such a wrapper: same function, only
    hidden from the compiler. That is torch patching itself, not the notebook."""
    if getattr(current, "__wrapped__", None) is not original or "torch" not in sys.modules:
        return False
    disable = getattr(sys.modules["torch"], "_disable_dynamo", None)
    if disable is None:
        return False
    return getattr(current, "__code__", None) is getattr(disable(_probe), "__code__", _MISSING)


def _probe():
    """A function for :func:`_wrapped_by_torch` to wrap, to learn what torch's wrapper looks like."""


def borrowed_names(module: types.ModuleType) -> list[str]:
    """Names in a notebook's namespace that come from the graders' own modules."""
    out = []
    for name, value in list(vars(module).items()):
        origin = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(origin, str) and origin.split(".")[0] == "tests":
            out.append(f"`{name}` comes from the graders' module {origin}")
    return out
