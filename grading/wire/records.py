"""The typed records that cross between processes: what a contestant is told, what it reports.

Each is a dataclass with ``to_json`` and a strict ``from_json`` (every field of its type,
every text under its cap), so the judge reads what a contestant sends as untrusted data
and never as text to parse.
"""

from __future__ import annotations

import builtins
import json
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar

from grading.wire.frames import MESSAGE_TEXT_CAP, WireError

# Exceptions the judge re-raises as themselves; any other type is re-raised as the nearest
# of these among its bases (a notebook's `class OutOfPages(RuntimeError)` as a class of
# the judge's own with that name and base, see grading.judge).
BUILTIN_ERRORS = {name: getattr(builtins, name) for name in (
    "ArithmeticError", "AssertionError", "AttributeError", "BufferError", "EOFError", "Exception", "FloatingPointError",
    "ImportError", "IndexError", "KeyError", "LookupError", "MemoryError", "ModuleNotFoundError", "NameError",
    "NotImplementedError", "OSError", "OverflowError", "RecursionError", "ReferenceError", "RuntimeError",
    "StopIteration", "SystemError", "TypeError", "UnboundLocalError", "UnicodeError", "ValueError",
    "ZeroDivisionError")}


@dataclass
class RemoteError:
    """An exception raised in the contestant, as plain fields.

    ``kind`` says which of the grader's own exceptions it is, if any: ``"not_implemented"``
    (a stub), ``"cell_did_not_run"`` (``problems`` lists the cells), ``"grading_failure"``
    (a stand-in's "grader error", ``observed`` its observation), ``"wire"`` (a value that
    may not cross); ``""`` for the notebook's own exceptions."""

    type: str
    bases: list[str]
    message: str
    kind: str = ""
    notebook_class: bool = False  # the type was defined by the notebook
    where: str = ""  # "raised in notebook cell 4, line 7: x = y / z"
    problems: list[dict] = field(default_factory=list)
    name: str = ""  # for cell_did_not_run: the missing name
    observed: dict | None = None  # a GradingFailure's observation (grading.diagnosis), JSON

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "RemoteError":
        """Strict: every field of its type, texts cut to MESSAGE_TEXT_CAP."""
        if not isinstance(data, dict) or set(data) != set(cls.__dataclass_fields__):
            raise WireError("an error message without the fields of RemoteError")
        text = {k: data[k] for k in ("type", "message", "kind", "where", "name")}
        if not all(isinstance(v, str) for v in text.values()) or not isinstance(data["notebook_class"], bool):
            raise WireError("an error message whose fields are not of their types")
        bases, problems = data["bases"], data["problems"]
        if not (isinstance(bases, list) and all(isinstance(b, str) for b in bases) and len(bases) < 64):
            raise WireError("an error message whose bases are not names")
        problems = cell_problems(problems, 1000)
        observed = data["observed"]
        if observed is not None and not (isinstance(observed, dict) and len(json.dumps(observed)) < 64 * 1024):
            raise WireError("an error message whose observation is not a small JSON object")
        message = text["message"]
        if len(message) > MESSAGE_TEXT_CAP:
            message = (message[:MESSAGE_TEXT_CAP] + f"... (a message of {len(data['message'])} characters, "
                       f"cut at {MESSAGE_TEXT_CAP} by the grader)")
        return cls(type=text["type"][:200], bases=[b[:200] for b in bases], message=message, kind=text["kind"][:40],
                   notebook_class=data["notebook_class"], where=text["where"][:1000], problems=problems,
                   name=text["name"][:200], observed=observed)


PROBLEM_TEXT_CAP = 2000  # characters of one cell problem's message, wherever it is made


@dataclass
class CellProblem:
    """What the loader noticed in one cell of a notebook, as the judge reads it. Made with
    :meth:`of` everywhere (the contestant's load report, an error's cells, the judge's
    lines), so that one cap holds."""

    cell: int  # index among all cells, as Jupyter counts them (0-based)
    kind: str  # "error", "not implemented", "skipped", "unreadable"
    message: str
    memory: bool = False  # an "error" from an allocation that failed (grading.outcome.out_of_memory)

    def __str__(self) -> str:
        return f"cell {self.cell}: {self.kind}: {self.message}"

    @classmethod
    def of(cls, cell: int, kind: str, message, memory: bool = False) -> "CellProblem":
        return cls(int(cell), str(kind)[:40], str(message)[:PROBLEM_TEXT_CAP], bool(memory))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "CellProblem":
        """Strict: the four fields of their types, the message at most PROBLEM_TEXT_CAP."""
        if not (isinstance(data, dict) and set(data) == set(cls.__dataclass_fields__) and type(data["cell"]) is int
                and isinstance(data["kind"], str) and isinstance(data["message"], str)
                and isinstance(data["memory"], bool) and len(data["message"]) <= PROBLEM_TEXT_CAP
                and len(data["kind"]) <= 40):
            raise WireError("a cell problem without its fields")
        return cls(data["cell"], data["kind"], data["message"], data["memory"])


def cell_problems(data, cap: int) -> list[dict]:
    """``data`` checked as a list of at most ``cap`` cell problems (as dicts)."""
    if not (isinstance(data, list) and len(data) < cap):
        raise WireError("cell problems that are not a list")
    return [CellProblem.from_json(p).to_json() for p in data]


@dataclass
class Spawn:
    """What a new contestant is told (the first message on its socket)."""

    notebook: str  # the notebook's JSON text
    name: str  # "01_kv_memory.ipynb"
    stem: str
    exercise: str | None = None  # the exercise graded; the others' names are references
    references: dict | None = None  # grading.judge.substitute.reference_package
    threads: int = 1
    seed: int = 0
    rank: dict | None = None  # Chapter 10: {"rank": r, "world_size": P, "port": n, "op_timeout": s}
    env: dict = field(default_factory=dict)  # set before the notebook loads (Chapter 7: TRITON_INTERPRET)
    bounds_checked: bool = False  # Chapter 7: every Triton load and store checked (grading.contestant.triton_bounds)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Spawn":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class LoadReport:
    """What loading the notebook found, sent back once (the judge checks every field)."""

    problems: list[dict] = field(default_factory=list)  # grading.notebook.loader.CellProblem, as dicts
    placeholders: dict[str, str] = field(default_factory=dict)
    output_chars: int = 0
    borrowed: list[str] = field(default_factory=list)  # grading.notebook.review.borrowed_names

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "LoadReport":
        if not isinstance(data, dict) or set(data) != set(cls.__dataclass_fields__):
            raise WireError("a load report without its fields")
        problems, placeholders = data["problems"], data["placeholders"]
        problems = cell_problems(problems, 10_000)
        if not (isinstance(placeholders, dict) and all(isinstance(k, str) and isinstance(v, str) and len(v) < 2000
                                                       for k, v in placeholders.items())):
            raise WireError("a load report whose placeholders are not names")
        borrowed = data["borrowed"]
        if not (isinstance(borrowed, list) and all(isinstance(b, str) and len(b) < 2000 for b in borrowed[:100])):
            raise WireError("a load report whose notes are not text")
        if type(data["output_chars"]) is not int:
            raise WireError("a load report whose output count is not a count")
        return cls(problems, placeholders, data["output_chars"], borrowed[:100])


def _names(cls) -> set[str]:
    """The fields of a record's dataclass (its ``KIND``, a class variable, is none of them)."""
    return {f.name for f in fields(cls)}


EXIT_STATUSES = ("finished", "memory", "crashed")


@dataclass
class ExitRecord:
    """How a judge ended: the last record it writes, or the one its parent writes for it.

    ``finished``: pytest ran to its end (``pytest_exit`` is its exit code); ``memory``: the
    judge itself ran out of memory; ``crashed``: it ended without a record (``returncode``,
    or ``signal`` when a signal ended it), which only its parent can say. The peaks are the
    judge's own (``max_rss_kb``, ``data_kb``) and its children's (``children_max_rss_kb``)."""

    KIND: ClassVar[str] = "exit"
    status: str
    pytest_exit: int | None = None
    returncode: int | None = None
    signal: int | None = None
    max_rss_kb: int | None = None
    children_max_rss_kb: int | None = None
    data_kb: int | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "ExitRecord":
        """Strict: a known status and counts (or nulls) in every other field."""
        if not (isinstance(data, dict) and set(data) == _names(cls)
                and data["status"] in EXIT_STATUSES
                and all(data[k] is None or type(data[k]) is int for k in data if k != "status")):
            raise WireError("an exit record without its fields")
        return cls(**data)


SETUP_KINDS = ("model",)


@dataclass
class SetupRecord:
    """What a judge did before its first test that its time limit does not count:
    ``model``, loading the model the selected tests run (grading.judge.preload), which took
    ``seconds``. The parent (grading.proc.judges) adds them to the chapter's time limit."""

    KIND: ClassVar[str] = "setup"
    what: str
    seconds: float

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "SetupRecord":
        """Strict: a known kind of setup and a finite, non-negative number of seconds."""
        if not (isinstance(data, dict) and set(data) == _names(cls)
                and data["what"] in SETUP_KINDS and type(data["seconds"]) in (int, float)
                and 0 <= data["seconds"] < float("inf")):
            raise WireError("a setup record without its fields")
        return cls(data["what"], float(data["seconds"]))


# -- what a judge reports to its front door, one record per line -------------------------------
# Each line the judge writes (grading.judge.main) is ``{"kind": KIND, **record.to_json()}``;
# grading.wire.report reads them back, strictly, into one JudgeReport.
def _exact(data, cls, what: str) -> dict:
    """``data`` as a dict with exactly the fields of ``cls``, or a WireError naming ``what``."""
    if not (isinstance(data, dict) and set(data) == _names(cls)):
        raise WireError(f"{what} without exactly its fields")
    return data


def _text(value, cap: int, what: str) -> str:
    if not (isinstance(value, str) and len(value) <= cap):
        raise WireError(f"{what} that is not a text of at most {cap} characters")
    return value


def _texts(value, count: int, cap: int, what: str) -> list[str]:
    if not (isinstance(value, list) and len(value) <= count):
        raise WireError(f"{what} that are not a list of at most {count}")
    return [_text(v, cap, what) for v in value]


def _number(value) -> bool:
    return type(value) in (int, float) and value == value and abs(value) < float("inf")


@dataclass(frozen=True)
class PlannedTest:
    """One test the judge collected: its id, file (``hidden/NAME.py`` for a hidden test)
    and function, the exercise it grades (None: no exercise marker), its points, whether it
    is a core test (all or nothing), hidden, or skipped in this environment."""

    nodeid: str
    path: str
    function: str
    exercise: str | None
    points: float
    core: bool
    hidden: bool
    skip: bool

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "PlannedTest":
        """Strict: every field of its type. Raises WireError."""
        d = _exact(data, cls, "a planned test")
        if not (all(isinstance(d[k], str) and len(d[k]) < 4000 for k in ("nodeid", "path", "function"))
                and (d["exercise"] is None or isinstance(d["exercise"], str) and len(d["exercise"]) < 40)
                and _number(d["points"]) and type(d["points"]) is not bool and d["points"] >= 0
                and all(type(d[k]) is bool for k in ("core", "hidden", "skip"))):
            raise WireError("a planned test whose fields are not of their types")
        return cls(**d)


@dataclass(frozen=True)
class Plan:
    """Every test the judge collected, in order, and the collection's errors (pytest's text)."""

    KIND: ClassVar[str] = "plan"
    tests: tuple[PlannedTest, ...] = ()
    errors: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"tests": [t.to_json() for t in self.tests], "errors": list(self.errors)}

    @classmethod
    def from_json(cls, data) -> "Plan":
        d = _exact(data, cls, "a plan")
        if not (isinstance(d["tests"], list) and len(d["tests"]) <= 100_000):
            raise WireError("a plan whose tests are not a list")
        return cls(tuple(map(PlannedTest.from_json, d["tests"])), tuple(_texts(d["errors"], 1000, 4000, "plan errors")))


@dataclass(frozen=True)
class CollectError:
    """A test file that could not be collected: pytest's text (its last 4000 characters) and
    the exception summarised (grading.outcome.summary; "" when none was at hand)."""

    KIND: ClassVar[str] = "collect_error"
    message: str
    summary: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "CollectError":
        d = _exact(data, cls, "a collection error")
        return cls(_text(d["message"], 4000, "a collection error's message"),
                   _text(d["summary"], 4000, "a collection error's summary"))


@dataclass(frozen=True)
class LoadSummary:
    """What loading the graded notebook found, as the judge saw it: each cell's problem
    (:class:`CellProblem`; cell -1 for a notebook that could not be read) and how many
    characters it printed."""

    KIND: ClassVar[str] = "load"
    problems: tuple[CellProblem, ...] = ()
    output_chars: int = 0

    def to_json(self) -> dict:
        return {"problems": [p.to_json() for p in self.problems], "output_chars": self.output_chars}

    @classmethod
    def from_json(cls, data) -> "LoadSummary":
        d = _exact(data, cls, "a load summary")
        if not (isinstance(d["problems"], list) and len(d["problems"]) < 10_000 and type(d["output_chars"]) is int):
            raise WireError("a load summary whose fields are not of their types")
        return cls(tuple(map(CellProblem.from_json, d["problems"])), d["output_chars"])

    def of(self, kind: str) -> list[CellProblem]:
        """The problems of one kind ("error", "skipped", "unreadable", ...)."""
        return [p for p in self.problems if p.kind == kind]


@dataclass(frozen=True)
class Found:
    """A known mistake behind an exercise's failures (grading.diagnosis.Diagnosis): the
    catalogue bug or kind, its hint and section, and the sentence a student reads."""

    exercise: str
    bug: str
    hint: str
    section: str
    message: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "Found":
        d = _exact(data, cls, "a diagnosis")
        return cls(**{k: _text(d[k], 4000, "a diagnosis's field") for k in _names(cls)})


@dataclass(frozen=True)
class Diagnoses:
    """The known mistakes the judge found (advice only: no points depend on them)."""

    KIND: ClassVar[str] = "diagnosis"
    diagnoses: tuple[Found, ...] = ()

    def to_json(self) -> dict:
        return {"diagnoses": [d.to_json() for d in self.diagnoses]}

    @classmethod
    def from_json(cls, data) -> "Diagnoses":
        d = _exact(data, cls, "the diagnoses")
        if not (isinstance(d["diagnoses"], list) and len(d["diagnoses"]) <= 1000):
            raise WireError("diagnoses that are not a list")
        return cls(tuple(map(Found.from_json, d["diagnoses"])))


@dataclass(frozen=True)
class Tamper:
    """What the load saw that voids a chapter: a graded function that calls a library's
    implementation of itself (grading.notebook.review)."""

    KIND: ClassVar[str] = "tamper"
    violations: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"violations": list(self.violations)}

    @classmethod
    def from_json(cls, data) -> "Tamper":
        d = _exact(data, cls, "a tamper record")
        return cls(tuple(_texts(d["violations"], 1000, 4000, "tamper violations")))


def line(record) -> dict:
    """One line of a judge's report: the record's fields and its ``kind``."""
    return {"kind": type(record).KIND, **record.to_json()}
