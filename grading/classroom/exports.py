"""The gradebook exported: one row per student (``gradebook_wide.csv``), the roster, and the files for
Canvas's gradebook import."""

from __future__ import annotations

import csv
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from grading.classroom.rows import Row, csv_row, exercise_order, graded_chapters, num


# -- the wide export and the roster -------------------------------------------------------
@dataclass(frozen=True)
class Student:
    id: str
    name: str = ""
    email: str = ""
    folder: str = ""  # the submission's name, where the roster gives it
    # Canvas's own columns, where the roster is Canvas's gradebook export (gradebook_canvas.csv)
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""
    integration_id: str = ""

    def keys(self) -> list[str]:
        """Every value that names this student: each id column of the roster (Canvas's
        ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Integration ID``; a folder or login),
        the email and its part before ``@``, the name as written."""
        return [k for k in (self.id, self.sis_user_id, self.sis_login_id, self.integration_id, self.folder,
                            self.email, self.email.split("@")[0], self.name) if k]


ROSTER_COLUMNS = {"id": ("id", "student id", "student_id", "studentid", "sis id", "sis_id", "sis user id"),
                  "name": ("name", "student name", "full name", "student"),
                  "email": ("email", "e-mail", "email address", "mail"),
                  "folder": ("folder", "submission", "login", "username", "user", "sis login id"),
                  "sis_user_id": ("sis user id",), "sis_login_id": ("sis login id",), "section": ("section",),
                  "integration_id": ("integration id",)}


def read_roster(path: Path) -> list[Student]:
    """A roster CSV with a header naming at least an id column (``id``, ``student id``...),
    and optionally ``name``, ``email`` and ``folder``. Raises ValueError on a bad file."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        columns = {}
        for key, names in ROSTER_COLUMNS.items():
            found = [h for h in (reader.fieldnames or []) if h and h.strip().lower() in names]
            if found:
                columns[key] = found[0]
        if "id" not in columns:
            raise ValueError(f"roster {path}: no student id column (one of: {', '.join(ROSTER_COLUMNS['id'])}) "
                             f"in the header {reader.fieldnames}")
        out = []
        for n, d in enumerate(reader, start=2):
            values = {k: (d.get(c) or "").strip() for k, c in columns.items()}
            if not any(values.values()) or values.get("name", "").strip().lower() in CANVAS_NOT_STUDENTS:
                continue
            if not values["id"]:
                raise ValueError(f"roster {path}, line {n}: the student id is empty")
            out.append(Student(**values))
    ids = [s.id for s in out]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"roster {path}: student ids appear twice: {', '.join(dupes)}")
    return out


# Rows of a Canvas gradebook export that are not students.
CANVAS_NOT_STUDENTS = ("points possible", "student, test")


def name_key(text: str) -> str:
    """``text`` compared without case, punctuation or spaces; letters of any script kept
    ("de León, María" and Canvas's ``deleónmaría`` are one key)."""
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFC", text).casefold())


def _name_orders(name: str) -> list[str]:
    """A name in both orders: "Alice Smith" and "Smith, Alice" are also "smithalice" and
    "alicesmith" (Canvas names its download's files by the sortable name, "smithalice")."""
    if "," in name:
        last, _, first = name.partition(",")
    else:
        first, _, last = name.strip().rpartition(" ")
    return [name, f"{first} {last}", f"{last} {first}"] if first and last else [name]


def match_roster(folders: list[str], roster: list[Student], aliases: dict[str, list[str]] | None = None
                 ) -> tuple[dict[str, Student], list[str]]:
    """Which roster entry each submission is: its name, or one of its ``aliases`` (what
    an LMS's file names said: the student part and the LMS's user id, grading.classroom.lms),
    equals (ignoring case and punctuation) the entry's folder, id, email, the part of
    the email before ``@``, or name (in either order). Returns {submission: entry} and
    what could not be matched, for review."""
    found, problems = {}, []
    aliases = aliases or {}

    def keys(s):
        return {name_key(x) for x in (*s.keys(), *(_name_orders(s.name) if s.name else [])) if x}

    for folder in folders:
        mine = {name_key(x) for x in (folder, *aliases.get(folder, [])) if name_key(x)}
        hits = [s for s in roster if mine & keys(s)]
        if len(hits) == 1:
            found[folder] = hits[0]
        elif hits:
            problems.append(f"submission {folder} fits several roster entries: {', '.join(s.id for s in hits)}")
        else:
            problems.append(f"submission {folder} is not on the roster")
    taken = {}
    for folder, s in found.items():
        taken.setdefault(s.id, []).append(folder)
    for sid, folders_ in taken.items():
        if len(folders_) > 1:
            problems.append(f"roster entry {sid} fits several submissions: {', '.join(sorted(folders_))}")
    for s in roster:
        if s.id not in taken:
            problems.append(f"roster entry {s.id} ({s.name or s.email or 'no name'}) has no submission")
    return found, problems


def write_wide(out: Path, rows: list[Row], roster: list[Student] = (), matched: dict[str, Student] | None = None
               ) -> Path:
    """``gradebook_wide.csv``: one row per student (``student, id, name, email, total,
    max_total``, then one column per exercise, its points), for a spreadsheet or an
    LMS. A roster entry without a submission gets a row with empty grades; so does a
    chapter without a grade (:data:`NO_GRADE`), and ``total`` counts the chapters graded."""
    matched = matched or {}
    known = graded_chapters(rows)
    graded = [r for r in rows if r.exercise]
    exercises = sorted({r.exercise for r in graded}, key=exercise_order)
    students = sorted({r.student for r in rows})
    path = out / "gradebook_wide.csv"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(csv_row(["student", "id", "name", "email", "total", "max_total", *exercises]))
        for s in students:
            mine = {r.exercise: r for r in graded if r.student == s and (s, r.chapter) in known}
            who = matched.get(s, Student(""))
            total = [num(sum(r.points for r in mine.values())), num(sum(r.max_points for r in mine.values()))]
            w.writerow(csv_row([s, who.id, who.name, who.email, *(total if mine else ["", ""]),
                                *[num(mine[e].points) if e in mine else "" for e in exercises]]))
        submitted = {x.id for x in matched.values()}
        for who in roster:
            if who.id not in submitted:
                w.writerow(csv_row(["", who.id, who.name, who.email, "", "", *["" for _ in exercises]]))
    os.replace(tmp, path)
    return path


CANVAS_FIELDS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
# A row whose first cell holds this is the Points Possible row (Canvas's importer,
# app/models/gradebook_importer.rb, check_for_non_student_row: row[0].include?("Points Possible")).
CANVAS_POINTS_ROW = "Points Possible"
# As Canvas's own export writes it (lib/gradebook_exporter.rb): four spaces first, which sort it
# above every student in a spreadsheet.
CANVAS_POINTS_CELL = "    Points Possible"


# -- Canvas's assignments: which column of the course a chapter's grades update ----------------
# Canvas's gradebook import (GradebookImporter in Canvas's lib/gradebook_importer.rb) reads
# a column named "Title (id)" as the assignment with that id, else a column named exactly
# as an assignment's title as that one, and makes a new assignment of any other column.
# Its export names every assignment column "Title (id)".
CANVAS_ASSIGNMENT = re.compile(r"(?P<title>.*)\s\((?P<id>\d+)\)", re.S)
# The export's columns that are no assignment: the student's, and the scores Canvas computes
# (matched anywhere in the name, as the importer does: "Assignments Current Score",
# "Unposted Final Grade").
CANVAS_STUDENT_COLUMNS = ("Student", "LastName", "FirstName", "ID", "SIS User ID", "SIS Login ID", "Section",
                          "Integration ID", "Root Account")
CANVAS_COMPUTED = re.compile("Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade|"
                             "Override Score|Override Grade|Override Status")


@dataclass(frozen=True)
class CanvasAssignment:
    """An assignment column of Canvas's gradebook export."""

    header: str  # "Week 1: KV memory (90001)", as the export names the column
    title: str  # "Week 1: KV memory"
    id: str  # "90001"
    points: str = ""  # its cell in the export's Points Possible row


def read_canvas_assignments(path: Path) -> list[CanvasAssignment]:
    """The assignment columns of ``path`` when it is Canvas's gradebook export (the
    roster): every column named ``Title (id)`` that is neither a student's column nor a
    score Canvas computes, with its Points Possible cell. Empty for any other roster."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        table = list(csv.reader(f))
    if not table:
        return []
    header = [h.strip() for h in table[0]]
    points = next((row for row in table[1:] if row and CANVAS_POINTS_ROW in row[0]), [])
    out = []
    for n, name in enumerate(header):
        m = CANVAS_ASSIGNMENT.fullmatch(name)
        if m and name not in CANVAS_STUDENT_COLUMNS and not CANVAS_COMPUTED.search(name):
            out.append(CanvasAssignment(name, m["title"], m["id"], points[n].strip() if n < len(points) else ""))
    return out


def read_canvas_map(specs: list[str]) -> list[tuple[str, str, str]]:
    """``--canvas-assignments`` as (chapter, assignment, where it was said): each spec is
    ``CHAPTER=ASSIGNMENT`` (``1=90001``) or a CSV file with the header ``chapter,assignment``
    (for titles with commas, or many chapters). Raises ValueError naming a bad one."""
    out = []
    for spec in specs:
        path = Path(spec)
        if path.is_file():
            with open(path, newline="", encoding="utf-8-sig") as f:
                reader = csv.DictReader(f)
                header = {(h or "").strip().lower(): h for h in reader.fieldnames or []}
                if not {"chapter", "assignment"} <= set(header):
                    raise ValueError(f"--canvas-assignments {spec}: the header must be chapter,assignment "
                                     f"(got {reader.fieldnames})")
                for n, row in enumerate(reader, start=2):
                    chapter = (row[header["chapter"]] or "").strip()
                    assignment = (row[header["assignment"]] or "").strip()
                    if not chapter and not assignment:
                        continue
                    if not chapter or not assignment:
                        raise ValueError(f"--canvas-assignments {spec}, line {n}: needs a chapter and an assignment")
                    out.append((chapter, assignment, f"{spec}, line {n}"))
        elif "=" in spec:
            chapter, _, assignment = spec.partition("=")
            if not chapter.strip() or not assignment.strip():
                raise ValueError(f"--canvas-assignments {spec}: write CHAPTER=ASSIGNMENT, e.g. 1=90001")
            out.append((chapter.strip(), assignment.strip(), f"--canvas-assignments {spec}"))
        else:
            raise ValueError(f"--canvas-assignments {spec}: neither CHAPTER=ASSIGNMENT (1=90001) nor a file")
    return out


def _listed(course: list[CanvasAssignment], limit: int = 8) -> str:
    shown = ", ".join(a.header for a in course[:limit])
    return shown + (f" and {len(course) - limit} more" if len(course) > limit else "")


def canvas_columns(mapping: list[tuple[str, str, str]], course: list[CanvasAssignment], stems: list[str],
                   graded: list[str]) -> dict[str, CanvasAssignment]:
    """Which of the course's assignments (``course``: :func:`read_canvas_assignments`)
    each chapter's grades go to: those ``mapping`` names (:func:`read_canvas_map`; an
    assignment given as the export's column name, its id, or its exact title), and a
    graded chapter whose stem is exactly one assignment's title (what an earlier import of
    ``gradebook_canvas.csv`` made: Canvas's own rule, made sure by the id). ``stems``: every
    chapter; ``graded``: this run's. Raises ValueError naming a mapping that names no
    chapter or no assignment, several assignments (ambiguous), a chapter twice or an
    assignment twice, and a graded chapter whose stem several assignments have as title."""
    if mapping and not course:
        raise ValueError("--canvas-assignments needs --roster to be Canvas's gradebook export (Grades > Export), "
                         "whose header names the course's assignments, e.g. 'Week 1: KV memory (90001)'")
    out: dict[str, CanvasAssignment] = {}
    said: dict[str, str] = {}
    for chapter, wanted, where in mapping:
        stem = next((s for s in stems if chapter in (s, s[:2], str(int(s[:2])))), None)
        if stem is None:
            raise ValueError(f"{where}: no chapter {chapter!r} (give its number, 1, or its name, {stems[0]})")
        hits = ([a for a in course if a.header == wanted] or [a for a in course if a.id == wanted]
                or [a for a in course if a.title.strip() == wanted])
        if not hits:
            raise ValueError(f"{where}: no assignment {wanted!r} in the roster's header; Canvas's export names "
                             f"these: {_listed(course)}")
        if len(hits) > 1:
            raise ValueError(f"{where}: {wanted!r} is ambiguous, it names several assignments "
                             f"({', '.join(a.header for a in hits)}); give the id, e.g. {chapter}={hits[0].id}")
        if stem in out and out[stem] != hits[0]:
            raise ValueError(f"{where}: {stem} is mapped twice (also by {said[stem]})")
        other = next((s for s, a in out.items() if a == hits[0] and s != stem), None)
        if other:
            raise ValueError(f"{where}: {hits[0].header} is mapped to two chapters, {other} ({said[other]}) "
                             f"and {stem}; one assignment takes one chapter's points")
        out[stem], said[stem] = hits[0], where
    for stem in graded:
        titled = [a for a in course if a.title.strip() == stem]
        if stem in out or not titled or any(a in out.values() for a in titled):
            continue
        if len(titled) > 1:
            raise ValueError(f"several of the course's assignments are titled {stem} "
                             f"({', '.join(a.header for a in titled)}): Canvas would update one of them; name it "
                             f"with --canvas-assignments {int(stem[:2])}=ID")
        out[stem] = titled[0]
    return out


def unmapped_chapters(graded: list[str], columns: dict[str, CanvasAssignment], course: list[CanvasAssignment]
                      ) -> list[str]:
    """needs_review.md's lines for this run's chapters that go to none of the course's
    assignments although the roster (Canvas's export) lists some: Canvas's import makes
    a new assignment of each."""
    if not course:
        return []
    return [f"gradebook_canvas.csv: {stem} goes to none of the course's assignments, so Canvas's import makes a "
            f"new assignment named {stem}; to update one of them instead, rerun with --resume and "
            f"--canvas-assignments {int(stem[:2])}=ID (the roster names {_listed(course, 4)})"
            for stem in graded if stem not in columns]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def write_canvas(out: Path, rows: list[Row], roster: list[Student] = (), matched: dict[str, Student] | None = None,
                 columns: dict[str, CanvasAssignment] | None = None) -> tuple[list[Path], list[str]]:
    """The grades as files for Canvas's gradebook import, in the layout Canvas's own export
    has: ``Student, ID, SIS User ID, SIS Login ID, Section``, one column per chapter (its
    points, the sum of its exercises'), and under the header a ``Points Possible`` row with
    each chapter's maximum. Canvas finds a student by ``ID``, ``SIS User ID`` or ``SIS Login
    ID``, from the roster (Canvas's export works as it is); a submission no roster entry
    matched, or one of several matched to one entry, is left out and named in the problems.

    Canvas's import posts every cell that differs from the grade Canvas has, an empty cell
    included, which clears it (``gradebook_importer.rb``, ``no_change_to_value?``), and
    leaves a student the file does not name alone. So a file holds only students with a
    grade in every one of its columns: ``gradebook_canvas.csv`` when every chapter was graded
    for the same students, else one ``gradebook_canvas_<chapter>.csv`` per chapter. A grade
    the grader did not give (nothing handed in, a notebook waiting for review) is no cell at
    all, so a grade typed in SpeedGrader stays. ``columns`` (:func:`canvas_columns`): a
    chapter's column is named as the course's assignment it updates (``Week 1: KV memory
    (90001)``; its Points Possible the export's), else by the chapter (a new assignment).
    Files of an earlier run that this one does not write are deleted. Returns the files
    written and the problems (for needs_review.md)."""
    matched, columns = matched or {}, columns or {}
    known = graded_chapters(rows)
    graded = [r for r in rows if r.exercise]
    chapters = sorted({r.chapter for r in graded})
    possible = {c: max((sum(r.max_points for r in graded if r.chapter == c and r.student == s)
                        for s in {r.student for r in graded}), default=0) for c in chapters}
    problems = _points_problems(chapters, possible, columns)
    ids, left_out = _canvas_students(sorted({r.student for r in rows}), matched)
    problems += left_out
    files, split = _canvas_files(chapters, {c: [s for s in ids if (s, c) in known] for c in chapters})
    problems += split
    paths = []
    for name, mine in files:
        students = [s for s in ids if (s, mine[0]) in known]
        header = [columns[c].header if c in columns else c for c in mine]
        most = [columns[c].points if columns.get(c) and columns[c].points else num(possible[c]) for c in mine]
        table = [[*CANVAS_FIELDS, *header], [CANVAS_POINTS_CELL, "", "", "", "", *most]]
        for s in students:
            who = ids[s]
            table.append([who.name or s, who.id, who.sis_user_id, who.sis_login_id, who.section,
                          *[num(sum(r.points for r in graded if r.student == s and r.chapter == c)) for c in mine]])
        paths.append(_write_table(out / name, table))
    for stale in out.glob("gradebook_canvas*.csv"):
        if stale not in paths:
            stale.unlink()
    return paths, problems


def _write_table(path: Path, table: list[list]) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        for row in table:
            w.writerow(csv_row(row))
    os.replace(tmp, path)
    return path


def _points_problems(chapters: list[str], possible: dict[str, float], columns: dict[str, CanvasAssignment]
                     ) -> list[str]:
    """A line for each chapter whose assignment is worth other points in Canvas."""
    problems = []
    for c in chapters:
        theirs = _number(columns[c].points) if c in columns else None
        if theirs is not None and abs(theirs - possible[c]) > 1e-9:
            problems.append(f"gradebook_canvas.csv: {columns[c].header} is worth {columns[c].points} points in "
                            f"Canvas, {c} {num(possible[c])} here; the import writes the grader's points, so "
                            f"full marks show as {num(possible[c])} / {columns[c].points}: set the "
                            f"assignment's points to {num(possible[c])} in Canvas, or rescale")
    return problems


def _canvas_students(students: list[str], matched: dict[str, Student]) -> tuple[dict[str, Student], list[str]]:
    """{submission: roster entry} for the submissions Canvas can tell apart, and a line for
    each one left out: no roster entry (no Canvas id), or an entry several submissions share
    (Canvas would keep one of the rows; which is not ours to guess)."""
    claims: dict[str, list[str]] = {}
    for s in students:
        if s in matched:
            claims.setdefault(matched[s].id, []).append(s)
    ids, problems = {}, []
    for s in students:
        who = matched.get(s)
        if who is None:
            problems.append(f"gradebook_canvas.csv: {s} is left out (no roster entry, so no Canvas id)")
        elif len(claims[who.id]) > 1:
            if s == claims[who.id][0]:
                problems.append(f"gradebook_canvas.csv: Canvas id {who.id} is left out: several submissions "
                                f"({', '.join(claims[who.id])}) are that student; grade it by hand")
        else:
            ids[s] = who
    return ids, problems


def _canvas_files(chapters: list[str], graded: dict[str, list[str]]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """Which file holds which chapters: one file when every chapter was graded for the same
    students, else one per chapter; a chapter nobody has a grade for has none. ``graded``:
    {chapter: the submissions with a grade in it}. Returns [(file name, chapters)] and the
    lines that say why a file is missing or the grades are split."""
    problems = [f"gradebook_canvas.csv: no student with a Canvas id has a grade in {c} (nothing handed in, a "
                "notebook waiting for review, or no roster entry): no file for it, so Canvas keeps what it has"
                for c in chapters if not graded[c]]
    chapters = [c for c in chapters if graded[c]]
    if len({tuple(graded[c]) for c in chapters}) <= 1:
        return ([("gradebook_canvas.csv", chapters)] if chapters else []), problems
    files = [(f"gradebook_canvas_{c}.csv", [c]) for c in chapters]
    problems.append(f"gradebook_canvas.csv is split into {', '.join(n for n, _ in files)}: the students with a "
                    "grade differ between chapters, and Canvas's import clears a grade whose cell is empty, so "
                    "each file names only the students with a grade in its column; import each of them")
    return files, problems
