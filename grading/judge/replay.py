"""Expected values instead of reference code: the release's graders replay them.

The repository's graders compare a notebook with ``tests/references/ref_NN_topic.py``:
simple fp64 code that answers the exercises. A grader that students run at home cannot
hold that code, so ``make release`` (:mod:`grading.release`) runs each chapter's graders
once on its solution with every reference module *recorded* (``pytest
--record-expected DIR``, :func:`grading.judge.recording.record`), and the release ships
the records, ``tests/expected/NN_topic.npz`` (:mod:`grading.judge.record_file`), in place
of ``tests/references/``:

- a *function* call is stored as the function's name, a key of its arguments and its
  result. The key is exact for what is exact on every CPU (ints, strings, shapes, dtypes,
  integer and bool tensors, by digest) and a fingerprint for float tensors and floats
  (sums, a weighted sum and the end elements, in fp64), matched within a tolerance of the
  dtype's precision: an input computed by MKL on another CPU differs in its last bits;
- a *class* (Chapter 2's ``DenseKVModel``) is stored per instance as its constructor's
  arguments and its sequence of method calls with what each returned; a replayed
  instance follows the recorded sequences that match its calls so far;
- a *constant* of a module (``UNIT_FACTORS``) is stored as its value;
- a *call into another exercise* that the solution made and the judge answered with its
  reference (``pages_needed`` from 2.3's ``append``) is stored per test as the function's
  name and an exact key of its arguments (:func:`grading.judge.expected.ask_key`): the
  judge answers such a call only when it is one of these (:mod:`grading.judge.substitute`).

The file is an ``.npz`` read with ``allow_pickle=False``: arrays, and the index as JSON
bytes. In the release, :func:`install` (the grading plugin calls it when the folder has
``tests/expected/`` and no ``tests/references/``) makes ``import tests.references.ref_NN``
give a :class:`ReplayModule` with the same names, so the test files are the repository's,
with the same tolerances and messages. A module without ``SUBSTITUTES`` grades a chapter as
a whole (:mod:`grading.judge.substitute`): in the release an exercise that calls another uses the
student's own function. A call the release did not record fails with a message that says
so, never silently.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

from grading.judge.expected import call_key, decode, encode, floats_match
from grading.judge.record_file import FORMAT, asks_of, load_file, merge, save_file, tests_of

PACKAGE = "tests.references"
# What a deep computation (Chapter 8's 30-layer model) moves between two CPUs' kernels is
# more than a few units: a call that matches no record within them but one within this
# relative tolerance is such a case, whose expected value this CPU cannot have (the
# grader's tolerance is for the same input): it is skipped and not counted, saying why.
LOOSE_RTOL = 1e-3
OTHER_CPU = ("the release recorded this case's expected value for an input computed on another CPU, whose kernels "
             "round differently by more than the grader's tolerance allows; not counted here (your instructor's "
             "graders check it)")


class NotRecorded(AssertionError):
    """A reference call whose expected value the release does not hold."""


# -- recording (the repository, ``pytest --record-expected DIR``) ----------------------------

class Recorder:
    """Wraps every reference module's functions and classes and keeps their calls."""

    def __init__(self):
        self.modules: dict[str, dict] = {}  # module name -> {"calls": {...}, "instances": [...], ...}
        self.arrays: dict[str, list] = {}
        self.depth = 0  # a reference that calls another records the outer call only
        self.asks: dict[str, dict[str, set[tuple[str, str]]]] = {}  # stem -> test -> {(name, key)}

    def record_ask(self, stem: str, test: str, name: str, key: str) -> None:
        """A call into another exercise that the judge answered while ``test`` graded the
        solution of ``stem`` (:func:`grading.judge.expected.ask_key`)."""
        self.asks.setdefault(stem, {}).setdefault(test, set()).add((name, key))

    def book(self, module: str) -> tuple[dict, list]:
        if module not in self.modules:
            self.modules[module] = {"calls": {}, "instances": [], "constants": {}, "classes": [],
                                    "functions": []}
            self.arrays[module] = []
        return self.modules[module], self.arrays[module]

    def wrap_module(self, module: types.ModuleType) -> None:
        book, arrays = self.book(module.__name__)
        for name, value in list(vars(module).items()):
            if name.startswith("__") or isinstance(value, types.ModuleType):
                continue
            if isinstance(value, type) and value.__module__ == module.__name__:
                setattr(module, name, self._wrap_class(module.__name__, name, value))
                book["classes"].append(name)
            elif isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                setattr(module, name, self._wrap_function(module.__name__, name, value))
                book["functions"].append(name)
            elif not callable(value):
                try:
                    book["constants"][name] = encode(value, arrays)
                except TypeError:
                    pass

    def record_call(self, module: str, name: str, args, kwargs, result) -> None:
        book, arrays = self.book(module)
        try:
            exact, floats = call_key(args, kwargs)
            encoded = encode(result, arrays)
        except TypeError:
            return  # not replayable (a callable's result): a replayed call of it fails loudly
        entries = book["calls"].setdefault(name, {}).setdefault(exact, [])
        if not any(floats_match(f, floats) for f, _ in entries):
            entries.append((floats, encoded))

    def _wrap_function(self, module: str, name: str, fn):
        recorder = self

        def recorded(*args, **kwargs):
            recorder.depth += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                recorder.depth -= 1
            if recorder.depth == 0:
                recorder.record_call(module, name, args, kwargs, result)
            return result

        recorded.__wrapped__ = fn
        recorded.__name__ = fn.__name__
        recorded.__qualname__ = fn.__qualname__
        return recorded

    def _wrap_class(self, module: str, name: str, cls):
        recorder = self

        class Recorded:
            def __init__(self, *args, **kwargs):
                book, arrays = recorder.book(module)
                exact, floats = call_key(args, kwargs)
                object.__setattr__(self, "_log", {"class": name, "init": [exact, floats], "ops": []})
                book["instances"].append(self._log)
                recorder.depth += 1
                try:
                    object.__setattr__(self, "_real", cls(*args, **kwargs))
                finally:
                    recorder.depth -= 1

            def __getattr__(self, attr):
                value = getattr(self._real, attr)
                if callable(value):
                    def method(*args, **kwargs):
                        recorder.depth += 1
                        try:
                            result = value(*args, **kwargs)
                        finally:
                            recorder.depth -= 1
                        self._note(attr, args, kwargs, result)
                        return result

                    return method
                self._note(f".{attr}", (), {}, value)
                return value

            def _note(self, op, args, kwargs, result):
                _, arrays = recorder.book(module)
                exact, floats = call_key(args, kwargs)
                self._log["ops"].append([op, exact, floats, encode(result, arrays)])

        Recorded.__name__ = Recorded.__qualname__ = name
        return Recorded

    def write(self, folder: Path, tests: list[str]) -> list[Path]:
        """One ``NN_topic.npz`` per recorded module (``ref_NN_topic``), with the tests of
        ``tests/test_NN_topic.py`` that ran, merged with what an earlier run of the same
        folder recorded (the chapters are recorded one by one)."""
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for module, book in self.modules.items():
            stem = module.rsplit(".", 1)[-1].removeprefix("ref_")
            ran = [t for t in tests if t.split("::")[0].endswith(f"test_{stem}.py")]
            if not any([book["calls"], book["instances"], ran]):
                continue
            arrays = self.arrays[module]
            asks = {test: sorted(map(list, calls)) for test, calls in sorted(self.asks.get(stem, {}).items())}
            index = {"format": FORMAT, "module": module, "tests": ran, "asks": asks,
                     "constants": book["constants"], "functions": book["functions"], "classes": book["classes"],
                     "calls": {name: [[exact, floats, result] for exact, entries in keys.items()
                                      for floats, result in entries] for name, keys in book["calls"].items()},
                     "instances": book["instances"]}
            path = folder / f"{stem}.npz"
            if path.exists():
                index, arrays = merge(load_file(path), (index, arrays))
            save_file(path, index, arrays)
            written.append(path)
        return written


_RECORDER: Recorder | None = None


def start_recording(modules: list[str]) -> Recorder:
    """Wrap the named reference modules (imported now) in this process."""
    global _RECORDER
    from grading import alternatives

    alternatives.RECORDING = True
    _RECORDER = _RECORDER or Recorder()
    _no_shrinking()  # the examples recorded are the ones the release's profile replays
    for name in modules:
        _RECORDER.wrap_module(importlib.import_module(name))
    return _RECORDER


def recorder() -> Recorder | None:
    return _RECORDER


@contextlib.contextmanager
def unrecorded():
    """Nothing called within is recorded: the references the judge runs when a contestant
    asks (grading.judge), which no test of the release calls itself."""
    if _RECORDER is None:
        yield
        return
    _RECORDER.depth += 1
    try:
        yield
    finally:
        _RECORDER.depth -= 1


# -- replay (the release) --------------------------------------------------------------------

def _summary(args, kwargs) -> str:
    from grading.compare import call_text

    try:
        return call_text("", *args, **kwargs)
    except Exception:  # noqa: BLE001 - a summary for a message only
        return "(...)"


class ReplayModule(types.ModuleType):
    """A reference module's names, answering from the records."""

    def __init__(self, name: str, path: Path):
        super().__init__(name, f"Expected values of {name}, recorded by make release from the references")
        self.__file__ = str(path)
        index, arrays = load_file(path)
        self._index, self._arrays = index, arrays
        self._calls: dict[str, dict[str, list]] = {}
        for fname, entries in index["calls"].items():
            table = self._calls.setdefault(fname, {})
            for exact, floats, result in entries:
                table.setdefault(exact, []).append((floats, result))
        for fname in index["functions"]:
            self.__dict__[fname] = self._function(fname)
        for cname in index["classes"]:
            self.__dict__[cname] = self._class(cname)
        for cname, value in index["constants"].items():
            self.__dict__[cname] = decode(value, arrays)

    def _missing(self, what: str, args, kwargs) -> NotRecorded:
        return NotRecorded(
            f"the release holds no expected value for {what}{_summary(args, kwargs)}: its graders carry the "
            f"expected results of the cases `make release` recorded, and this input is not one of them. The "
            f"input is probably computed from an earlier result of yours that differs from the recorded case; "
            f"the checks before this one say where.")

    def _function(self, fname: str):
        module = self

        def replayed(*args, **kwargs):
            exact, floats = call_key(args, kwargs)
            entries = module._calls.get(fname, {}).get(exact, [])
            for recorded, result in entries:
                if floats_match(recorded, floats):
                    return decode(result, module._arrays)
            if any(floats_match(recorded, floats, LOOSE_RTOL) for recorded, _ in entries):
                import pytest

                pytest.skip(f"{fname}{_summary(args, kwargs)}: {OTHER_CPU}")
            raise module._missing(f"{fname}", args, kwargs)

        replayed.__name__ = replayed.__qualname__ = fname
        replayed.__module__ = self.__name__
        return replayed

    def _class(self, cname: str):
        module = self
        instances = [i for i in self._index["instances"] if i["class"] == cname]

        class Replayed:
            def __init__(self, *args, **kwargs):
                exact, floats = call_key(args, kwargs)
                found = [i for i in instances if i["init"][0] == exact and floats_match(i["init"][1], floats)]
                if not found:
                    raise module._missing(cname, args, kwargs)
                object.__setattr__(self, "_candidates", found)
                object.__setattr__(self, "_step", 0)

            def _next(self, op, args, kwargs):
                exact, floats = call_key(args, kwargs)
                step = self._step
                found = [i for i in self._candidates if len(i["ops"]) > step and i["ops"][step][0] == op
                         and i["ops"][step][1] == exact and floats_match(i["ops"][step][2], floats)]
                if not found:
                    raise module._missing(f"{cname}.{op.lstrip('.')}", args, kwargs)
                object.__setattr__(self, "_candidates", found)
                object.__setattr__(self, "_step", step + 1)
                return decode(found[0]["ops"][step][3], module._arrays)

            def __getattr__(self, attr):
                if attr.startswith("__"):
                    raise AttributeError(attr)
                if any(len(i["ops"]) > self._step and i["ops"][self._step][0] == f".{attr}" for i in self._candidates):
                    return self._next(f".{attr}", (), {})
                return lambda *args, **kwargs: self._next(attr, args, kwargs)

        Replayed.__name__ = Replayed.__qualname__ = cname
        Replayed.__module__ = self.__name__
        return Replayed

    def __getattr__(self, name):
        raise AttributeError(f"the release's {self.__name__} has no {name!r}: it holds expected values only")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, folder: Path):
        self.folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname == PACKAGE:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if fullname.startswith(PACKAGE + ".ref_") and self._file(fullname).is_file():
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def _file(self, fullname: str) -> Path:
        return self.folder / f"{fullname.rsplit('.', 1)[-1].removeprefix('ref_')}.npz"

    def create_module(self, spec):
        if spec.name == PACKAGE:
            module = types.ModuleType(spec.name, "Expected values (grading.judge.replay)")
            module.__path__ = []
            return module
        return ReplayModule(spec.name, self._file(spec.name))

    def exec_module(self, module):
        pass


def install(folder: Path) -> None:
    """``import tests.references.ref_NN`` answers from ``folder/NN.npz`` (the release)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(folder))
        _INSTALLED.append(folder)
        _no_shrinking()


def _no_shrinking() -> None:
    """A property test replays the examples that were recorded: hypothesis's derandomized
    examples are the same on every run up to the first that fails, but the examples it
    tries while shrinking that failure were never recorded. In the release it reports the
    first failing example as it is (Chapter 2's tests already do, everywhere). Loaded
    before the test files are imported, so their own ``@settings`` inherit it: now if
    hypothesis is imported already, else the moment it is (:class:`_AfterHypothesis`),
    since most runs (one exercise, one chapter) never import it, and that costs 0.5 s."""
    if "hypothesis" in sys.modules:
        _load_release_profile()
    elif not any(isinstance(f, _AfterHypothesis) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterHypothesis())


def _load_release_profile() -> None:
    try:
        from hypothesis import Phase, settings
    except ImportError:
        return
    settings.register_profile("grading-release", phases=[Phase.explicit, Phase.generate], database=None)
    settings.load_profile("grading-release")


class _AfterHypothesis(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``hypothesis`` as the finders after it would, and loads it with the release's
    profile loaded right after, before the module that imported it goes on."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "hypothesis":
            return None
        sys.meta_path.remove(self)  # once, and never finding itself
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader  # the module's own loader, as if never here
        self.loader.exec_module(module)
        _load_release_profile()


_INSTALLED: list[Path] = []


def in_release() -> bool:
    """Whether this process grades from expected values (the student edition)."""
    return bool(_INSTALLED)


def not_recorded(item) -> str | None:
    """In the release: why a test that did not run when ``make release`` recorded its
    chapter is skipped (it would meet no expected value), else None."""
    if not _INSTALLED:
        return None
    path = Path(str(getattr(item, "path", "")))
    stem = path.stem.removeprefix("test_")
    file = _INSTALLED[0] / f"{stem}.npz"
    if not path.name.startswith("test_") or not file.is_file():
        return None
    ran = tests_of(file)
    nodeid = item.nodeid
    if nodeid in ran or nodeid.split("::", 1)[-1] in {t.split("::", 1)[-1] for t in ran}:
        return None
    return ("the release holds no expected values for this test: it did not run where `make release` "
            "recorded them (a GPU test, or one that needs the model, on a machine without)")


# asks_of is the records' (grading.judge.record_file), read through here by the judge's answers.
__all__ = ["Recorder", "ReplayModule", "NotRecorded", "asks_of", "install", "start_recording", "load_file", "save_file"]
