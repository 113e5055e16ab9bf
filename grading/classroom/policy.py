"""A class run's policy, kept in its output folder: what ``--resume`` grades by.

The grades a run publishes depend on more than the submissions: the due date and the late
penalty, the instructor's overrides, when each student handed in (``--submitted``), which of
the course's Canvas assignments each chapter updates, and the chapters chosen. The first
run records them in ``DIR/policy.json`` (:class:`Policy`, one schema with a version), the
sheets by their content (a hash, and the entries read from them, so the record is whole
even when a file is later edited or moved). A resumed run takes every flag it is not given
from the record, so a forgotten ``--due`` cannot quietly give back the points a late student
lost. A flag given with another value is a change (:class:`Change`): :func:`report` says
what it changes, and for which students, and the batch stops before grading unless
``--policy-change`` confirms it (``docs/instructors.md``, "Interrupted?").
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from grading.classroom import gradebook, late
from grading.classroom.gradebook import Override
from grading.classroom.rows import Row, num

FILE = "policy.json"
SCHEMA = "grading.batch.policy"
VERSION = 1


@dataclass(frozen=True)
class Sheet:
    """A CSV the run read (``--overrides``, ``--submitted``): its file name (never a folder:
    the record is an output) and the SHA-256 of its bytes."""

    name: str
    sha256: str

    @classmethod
    def of(cls, path: Path) -> "Sheet":
        """Raises OSError when ``path`` cannot be read."""
        return cls(Path(path).name, hashlib.sha256(Path(path).read_bytes()).hexdigest())

    def text(self, entries: int) -> str:
        return f"{self.name} (sha256 {self.sha256[:12]}, {entries} entr{'y' if entries == 1 else 'ies'})"


@dataclass(frozen=True)
class Policy:
    """What a run grades by, besides the submissions.

    ``due``: ISO 8601 with its offset, ``""`` for no late penalty; ``late_penalty``:
    ``FRACTION:CAP``; ``overrides``/``submitted``: the sheet and what was read from it
    (``submitted``: (student, ISO time) pairs); ``canvas_assignments``: (chapter,
    assignment) as ``--canvas-assignments`` said them; ``chapters``: ``--chapters`` as
    given (``""``: the chapters the submissions hold notebooks of)."""

    due: str = ""
    late_penalty: str = ""
    overrides: Sheet | None = None
    override_entries: tuple[Override, ...] = ()
    submitted: Sheet | None = None
    submitted_entries: tuple[tuple[str, str], ...] = ()
    canvas_assignments: tuple[tuple[str, str], ...] = ()
    chapters: str = ""

    def submitted_times(self) -> dict[str, datetime]:
        return {s: late.parse_time(t, f"{FILE}: submitted") for s, t in self.submitted_entries}

    def canvas_map(self) -> list[tuple[str, str, str]]:
        """The assignments as :func:`grading.classroom.exports.read_canvas_map` gives them."""
        return [(c, a, f"--canvas-assignments {c}={a}") for c, a in self.canvas_assignments]

    def to_json(self) -> dict:
        def sheet(s: Sheet | None):
            return None if s is None else {"name": s.name, "sha256": s.sha256}

        return {"schema": SCHEMA, "version": VERSION, "due": self.due, "late_penalty": self.late_penalty,
                "overrides": sheet(self.overrides),
                "override_entries": [{"student": o.student, "exercise": o.exercise, "points": o.points,
                                      "reason": o.reason, "line": o.line} for o in self.override_entries],
                "submitted": sheet(self.submitted),
                "submitted_entries": [{"student": s, "submitted": t} for s, t in self.submitted_entries],
                "canvas_assignments": [{"chapter": c, "assignment": a} for c, a in self.canvas_assignments],
                "chapters": self.chapters}

    @classmethod
    def from_json(cls, data: dict) -> "Policy":
        """Raises ValueError for another schema or version, or a field of the wrong kind."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a run's policy (schema {SCHEMA!r})")
        if data.get("version") != VERSION:
            raise ValueError(f"policy version {data.get('version')!r}; this grader reads version {VERSION}")
        try:
            def sheet(d):
                return None if d is None else Sheet(_text(d["name"]), _text(d["sha256"]))

            return cls(_text(data["due"]), _text(data["late_penalty"]), sheet(data["overrides"]),
                       tuple(Override(_text(o["student"]), _text(o["exercise"]), float(o["points"]),
                                      _text(o["reason"]), int(o["line"])) for o in data["override_entries"]),
                       sheet(data["submitted"]),
                       tuple((_text(e["student"]), _text(e["submitted"])) for e in data["submitted_entries"]),
                       tuple((_text(e["chapter"]), _text(e["assignment"])) for e in data["canvas_assignments"]),
                       _text(data["chapters"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a field is missing or of the wrong kind ({type(exc).__name__}: {exc})") from None


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def load(out: Path) -> Policy | None:
    """The policy recorded in ``out``; None when there is none (a first run, or an output
    folder an older grader wrote). Raises ValueError naming the file when it is unreadable."""
    path = out / FILE
    if not path.exists():
        return None
    try:
        return Policy.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path.name} in the output folder: {exc}; grade afresh (without --resume), or "
                         "restore the file") from None


def save(out: Path, policy: Policy) -> Path:
    """Write ``policy`` to ``out/policy.json`` (whole or not at all)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(policy.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# -- what the command line gave, against what was recorded --------------------------------------
@dataclass(frozen=True)
class Given:
    """The policy flags of one command line; None for each flag left out."""

    due: str | None = None
    late_penalty: str | None = None
    overrides: tuple[Sheet, tuple[Override, ...]] | None = None
    submitted: tuple[Sheet, tuple[tuple[str, str], ...]] | None = None
    canvas_assignments: tuple[tuple[str, str], ...] | None = None
    chapters: str | None = None


def given(due: str | None, late_penalty: str | None, overrides: tuple[Path, list[Override]] | None,
          submitted: tuple[Path, dict[str, datetime]] | None, canvas_map: list[tuple[str, str, str]] | None,
          chapters: str | None) -> Given:
    """The flags as a :class:`Given`, each normalised (a due date with its offset, the penalty
    as ``FRACTION:CAP``; an empty ``--due`` or ``--late-penalty`` means none). ``overrides``
    and ``submitted``: the file and what was read from it. Raises ValueError on a bad due date
    or penalty, OSError on a sheet that cannot be read."""
    return Given(
        None if due is None else (late.parse_time(due, "--due").isoformat() if due.strip() else ""),
        None if late_penalty is None else _penalty(late_penalty),
        None if overrides is None else (Sheet.of(overrides[0]), tuple(overrides[1])),
        None if submitted is None else (Sheet.of(submitted[0]),
                                        tuple(sorted((s, t.isoformat()) for s, t in submitted[1].items()))),
        None if canvas_map is None else tuple((c, a) for c, a, _ in canvas_map),
        chapters)


def _penalty(text: str) -> str:
    if not text.strip():
        return ""
    rule = late.LatePolicy.parse(text)
    return f"{rule.per_day:g}:{rule.cap:g}"


@dataclass(frozen=True)
class Change:
    """One flag whose value differs from the recorded one. ``grades``: whether it can change
    a published grade (every flag but ``--chapters``, whose columns the files simply follow)."""

    flag: str
    before: str
    after: str
    grades: bool = True

    def line(self) -> str:
        return f"{self.flag}: {self.before or 'none'} -> {self.after or 'none'}"


@dataclass(frozen=True)
class Resolved:
    """The policy a run grades by, what changed against the record, and what it kept from it."""

    policy: Policy
    recorded: Policy | None = None
    changes: list[Change] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # "--due 2026-12-01T23:59:00+00:00", for the run's report

    def blocking(self) -> list[Change]:
        return [c for c in self.changes if c.grades]


def resolve(flags: Given, recorded: Policy | None) -> Resolved:
    """Each flag given wins; each flag left out takes the recorded value (the defaults when
    nothing was recorded). A flag given with a value other than the recorded one is a
    :class:`Change`; the due date and the penalty compare as what they mean (one instant in
    two offsets is no change), the sheets by content, the assignments as a set."""
    base = recorded or Policy()
    policy, changes, kept = base, [], []

    def take(name, flag, value, before_text, after_text, same, grades=True):
        nonlocal policy
        if value is None:
            if recorded is not None and before_text:
                kept.append(f"{flag} {before_text}")
            return
        policy = replace(policy, **value)
        if recorded is not None and not same:
            changes.append(Change(flag, before_text, after_text, grades))

    take("due", "--due", None if flags.due is None else {"due": flags.due}, base.due, flags.due or "",
         _same_time(base.due, flags.due))
    take("late_penalty", "--late-penalty", None if flags.late_penalty is None else {"late_penalty": flags.late_penalty},
         base.late_penalty, flags.late_penalty or "", base.late_penalty == flags.late_penalty)
    over = flags.overrides
    take("overrides", "--overrides", None if over is None else {"overrides": over[0], "override_entries": over[1]},
         base.overrides.text(len(base.override_entries)) if base.overrides else "",
         over[0].text(len(over[1])) if over else "", over is not None and base.overrides is not None
         and base.overrides.sha256 == over[0].sha256)
    sub = flags.submitted
    take("submitted", "--submitted", None if sub is None else {"submitted": sub[0], "submitted_entries": sub[1]},
         base.submitted.text(len(base.submitted_entries)) if base.submitted else "",
         sub[0].text(len(sub[1])) if sub else "", sub is not None and base.submitted is not None
         and base.submitted.sha256 == sub[0].sha256)
    maps = flags.canvas_assignments
    take("canvas", "--canvas-assignments", None if maps is None else {"canvas_assignments": maps},
         _pairs(base.canvas_assignments), _pairs(maps or ()), set(maps or ()) == set(base.canvas_assignments))
    take("chapters", "--chapters", None if flags.chapters is None else {"chapters": flags.chapters},
         base.chapters, flags.chapters or "", base.chapters == flags.chapters, grades=False)
    return Resolved(policy, recorded, changes, kept)


def _same_time(before: str, after: str | None) -> bool:
    if after is None or not before or not after:
        return before == (after or "")
    return late.parse_time(before) == late.parse_time(after)


def _pairs(pairs) -> str:
    return ", ".join(f"{c}={a}" for c, a in sorted(pairs))


# -- for whom a change changes what ---------------------------------------------------------------
@dataclass(frozen=True)
class Effects:
    """What a policy does to each student: their lateness (grading.classroom.late) and their
    overrides, with each override's student written as the submission's name."""

    lateness: dict = field(default_factory=dict)
    overrides: list[Override] = field(default_factory=list)


def report(changes: list[Change], before: Effects, after: Effects, graded: list[Row],
           columns: dict[str, tuple[str, str]] | None = None) -> list[str]:
    """What ``changes`` change: one line per change, then one per student whose grade
    changes (their lateness and overrides before and after, and each chapter's points
    before and after, from ``graded``, the grader's rows of the last finished run).
    ``columns``: {chapter: (Canvas column before, after)} where the assignment map changes."""
    lines = [f"policy change: {c.line()}" for c in changes]
    students = sorted({*before.lateness, *after.lateness, *(o.student for o in before.overrides),
                       *(o.student for o in after.overrides), *(r.student for r in graded)})
    for s in students:
        why = _late_change(before.lateness.get(s), after.lateness.get(s))
        why += _override_changes([o for o in before.overrides if o.student == s],
                                 [o for o in after.overrides if o.student == s])
        mine = [r for r in graded if r.student == s]
        points = _points(mine, before.lateness.get(s), before.overrides)
        now = _points(mine, after.lateness.get(s), after.overrides)
        moved = [f"{c} {num(points[c][0])} -> {num(now[c][0])} of {num(now[c][1])}" for c in sorted(now)
                 if abs(points[c][0] - now[c][0]) > 1e-9]
        if why or moved:
            lines.append(f"policy change for {s}: " + "; ".join(why + moved))
    for chapter, (old, new) in sorted((columns or {}).items()):
        lines.append(f"policy change for every student graded in {chapter}: Canvas column {old} -> {new}")
    if len(lines) == len(changes):
        lines.append("policy change: no student's grade changes")
    return lines



def _late_text(x) -> str:
    return "on time" if x is None or x.days == 0 else f"{x.days} day{'s' * (x.days > 1)} late, x {x.factor:g}"


def _late_change(old, new) -> list[str]:
    if _late_text(old) == _late_text(new):
        return []
    return [f"late: {_late_text(old)} -> {_late_text(new)}"]


def _override_changes(old: list[Override], new: list[Override]) -> list[str]:
    def said(o):
        return {(x.exercise, x.points, x.reason) for x in o}

    if said(old) == said(new):
        return []
    text = ", ".join(f"{o.exercise} {num(o.points)}" for o in sorted(old, key=lambda o: o.exercise)) or "none"
    now = ", ".join(f"{o.exercise} {num(o.points)}" for o in sorted(new, key=lambda o: o.exercise)) or "none"
    return [f"overrides: {text} -> {now}"]


def _points(rows: list[Row], lateness, overrides: list[Override]) -> dict[str, tuple[float, float]]:
    """{chapter: (points, max_points)} of one student's graded rows under a policy."""
    counted = gradebook.counted(rows, {r.student: lateness for r in rows}, overrides)[0]
    out: dict[str, tuple[float, float]] = {}
    for r in counted:
        if r.exercise:
            p, m = out.get(r.chapter, (0.0, 0.0))
            out[r.chapter] = (p + r.points, m + r.max_points)
    return out
