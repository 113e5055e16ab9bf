"""Execute a notebook's code cells into a fresh module.

The grader never imports a student's notebook with IPython: it runs each code cell,
in order, in the namespace of a new module, so functions, classes, tensors and
Triton kernels come across as they are. Three details matter:

- Every cell is compiled under its own file name and registered in ``linecache``,
  as IPython does, so ``inspect.getsource`` works (``@triton.jit`` needs it) and
  tracebacks point at the notebook cell.
- IPython syntax (``%magic``, ``%%cell magic``, ``!shell``) is skipped with a note:
  nothing is installed or run.
- A cell that raises does not stop the load: the error is recorded with the cell's
  number and the next cell runs, so one broken cell costs only the exercises that
  depend on it. Cells tagged ``skip-grading`` (plots, demos, timing) are left out.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import linecache
import re
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grading import wire
from grading.layout import ROOT, cell_source
from grading.outcome import out_of_memory
from grading.wire import CellProblem

SKIP_TAG = "skip-grading"
MAX_CAPTURED_CHARS = 20_000  # a flood of prints must not flood the report
STUB_PLACEHOLDER = re.compile(r"^([A-Za-z_]\w*) = \.\.\.  # (Exercise \d+\.\d+: .*)$", re.M)
_counter = itertools.count()


class _CappedBuffer(io.StringIO):
    """Keeps the first MAX_CAPTURED_CHARS of what a notebook prints and drops the rest
    as it comes, so a print flood never sits in memory."""

    def write(self, text: str) -> int:
        if self.tell() < MAX_CAPTURED_CHARS:
            super().write(text[: MAX_CAPTURED_CHARS - self.tell()])
        return len(text)


class NotebookLoadError(Exception):
    """The notebook could not be read at all (missing, not JSON, not a notebook)."""


class NotImplementedExercise(NotImplementedError):
    """A value the student has not filled in yet (a stub placeholder)."""


class CellDidNotRun(AttributeError):
    """A name the grader needs is missing because a notebook cell failed when it was
    loaded (a SyntaxError, an IndentationError, an exception at the top level). The
    grader reports it once per exercise, as the cell and its error, not as a traceback."""

    def __init__(self, name: str, notebook: str, problems: list["CellProblem"]):
        cells = "; ".join(f"cell {p.cell}: {p.message}" for p in problems)
        super().__init__(f"`{name}` is not defined: {notebook} has a cell that did not run ({cells})", name=name)
        self.notebook, self.problems = notebook, list(problems)

    @property
    def cells(self) -> tuple[int, ...]:
        return tuple(p.cell for p in self.problems)


@dataclass
class LoadedNotebook:
    """A notebook run into a module. Attribute access reads the module's names and
    turns a missing name into a message that says which cell failed to define it."""

    path: Path
    module: types.ModuleType
    problems: list[CellProblem] = field(default_factory=list)
    placeholders: dict[str, str] = field(default_factory=dict)
    output: str = ""
    services: object = None  # grading.contestant.services.run, where this process serves the notebook

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def errors(self) -> list[CellProblem]:
        return [p for p in self.problems if p.kind == "error"]

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        namespace = self.__dict__["module"].__dict__
        if item in self.placeholders and namespace.get(item, ...) is ...:
            raise NotImplementedExercise(self.placeholders[item])
        if item in namespace:
            return namespace[item]
        if self.errors:
            raise CellDidNotRun(item, self.name, self.errors)
        raise AttributeError(f"{self.name} does not define `{item}` (no cell defines it)")

    def service(self, name: str, *args, timeout: float | None = None):
        """``grading.contestant.services`` ``name`` on this notebook, in this process (make bench's
        in-process baseline; the judge's proxy runs it in the contestant). Whoever loads a
        notebook to serve it in its own process hands the services over (``services``)."""
        if self.services is None:
            raise RuntimeError("this notebook was loaded without the contestant's services")
        return self.services(self, name, *args)

    def has(self, item: str) -> bool:
        return item in self.module.__dict__


def strip_ipython(source: str) -> tuple[str, list[str]]:
    """Replace IPython-only lines by ``pass`` so the cell still compiles."""
    notes = []
    if source.lstrip().startswith("%%"):
        first = source.lstrip().splitlines()[0]
        return "", [f"cell magic `{first}` skipped"]
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            indent = line[: len(line) - len(stripped)]
            lines.append(f"{indent}pass  # skipped by the grader")
            notes.append(f"`{stripped[:60]}` skipped")
        else:
            lines.append(line)
    return "\n".join(lines), notes


def describe_exception(exc: BaseException, filename_prefix: str) -> str:
    """One line: the exception and the notebook line that raised it."""
    if isinstance(exc, SyntaxError):  # IndentationError too: no frame, the line is on the exception
        text = (exc.text or "").strip()
        return f"{type(exc).__name__}: {exc.msg} (line {exc.lineno}{f': `{text}`' if text else ''})"
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.startswith(filename_prefix):
            where = f" (at {Path(frame.filename).name} line {frame.lineno}: `{(frame.line or '').strip()}`)"
            break
    return f"{type(exc).__name__}: {exc}{where}"


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path`` (the book's own: a submission is read by
    grading.notebook.untrusted, under its size cap); NotebookLoadError when it is missing
    or not a notebook."""
    try:
        return nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise NotebookLoadError(f"{path} does not exist") from None
    except Exception as exc:  # not JSON, not a notebook, wrong schema
        raise NotebookLoadError(f"{path} is not a readable notebook: {type(exc).__name__}: {exc}") from None


def load_notebook(path, *, skip_tags=(SKIP_TAG,), module_name: str | None = None, quiet: bool = True) -> LoadedNotebook:
    """Run the code cells of the notebook at ``path`` into a new module."""
    path = Path(path).resolve()
    return run_notebook(read_notebook(path), path, skip_tags=skip_tags, module_name=module_name, quiet=quiet)


def run_notebook(nb: nbformat.NotebookNode, path: Path, *, skip_tags=(SKIP_TAG,), module_name: str | None = None,
                 quiet: bool = True) -> LoadedNotebook:
    """Run the code cells of ``nb`` into a new module named for ``path`` (where its cells'
    code is said to live: a contestant is handed the notebook's text, not a file)."""
    path = Path(path)
    stem = re.sub(r"\W", "_", path.stem)
    name = module_name or f"notebook_{stem}_{next(_counter)}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses and pickling look modules up here
    loaded = LoadedNotebook(path=path, module=module)
    prefix = f"{path}#cell-"
    captured = _CappedBuffer()
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if set(cell.metadata.get("tags", [])) & set(skip_tags):
            continue
        source, notes = strip_ipython(cell_source(cell))
        loaded.problems += [CellProblem(index, "skipped", n) for n in notes]
        for var, message in STUB_PLACEHOLDER.findall(source):
            loaded.placeholders[var] = message
        filename = f"{prefix}{index}"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        redirect = contextlib.redirect_stdout(captured) if quiet else contextlib.nullcontext()
        try:
            code = compile(source, filename, "exec")
            with redirect:
                exec(code, module.__dict__)
        except NotImplementedError as exc:
            loaded.problems.append(CellProblem(index, "not implemented", str(exc)))
        except (Exception, SystemExit) as exc:  # a student's sys.exit() must not end the grader
            loaded.problems.append(CellProblem(index, "error", describe_exception(exc, prefix), out_of_memory(exc)))
    loaded.output = captured.getvalue()
    return loaded


def load_solutions(stem: str, **kwargs) -> LoadedNotebook:
    """The book's own implementation of a chapter's exercises (``solutions/<stem>.ipynb``).

    Chapters and benchmarks use this instead of copying code, so the solutions stay
    the single source of truth."""
    return load_notebook(ROOT / "solutions" / f"{stem}.ipynb", **kwargs)


# -- an exception as the record that crosses ---------------------------------------------------
def remote_error(exc: BaseException, kind: str = "") -> wire.RemoteError:
    """``exc``, raised by the notebook's code or a reference, as the record that crosses to the
    other process: its type's name and built-in bases, its text, where in the notebook."""
    from grading.compare import GradingFailure

    cause = exc
    while type(cause).__name__ == "InterpreterError" and cause.__cause__ is not None:
        cause = cause.__cause__  # Triton wraps what a kernel raised once per level of calls
    if isinstance(cause, (NotImplementedError, GradingFailure)):
        exc = cause
    problems, name = [], ""
    if not kind:
        if isinstance(exc, CellDidNotRun):
            kind, name = "cell_did_not_run", exc.name
            problems = [wire.CellProblem.of(p.cell, p.kind, p.message, p.memory).to_json() for p in exc.problems]
        elif isinstance(exc, NotImplementedError):
            kind = "not_implemented"
        elif isinstance(exc, GradingFailure):
            kind = getattr(type(exc), "wire_kind", "grading_failure")  # a subclass the other side must tell apart
    if isinstance(exc, NameError) and isinstance(getattr(exc, "name", None), str):
        name = exc.name
    cls = type(exc)
    bases = [c.__name__ for c in cls.__mro__ if c.__module__ == "builtins"]
    observed = getattr(exc, "observed", None) if kind == "grading_failure" else None
    return wire.RemoteError(type=cls.__name__, bases=bases, message=_text(exc)[: wire.MESSAGE_TEXT_CAP], kind=kind,
                            notebook_class=str(cls.__module__).startswith("notebook_"), where=_where(exc),
                            problems=problems, name=name, observed=observed if isinstance(observed, dict) else None)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"(a {type(exc).__name__} whose message could not be read)"


def _where(exc: BaseException) -> str:
    """``raised in notebook cell 4, line 7: x = y / z``: the innermost notebook line."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if "#cell-" in frame.filename:
            cell = frame.filename.rsplit("#cell-", 1)[1]
            return f"raised in notebook cell {cell}, line {frame.lineno}: {(frame.line or '').strip()}"[:1000]
    return ""
