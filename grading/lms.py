"""Submissions as a learning management system downloads them (issue 27, item 7).

``make grade`` wants one entry per student (a folder or a zip). An LMS's bulk download
is one flat folder instead, each file's name carrying the student. The layouts read here
are the ones each LMS documents for its "download all submissions" (we have not run
these LMSs; the names follow their documented conventions and nbgrader's ``zip_collect``
examples):

- **Canvas** (Assignments > Download Submissions), flat files
  ``{name}_{LATE_}{user id}_{submission id}_{file name}``: ``{name}`` is the student's
  sortable name in lower case, letters only (``smithalice`` for "Smith, Alice"), ``LATE_``
  marks a submission after the due date, a resubmitted file gets ``-1``, ``-2`` before
  its extension: ``smithalice_LATE_12345_678901_01_kv_memory-1.ipynb``.
- **Moodle** (Assignment > Download all submissions), one folder per student and
  submission plugin, ``{full name}_{participant id}_assignsubmission_file_/``, holding
  the files as handed in; with "Download submissions in folders" off, flat files
  ``{full name}_{participant id}_assignsubmission_file_{file name}``.
- **Blackboard** (Grade Centre > Assignment File Download), flat files
  ``{assignment}_{user name}_attempt_{YYYY-MM-DD-HH-MM-SS}_{file name}``, beside one
  ``.txt`` receipt per attempt (ignored). Several attempts: the latest counts.

:func:`gather` turns such files into one folder per student (copies, in a scratch folder)
and gives, per student, the keys the roster is matched on (the name part and the LMS's
id: :func:`grading.gradebook.match_roster`) and what the name says of the submission
time (Blackboard's attempt time, Canvas's late mark; :mod:`grading.late`).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from grading.matching import not_a_regular_file

CANVAS = re.compile(r"^(?P<student>[a-z]+)_(?P<late>LATE_)?(?P<user_id>\d+)_(?P<submission_id>\d+)_(?P<file>.+)$")
MOODLE = re.compile(r"^(?P<student>.+?)_(?P<user_id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.*)$")
BLACKBOARD = re.compile(r"^(?P<assignment>.+)_(?P<student>[^_]+)_attempt_"
                        r"(?P<attempt>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<file>.+)|\.txt)$")
ATTEMPT_FORMAT = "%Y-%m-%d-%H-%M-%S"


@dataclass(frozen=True)
class LmsFile:
    """What an LMS's file (or Moodle folder) name says. ``file_name`` is the name the
    student gave the file ("" for a Moodle folder); ``user_id`` the LMS's id of the
    student, where the name carries one; ``attempt`` Blackboard's attempt time (naive,
    in the LMS's time zone), None elsewhere."""

    lms: str  # "canvas", "moodle", "blackboard"
    student: str  # "smithalice", "Alice Smith", "alice.smith"
    file_name: str
    user_id: str = ""
    late: bool = False  # Canvas's LATE_ mark
    attempt: datetime | None = None


def parse_name(name: str) -> LmsFile | None:
    """The LMS file name ``name`` as :class:`LmsFile`, or None when it is no LMS's."""
    m = MOODLE.match(name)
    if m:
        return LmsFile("moodle", m["student"].strip(), m["file"], m["user_id"])
    m = BLACKBOARD.match(name)
    if m:
        return LmsFile("blackboard", m["student"], m["file"] or "", "",
                       attempt=datetime.strptime(m["attempt"], ATTEMPT_FORMAT))
    m = CANVAS.match(name)
    if m:
        return LmsFile("canvas", m["student"], m["file"], m["user_id"], late=bool(m["late"]))
    return None


@dataclass
class LmsStudent:
    """One student of a bulk download: their folder (made by :func:`gather`, or Moodle's
    own), the keys the roster is matched on, and what the names said of the time."""

    name: str  # the submission's name in the gradebook
    folder: Path
    lms: str
    keys: list[str] = field(default_factory=list)  # the name part, the LMS's user id
    late: bool = False
    attempt: datetime | None = None  # the latest attempt's time (Blackboard)
    files: list[str] = field(default_factory=list)  # the download's names, for messages


def gather(submissions: Path, scratch: Path) -> tuple[list[LmsStudent], set[str]]:
    """The students of the LMS-named entries of ``submissions`` (flat files are copied,
    one folder per student, under ``scratch``; a Moodle folder is used as it is), and the
    names of the entries they took (the rest is for :func:`grading.matching.list_students`).
    Only notebooks and zips are taken; Blackboard's receipts and other files stay out."""
    groups: dict[tuple[str, str, str], list[tuple[Path, LmsFile]]] = {}
    taken: set[str] = set()
    for entry in sorted(submissions.iterdir()):
        info = parse_name(entry.name)
        if info is None or entry.name.startswith("."):
            continue
        if entry.is_symlink() or (entry.is_file() and not_a_regular_file(entry)):
            continue  # a link is never read as the file it names (list_students ignores it, saying so)
        if entry.is_dir() and not (info.lms == "moodle" and info.file_name == ""):
            continue  # a folder that only looks like a file name: an ordinary student folder
        if entry.is_file() and not entry.name.lower().endswith((".ipynb", ".zip")):
            if info.lms == "blackboard" and entry.suffix.lower() == ".txt":
                taken.add(entry.name)  # the attempt's receipt
            continue
        taken.add(entry.name)
        groups.setdefault((info.lms, info.student, info.user_id), []).append((entry, info))
    names = [student for (_, student, _) in groups]
    out = []
    for (lms, student, user_id), files in sorted(groups.items()):
        name = student if names.count(student) == 1 else f"{student}_{user_id or lms}"
        latest = max((i.attempt for _, i in files if i.attempt), default=None)
        if lms == "blackboard":  # only the latest attempt's files count
            files = [(p, i) for p, i in files if i.attempt == latest]
        keys = [k for k in (student, user_id) if k]
        found = LmsStudent(name, files[0][0], lms, keys, any(i.late for _, i in files), latest,
                           [p.name for p, _ in files])
        # One Moodle folder, or one zip the student handed in: the entry itself, as for
        # make grade's own layout. Otherwise the student's notebooks are copied together.
        if not (len(files) == 1 and (files[0][0].is_dir() or files[0][0].suffix.lower() == ".zip")):
            folder = scratch / "lms" / re.sub(r"[^A-Za-z0-9]+", "_", name)
            folder.mkdir(parents=True, exist_ok=True)
            for n, (path, info) in enumerate(files):
                if path.is_dir():  # Moodle folders beside flat files of the same student
                    shutil.copytree(path, folder / f"{n:03d}", dirs_exist_ok=True)
                elif path.suffix.lower() == ".ipynb":  # (a zip beside notebooks is not unpacked)
                    target = folder / f"{n:03d}" / info.file_name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)
            found.folder = folder
        out.append(found)
    return out, taken
