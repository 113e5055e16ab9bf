"""Late work: a due date, a penalty policy, and the one place that applies them.

The policy (``--late-penalty``, docs/instructors.md, "Late work"): ``FRACTION[:CAP]``, a fraction of the
points taken per started day (24 hours) after the due date, at most ``CAP`` (default 1,
all of them). ``0.1:0.5`` takes 10% one second to 24 hours late, 20% up to 48 hours, and
never more than 50%. Every graded row of a late submission is scaled by the same factor
``1 - min(CAP, FRACTION * days)`` (:func:`grading.scoring.late_factor`); the gradebook
keeps the grader's rows as they were (``.graded.csv``), and a note row says what was
taken and why. An instructor's override sets the points after the penalty, so it wins.

Where the submission time comes from: Gradescope's ``submission_metadata.json``
(``created_at``, and the due date the student was given: ``users[].assignment.due_date``
where Gradescope holds an extension, else ``assignment.due_date``); for the batch, a
``submitted.csv`` (``--submitted``: ``student,submitted``, ISO times; a student named by
the submission's name or any roster id, :mod:`grading.classroom.sheets`), or what an LMS's
file names say (Blackboard's attempt time; Canvas's ``LATE_`` mark, which says late but
not how late: one day, unless ``submitted.csv`` gives the time). File modification times
are not used: a download, a copy or an unzip resets them.

Times without a UTC offset are read in this machine's local time zone.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path

from grading import scoring
from grading.outcome import Status

DAY = timedelta(days=1)
POLICY = re.compile(r"^\s*(?P<per_day>\d*\.?\d+)\s*(?::\s*(?P<cap>\d*\.?\d+))?\s*$")


def parse_time(text: str, what: str = "time") -> datetime:
    """An ISO 8601 time (``2026-12-01T23:59``, ``...+01:00``, ``...Z``) as an aware datetime
    (local time zone where it has no offset). Raises ValueError naming ``what``."""
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not an ISO time like 2026-12-01T23:59 or "
                         "2026-12-01T23:59:00+01:00") from None
    return t if t.tzinfo else t.astimezone()


@dataclass(frozen=True)
class LatePolicy:
    """``per_day``: the fraction of the points taken per started day late; ``cap``: the
    most that is taken (0 < per_day, 0 <= cap <= 1)."""

    per_day: float
    cap: float = 1.0

    @classmethod
    def parse(cls, text: str) -> "LatePolicy":
        """``"0.1"`` or ``"0.1:0.5"`` (``FRACTION[:CAP]``). Raises ValueError on anything else."""
        m = POLICY.match(text or "")
        if not m:
            raise ValueError(f"--late-penalty {text!r}: expected FRACTION[:CAP] per started day late, "
                             "e.g. 0.1 (10% a day) or 0.1:0.5 (10% a day, at most 50%)")
        per_day, cap = float(m["per_day"]), float(m["cap"]) if m["cap"] else 1.0
        if not (0 < per_day <= 1 and 0 <= cap <= 1):
            raise ValueError(f"--late-penalty {text!r}: the fraction must be in (0, 1] and the cap in [0, 1]")
        return cls(per_day, cap)

    def text(self) -> str:
        return f"{self.per_day:.0%} a started day late" + (f", at most {self.cap:.0%}" if self.cap < 1 else "")


@dataclass(frozen=True)
class Lateness:
    """One submission against its due date: ``days`` started days late (0: on time),
    ``factor`` what its points are multiplied by, ``note`` what the student reads.
    Crosses into the gradebook and results.json as JSON (:meth:`to_json`)."""

    days: int
    factor: float
    note: str
    submitted: str = ""  # ISO, or "" when only a late mark was known
    due: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Lateness":
        return cls(int(data["days"]), float(data["factor"]), str(data["note"]),
                   str(data.get("submitted", "")), str(data.get("due", "")))


def lateness(submitted: datetime | None, due: datetime, policy: LatePolicy, *, marked_late: bool = False
             ) -> Lateness:
    """How late ``submitted`` is for ``due`` under ``policy``. ``submitted`` None with
    ``marked_late`` (Canvas's mark without a time) counts as one day late; None without
    it, as on time."""
    if submitted is None:
        if not marked_late:
            return Lateness(0, 1.0, "", "", due.isoformat())
        days, when = 1, "marked late by the LMS (no time given: counted as 1 day)"
    else:
        late_by = submitted - due
        if late_by <= timedelta(0):
            return Lateness(0, 1.0, "", submitted.isoformat(), due.isoformat())
        days = math.ceil(late_by / DAY)
        hours = late_by.total_seconds() / 3600
        when = f"submitted {submitted.isoformat(timespec='minutes')}, {hours:.1f} h after the due date " \
               f"{due.isoformat(timespec='minutes')} ({days} started day{'s' * (days > 1)})"
    factor = scoring.late_factor(days, policy.per_day, policy.cap)
    note = f"late: {when}; {1 - factor:.0%} of the points taken ({policy.text()})"
    return Lateness(days, factor, note, submitted.isoformat() if submitted else "", due.isoformat())


def apply(rows: list, late: Lateness | None) -> list:
    """The rows of one student with the late penalty applied: every graded row's points
    times ``late.factor`` (its message says so) and a note row per chapter of the
    submission (one row, chapter "", when rows span several). ``rows``: gradebook rows
    (:class:`grading.classroom.rows.Row`). Returns the rows unchanged when on time."""
    from grading.classroom.rows import Row

    if late is None or late.days == 0:
        return list(rows)
    out = []
    for r in rows:
        if r.exercise and r.points > 0:
            out.append(Row(r.student, r.chapter, r.exercise, scoring.late_points(r.points, late.factor), r.max_points,
                           r.status, f"{r.message} (late: {r.points:g} x {late.factor:g})".strip()))
        else:
            out.append(r)
    for student in dict.fromkeys(r.student for r in rows):
        out.append(Row(student, "", "", 0, 0, Status.NOTE, late.note))
    return out


def _submitted_lines(path: Path) -> list[tuple[int, str, datetime]]:
    """(line, student key, time) of every entry of ``submitted.csv``. Raises ValueError
    naming the line of a bad entry."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        header = [(h or "").strip().lower() for h in reader.fieldnames or []]
        if "student" not in header or "submitted" not in header:
            raise ValueError(f"{path}: the header must name student and submitted (got {reader.fieldnames})")
        out = []
        for n, raw in enumerate(reader, start=2):
            d = {(k or "").strip().lower(): (v or "").strip() for k, v in raw.items() if k}
            if not any(d.values()):
                continue
            if not d["student"]:
                raise ValueError(f"{path}, line {n}: the student is empty")
            out.append((n, d["student"], parse_time(d["submitted"], f"{path}, line {n}")))
    return out


def read_submitted(path: Path) -> dict[str, datetime]:
    """``submitted.csv``: the header ``student,submitted`` (the submission's name or any
    roster id, :mod:`grading.classroom.sheets`; an ISO time), as {student key: time}.
    Raises ValueError naming the line of a bad entry, or of a key given twice."""
    out: dict[str, datetime] = {}
    first: dict[str, int] = {}
    for n, key, when in _submitted_lines(path):
        if key in out and out[key] != when:
            raise ValueError(f"{path}, line {n}: {key!r} has another time on line {first[key]}")
        out[key], first[key] = when, first.get(key, n)
    return out


def submitted_where(path: Path | None) -> dict[str, str]:
    """{student key: "FILE, line N"} of ``submitted.csv``, for messages (empty without one)."""
    return {key: f"--submitted {path.name}, line {n}" for n, key, _ in _submitted_lines(path)} if path else {}


def resolve_submitted(times: dict[str, datetime], keys, where: dict[str, str] | None = None
                      ) -> dict[str, datetime]:
    """``times`` ({student key: time}, :func:`read_submitted`) as {submission: time}, each
    key resolved by ``keys`` (:class:`grading.classroom.sheets.StudentKeys`); a key of a
    roster entry with no submission is left out. ``where``: each key's line, for messages.
    Raises ValueError naming the line of a key that names no student or several, or of
    two keys that give one submission different times."""
    where = where or {}
    out: dict[str, datetime] = {}
    said: dict[str, str] = {}
    for key, when in times.items():
        line = where.get(key, f"--submitted, student {key!r}")
        student = keys.resolve(key, line)
        if student is None:
            continue
        if student in out and out[student] != when:
            raise ValueError(f"{line}: {key!r} gives {student} another time than {said[student]}")
        out[student], said[student] = when, line
    return out


def from_gradescope(metadata_path: Path) -> tuple[datetime | None, datetime | None]:
    """(submitted, due) from Gradescope's ``submission_metadata.json``; (None, None) when
    the file is absent. The due date is the student's own where Gradescope gives one
    (an extension), else the assignment's. Raises ValueError on a file it cannot read."""
    if not metadata_path.exists():
        return None, None
    try:
        data = json.loads(metadata_path.read_text(encoding="utf-8"))
        submitted = parse_time(data["created_at"], "created_at") if data.get("created_at") else None
        users = data.get("users") or [{}]
        due_text = (users[0].get("assignment") or {}).get("due_date") or (data.get("assignment") or {}).get("due_date")
        due = parse_time(due_text, "due_date") if due_text else None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{metadata_path}: not Gradescope's submission metadata ({exc})") from None
    return submitted, due
