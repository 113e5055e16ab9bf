"""Submissions as a learning management system downloads them.

``make grade`` wants one entry per student (a folder or a zip). An LMS's bulk download
is one flat folder instead, each file's name carrying the student. The layouts read here
are the ones each LMS documents for its "download all submissions" (we have not run
these LMSs; the names follow their documented conventions and nbgrader's ``zip_collect``
examples):

- **Canvas** (Assignments > Download Submissions), flat files
  ``{name}_{LATE_}{user id}_{attachment id}_{file name}`` (``ContentZipper`` in Canvas's
  ``lib/content_zipper.rb``): ``{name}`` is the student's sortable name in lower case
  with every non-word character removed (Ruby's ``[[:word:]]``, Unicode: letters, marks,
  digits, ``_``; so ``smithalice`` for "Smith, Alice", ``deleónmaría`` for "de León,
  María"), and Canvas joins digits between underscores (``_12_`` -> ``12``) so that the
  first ``_digits_`` of the name is the user id. ``LATE_`` (``late_`` in older
  downloads) marks a submission after the due date; the middle number is the id of the
  uploaded file (the attachment), not of the submission; a resubmitted file gets ``-1``,
  ``-2`` before its extension: ``smithalice_LATE_12345_678901_01_kv_memory-1.ipynb``.
  Under anonymous grading there is no name and the id is the submission's anonymous id:
  ``anon_Xy3Zq_678901_01_kv_memory.ipynb``, ``LATE_anon_Xy3Zq_...``.
- **Moodle** (Assignment > Download all submissions), one folder per student and
  submission plugin, ``{full name}_{participant id}_assignsubmission_file_/``, holding
  the files as handed in; with "Download submissions in folders" off, flat files
  ``{full name}_{participant id}_assignsubmission_file_{file name}``.
- **Blackboard** (Grade Centre > Assignment File Download), flat files
  ``{assignment}_{user name}_attempt_{YYYY-MM-DD-HH-MM-SS}_{file name}``, beside one
  ``.txt`` receipt per attempt (ignored).

A student's files are ordered by what their names say (:class:`grading.classroom.matching.Attempt`):
Canvas's attachment id (Canvas numbers uploads in order, so a resubmission's file, and a
later download's, has the higher one), Blackboard's attempt time. For each chapter the
newest file is graded, whatever the others are called, and every other one is listed for
review (:func:`grading.classroom.matching.match_folder`); so a later download unpacked over
the first into the same folder is graded as the later one. Moodle's names carry no time.

:func:`gather` turns such files into one folder per student (copies, in a scratch folder)
and gives, per student, the keys the roster is matched on (the name part and the LMS's
id: :func:`grading.classroom.exports.match_roster`) and what the name says of the submission
time (Blackboard's attempt time, Canvas's late mark; :mod:`grading.classroom.late`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from grading.classroom.matching import Attempt, name_problem, readable
from grading.notebook.untrusted import copy_one_untrusted, copy_untrusted, entry_kind

# Each layout is read anchored (fullmatch: no trailing newline slips past ``$``), and both
# ways a name can split where the student part is free text: the shortest student part
# (what the LMS wrote, first) and the longest (a file name that repeats the layout). Two
# different readings are an attack or an accident; either way, a person decides.
# Canvas: the student part is read up to the first ``_digits_`` (Canvas never leaves one in
# a name) and checked as Canvas writes it (:func:`_canvas_name`), so it reads one way; a
# student part ending in ``_late`` reads as the late mark.
CANVAS = re.compile(r"(?P<student>[^_].*?)_(?:(?P<late>LATE|late)_)?(?P<user_id>\d+)_(?P<attachment_id>\d+)_"
                    r"(?P<file>.+)")
CANVAS_LONGEST = re.compile(r"(?P<student>[^_].*)_(?:(?P<late>LATE|late)_)?(?P<user_id>\d+)_(?P<attachment_id>\d+)_"
                            r"(?P<file>.+)")
# Anonymous grading: ``anon_`` and the submission's anonymous id (Canvas's are 5 letters
# and digits) where the name and the user id were.
CANVAS_ANONYMOUS = re.compile(r"(?:(?P<late>LATE|late)_)?anon_(?P<anonymous_id>[A-Za-z0-9]+)_(?P<attachment_id>\d+)_"
                              r"(?P<file>.+)")
MOODLE = re.compile(r"(?P<student>.+?)_(?P<user_id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.*)")
MOODLE_LONGEST = re.compile(r"(?P<student>.+)_(?P<user_id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.*)")
BLACKBOARD = re.compile(r"(?P<assignment>.+?)_(?P<student>[^_]+)_attempt_"
                        r"(?P<attempt>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<file>.+)|\.txt)")
BLACKBOARD_LONGEST = re.compile(r"(?P<assignment>.+)_(?P<student>[^_]+)_attempt_"
                                r"(?P<attempt>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<file>.+)|\.txt)")
LAYOUTS = (("moodle", MOODLE), ("moodle", MOODLE_LONGEST), ("blackboard", BLACKBOARD),
           ("blackboard", BLACKBOARD_LONGEST), ("canvas", CANVAS), ("canvas", CANVAS_LONGEST),
           ("canvas", CANVAS_ANONYMOUS))
ATTEMPT_FORMAT = "%Y-%m-%d-%H-%M-%S"
# Canvas's mark of a later upload of a file of one name: ``-N`` before the extension.
CANVAS_COPY = re.compile(r"(?P<stem>.+)-(?P<copy>\d+)(?P<ext>\.[^.-]+)")
# What Canvas's sanitising never leaves in a name: a run of digits between underscores (or
# at its end, before the user id's underscore); and what reads as a mark, not a name: a
# trailing late mark, a leading ``anon`` (an anonymous submission's prefix).
CANVAS_NOT_A_NAME = re.compile(r"_\d+(?:_|$)|_(?:LATE|late)$|^anon(?:_|$)")


def _canvas_name(student: str) -> bool:
    """Whether ``student`` is a name part Canvas could have written: word characters only
    as Ruby's ``[[:word:]]`` has them (a letter, a mark, a decimal digit, a connector such
    as ``_``; a decomposed "é" too), in lower case (Canvas lowers the name, never the
    ``LATE`` and ``anon`` marks), and no run of digits between underscores."""
    return bool(student) and not CANVAS_NOT_A_NAME.search(student) and not any(c.isupper() for c in student) and all(
        unicodedata.category(c)[0] in "LM" or unicodedata.category(c) in ("Nd", "Pc") for c in student)


@dataclass(frozen=True)
class LmsFile:
    """What an LMS's file (or Moodle folder) name says. ``file_name`` is the name the
    student gave the file ("" for a Moodle folder); ``user_id`` the LMS's id of the
    student, where the name carries one; ``attempt`` Blackboard's attempt time (naive,
    in the LMS's time zone), None elsewhere."""

    lms: str  # "canvas", "moodle", "blackboard"
    student: str  # "smithalice", "Alice Smith", "alice.smith"; "anon_Xy3Zq" (Canvas, anonymous grading)
    file_name: str
    user_id: str = ""
    late: bool = False  # Canvas's LATE_ mark
    attempt: datetime | None = None
    attachment_id: str = ""  # Canvas's id of the uploaded file: higher, uploaded later

    def order(self) -> Attempt | None:
        """When this file was handed in, as :class:`Attempt` orders files; None where the
        name does not say (Moodle)."""
        if self.attempt is not None:
            return Attempt((self.attempt,), f"Blackboard attempt of {self.attempt:%Y-%m-%d %H:%M:%S}")
        if not self.attachment_id:
            return None
        m = CANVAS_COPY.fullmatch(self.file_name)
        base, copy = (m["stem"] + m["ext"], int(m["copy"])) if m else (self.file_name, 0)
        return Attempt((int(self.attachment_id),), f"Canvas attachment {self.attachment_id}", base, copy)


def readings(name: str) -> list[LmsFile]:
    """Every way ``name`` reads as an LMS's file name (:data:`LAYOUTS`), different ones
    only (who, which LMS id, when), the one whose student part ends first in the name
    first: the LMS writes the student before the file name the student chose, so that
    reading is the uploader's. Empty when the name is no LMS's."""
    found: list[tuple[int, LmsFile]] = []
    for lms, pattern in LAYOUTS:
        m = pattern.fullmatch(name)
        if not m:
            continue
        if lms == "moodle":
            info = LmsFile("moodle", m["student"].strip(), m["file"], m["user_id"])
        elif lms == "blackboard":
            try:
                attempt = datetime.strptime(m["attempt"], ATTEMPT_FORMAT)
            except ValueError:  # 2026-13-45-...: no time at all
                continue
            info = LmsFile("blackboard", m["student"], m["file"] or "", "", attempt=attempt)
        elif "anonymous_id" in pattern.groupindex:
            info = LmsFile("canvas", f"anon_{m['anonymous_id']}", m["file"], "", late=bool(m["late"]),
                           attachment_id=m["attachment_id"])
            found.append((m.end("anonymous_id"), info))
            continue
        else:
            if not _canvas_name(m["student"]):
                continue
            # One student whether the unzipping wrote the name composed (NFC) or not (macOS: NFD).
            info = LmsFile("canvas", unicodedata.normalize("NFC", m["student"]), m["file"], m["user_id"],
                           late=bool(m["late"]), attachment_id=m["attachment_id"])
        found.append((m.end("student"), info))
    out: list[LmsFile] = []
    for _, info in sorted(found, key=lambda f: f[0]):
        if all(_who(info) != _who(o) for o in out):
            out.append(info)
    return out


def _who(info: LmsFile) -> tuple:
    return info.lms, info.student, info.user_id, info.attempt, info.late


def parse_name(name: str) -> LmsFile | None:
    """The LMS file name ``name`` as :class:`LmsFile`, or None when it is no LMS's or
    reads as more than one (two layouts, or two students or attempts of one layout)."""
    found = readings(name)
    return found[0] if len(found) == 1 else None


def _reading_text(info: LmsFile) -> str:
    when = f", attempt of {info.attempt:%Y-%m-%d %H:%M:%S}" if info.attempt else ""
    return f"{info.lms.capitalize()}: {info.student}" + (f" (id {info.user_id})" if info.user_id else "") + when


@dataclass
class LmsStudent:
    """One student of a bulk download: their folder (made by :func:`gather`, or Moodle's
    own), the keys the roster is matched on, what the names said of the time, and what
    in their entries was not graded and why (for review)."""

    name: str  # the submission's name in the gradebook
    folder: Path
    lms: str
    keys: list[str] = field(default_factory=list)  # the name part, the LMS's user id
    late: bool = False
    attempt: datetime | None = None  # the latest attempt's time (Blackboard)
    files: list[str] = field(default_factory=list)  # the download's names, for messages
    problems: list[str] = field(default_factory=list)  # for needs_review.md
    # When each copied file was handed in, by its path under ``folder`` (matching.match_folder)
    attempts: dict[str, Attempt] = field(default_factory=dict)


def gather(submissions: Path, scratch: Path) -> tuple[list[LmsStudent], set[str]]:
    """The students of the LMS-named entries of ``submissions`` (flat files are copied,
    one folder per student, under ``scratch``; a Moodle folder is used as it is), and the
    names of the entries they took (the rest is for :func:`grading.classroom.matching.list_students`).
    Only notebooks and zips are taken; Blackboard's receipts and other files stay out.
    A name that reads two ways (two layouts, or another student's or a later attempt
    inside the file name) is not graded as anyone's: its uploader (the first reading)
    gets a problem for review; so does a name that is not UTF-8 (read in its
    :func:`grading.classroom.matching.readable` form). A link, a FIFO or a device is never
    read or followed, at the top or inside a Moodle folder."""
    groups, problems, taken = _groups(submissions)
    out, names = [], set()
    for (lms, student, user_id), files in sorted(groups.items()):
        name = student if sum(k[1] == student for k in groups) == 1 else f"{student}_{user_id or lms}"
        while name in names:  # two students' names made equal by the suffix: never one entry for both
            name += "_"
        names.add(name)
        latest = max((i.attempt for _, i in files if i.attempt), default=None)
        keys = [k for k in (student, user_id) if k]
        found = LmsStudent(name, files[0][0] if files else scratch, lms, keys, any(i.late for _, i in files), latest,
                           [readable(p.name) for p, _ in files], problems.get((lms, student, user_id), []))
        # One Moodle folder, or one zip the student handed in: the entry itself, as for
        # make grade's own layout. Otherwise the student's notebooks are copied together.
        if not (len(files) == 1 and (files[0][0].is_dir() or files[0][0].suffix.lower() == ".zip")):
            _gather_copies(files, found, scratch)
        out.append(found)
    return out, taken


def _groups(submissions: Path) -> tuple[dict, dict, set[str]]:
    """The LMS-named entries of ``submissions`` by (lms, student, user id): their files with
    what each name says, the problems of each (for review), and the entry names taken."""
    groups: dict[tuple[str, str, str], list[tuple[Path, LmsFile]]] = {}
    problems: dict[tuple[str, str, str], list[str]] = {}
    taken: set[str] = set()
    for entry in sorted(submissions.iterdir()):
        shown = readable(entry.name)
        found = readings(shown)
        if not found or entry.name.startswith("."):
            continue
        info = found[0]
        if entry_kind(entry):
            continue  # never read as the file it names (list_students ignores it, saying so)
        if entry.is_dir() and not (info.lms == "moodle" and info.file_name == ""):
            continue  # a folder that only looks like a file name: an ordinary student folder
        if entry.is_file() and not entry.name.lower().endswith((".ipynb", ".zip")):
            if info.lms == "blackboard" and entry.suffix.lower() == ".txt":
                taken.add(entry.name)  # the attempt's receipt
            continue
        taken.add(entry.name)
        key = (info.lms, info.student, info.user_id)
        groups.setdefault(key, [])
        if name_problem(entry.name):
            problems.setdefault(key, []).append(name_problem(entry.name))
        if len(found) > 1:
            problems.setdefault(key, []).append(
                f"{shown} reads as more than one LMS name ({'; '.join(map(_reading_text, found))}); "
                "it is not graded as anyone's: find whose it is and grade it by hand")
            continue
        groups[key].append((entry, info))
    return groups, problems, taken


def _gather_copies(files: list[tuple[Path, LmsFile]], found: LmsStudent, scratch: Path) -> None:
    """``found``'s files copied into a folder of its own under ``scratch`` (``found.folder``);
    a file that cannot be copied is this student's problem, not the class's."""
    found.folder = scratch / "lms" / re.sub(r"[^A-Za-z0-9]+", "_", found.name)
    while found.folder.exists():
        found.folder = found.folder.with_name(found.folder.name + "_")
    found.folder.mkdir(parents=True)
    try:
        _copy(files, found)
    except OSError as exc:  # this student's download, not the class's
        why = exc.strerror or type(exc).__name__
        found.problems.append(f"the files of {found.name} could not be copied ({why}"
                              + (f": {readable(Path(exc.filename).name)})" if exc.filename else ")"))


def _copy(files: list[tuple[Path, LmsFile]], found: LmsStudent) -> None:
    """The student's notebooks and Moodle folders into ``found.folder``, as untrusted
    files, each notebook with when its name says it was handed in (``found.attempts``):
    what is not a regular file, and a zip beside other files, is left out and named in
    ``found.problems``."""
    for n, (path, info) in enumerate(files):
        if path.is_dir():  # Moodle folders beside flat files of the same student
            for rel, kind in copy_untrusted(path, found.folder / f"{n:03d}"):
                found.problems.append(f"{readable(path.name)}/{readable(str(rel))} {kind}; it is not graded")
        elif path.suffix.lower() == ".ipynb":
            target = found.folder / f"{n:03d}" / info.file_name
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_one_untrusted(path, target)  # in chunks; its size is ruled on when it is graded
            if info.order() is not None:
                found.attempts[str(target.relative_to(found.folder))] = info.order()
        else:  # a zip beside notebooks: which of its notebooks is which attempt, no name says
            found.problems.append(f"{readable(path.name)} is a zip handed in beside other files; it is not "
                                  "unpacked or graded: unpack it into its own folder if it is the work to grade")
