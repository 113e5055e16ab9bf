"""Which submission a per-student sheet means: one resolver of a student key.

An instructor's sheets (``--overrides``, ``--submitted``) name a student on each line, by
whatever id is at hand: the submission's name (its folder, zip or LMS name), what an LMS's
file names said (Canvas's user id, :mod:`grading.classroom.lms`), or any id of the roster
entry matched to it (Canvas's ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Integration
ID``; a folder or login column; the email, its part before ``@``, or the name,
:meth:`grading.classroom.exports.Student.keys`). Keys are compared without case,
punctuation or spaces (:func:`grading.classroom.exports.name_key`).

A key that names no one, or several submissions, is a mistake in the sheet: the run
stops before grading, naming the line (a grade silently left unchanged is worse). A key
that names a roster entry with no submission names a student who handed in nothing: the
line applies to no one, and the caller says so.
"""

from __future__ import annotations

from grading.classroom.exports import Student, name_key


class StudentKeys:
    """The keys of every submission of a run, for :meth:`resolve`.

    ``submissions``: the submissions' names; ``matched``: {submission: its roster entry}
    (:func:`grading.classroom.exports.match_roster`); ``aliases``: {submission: what an
    LMS's names said of it}; ``roster``: every roster entry, those without a submission too."""

    def __init__(self, submissions: list[str], matched: dict[str, Student] | None = None,
                 aliases: dict[str, list[str]] | None = None, roster: list[Student] = ()):
        self.by_key: dict[str, set[str]] = {}
        matched, aliases = matched or {}, aliases or {}
        for s in submissions:
            who = matched.get(s)
            for key in (s, *aliases.get(s, []), *(who.keys() if who else [])):
                if name_key(key):
                    self.by_key.setdefault(name_key(key), set()).add(s)
        taken = {x.id for x in matched.values()}  # roster ids are unique (read_roster)
        self.absent = {name_key(k) for x in roster if x.id not in taken for k in x.keys() if name_key(k)}

    def resolve(self, key: str, where: str) -> str | None:
        """The submission ``key`` names; None when it names only a roster entry that has no
        submission. Raises ValueError, beginning with ``where`` (the sheet and line), when it
        names no student at all, or several submissions."""
        fits = self.by_key.get(name_key(key), set())
        absent = name_key(key) in self.absent
        if len(fits) == 1 and not absent:
            return next(iter(fits))
        if fits:
            who = ", ".join(sorted(fits)) + (" and a roster entry with no submission" if absent else "")
            raise ValueError(f"{where}: {key!r} names several students ({who}); "
                             "give an id that names one (Canvas's ID, SIS User ID or SIS Login ID)")
        if absent:
            return None
        raise ValueError(f"{where}: {key!r} names no student: it is neither a submission's name nor the ID, "
                         "SIS User ID, SIS Login ID, email or name of a roster entry (--roster)")
