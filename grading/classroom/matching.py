"""Which chapters exist, and which of a student's notebooks is which chapter.

Chapters are discovered, not listed: a chapter is a ``tests/test_NN_topic.py`` whose
``solutions/NN_topic.ipynb`` exists, so the class run grades however many
chapters the book has today.

Students rename notebooks (``01_kv_memory (1).ipynb``, ``Copy of 01_kv_memory.ipynb``,
``chapter1_memory.ipynb``). A name is matched to a chapter by its number and its
topic words; a name whose number and words disagree, that fits no chapter or that
fits several, is reported as unmatched, never guessed. Several different notebooks for
one chapter: the newest attempt, where an LMS's names order them (:class:`Attempt`), else
the one named exactly as the chapter; every other one is listed (:class:`NotGraded`).

A name is bytes until proven text: one that is not UTF-8 (a zip or a git clone makes
them) is shown and recorded in an escaped form (:func:`readable`), never written raw.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grading.layout import Chapter
from grading.notebook.untrusted import LINK, digest_untrusted, entry_kind, not_a_regular_file, walk_untrusted

# A zip is read, not trusted: only notebooks come out of it, and not too many bytes.
MAX_ZIP_NOTEBOOK_BYTES = 200 * 2**20
IGNORED_PARTS = {"__MACOSX", ".ipynb_checkpoints", ".git", "__pycache__"}
# Words that say "this is homework", not which chapter it is.
FILLER = {"copy", "of", "chapter", "ch", "exercise", "exercises", "solution", "solutions", "lab", "hw", "homework",
          "notebook", "final", "submission", "my", "ipynb"}




def readable(name: str) -> str:
    """``name`` as text any file can hold. A name read from the file system whose bytes are
    not UTF-8 arrives with each bad byte as a lone surrogate (``os.fsdecode``'s
    ``surrogateescape``), which no UTF-8 writer accepts; each such byte is written ``\\xNN``
    (``b"caf\\xe9"`` -> ``'caf\\\\xe9'``). Any other name comes back unchanged."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file system name decodes to: escaped as itself
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def name_problem(name: str) -> str:
    """Why the entry ``name`` (a student's folder, zip or download file) needs a person, or
    "": a name that is not UTF-8 is graded under its :func:`readable` form, which may not
    be how the student or the roster spells it."""
    if readable(name) == name:
        return ""
    return (f"the name {readable(name)} is not UTF-8 text (a zip or a git clone wrote it; each byte that is "
            "not is shown as \\xNN): graded under that name; check whose submission it is")


def normalize(name: str) -> str:
    """``'Copy of 01_KV-Memory (2).ipynb'`` -> ``'01_kv_memory'``."""
    s = re.sub(r"\.ipynb$", "", name.strip(), flags=re.I)
    s = re.sub(r"^(copy\s+of\s+)+", "", s, flags=re.I)
    # Trailing marks of a copy: " (1)", " - Copy", " copy 2", "_copy", "-checkpoint".
    s = re.sub(r"(\s*\(\d+\)|[\s_-]*-?\s*copy(\s*\(?\d+\)?)?|-checkpoint|_v\d+)+$", "", s, flags=re.I)
    return re.sub(r"[^a-z0-9]+", "_", s.lower()).strip("_")


def _number_and_words(normalized: str) -> tuple[int | None, set[str]]:
    m = re.match(r"^(?:(?:chapter|ch|exercises?|ex|lab|hw)_?)?(\d{1,2})(?:_|$)", normalized)
    number = int(m.group(1)) if m else None
    rest = normalized[m.end():] if m else normalized
    words = {w for w in rest.split("_") if w and not w.isdigit()} - FILLER
    return number, words


@dataclass
class Match:
    chapter: Chapter | None
    exact: bool = False
    reason: str = ""  # why it did not match


def match_name(name: str, chapters: list[Chapter]) -> Match:
    """The chapter a notebook file name means, or why it means none."""
    normalized = normalize(name)
    for c in chapters:
        if normalized == c.stem:
            return Match(c, exact=Path(name).stem == c.stem)
    number, words = _number_and_words(normalized)
    if number is not None:
        by_number = [c for c in chapters if c.number == number]
        if not by_number:
            return Match(None, reason=f"its number {number} is not a chapter being graded")
        c = by_number[0]
        if not words or words & c.words:
            return Match(c)
        return Match(None, reason=f"its number says chapter {c.stem} but its words ({', '.join(sorted(words))}) do not")
    if words:
        best = max(len(words & c.words) for c in chapters)
        fits = [c for c in chapters if best and len(words & c.words) == best]
        if len(fits) == 1:
            return Match(fits[0])
        if len(fits) > 1:
            return Match(None, reason="its words fit several chapters: " + ", ".join(c.stem for c in fits))
    return Match(None, reason="it names no chapter (expected a name like 01_kv_memory.ipynb)")


@dataclass(frozen=True)
class Attempt:
    """When an LMS's name says a file was handed in, as an order: of two files of one
    student, the one with the higher ``rank`` is the newer (Canvas: ``(attachment id,)``,
    which Canvas numbers in upload order; Blackboard: ``(attempt time,)``). ``label`` names
    it for a person ("Canvas attachment 700603"). Canvas's ``-N`` before a file's extension
    (its ``copy`` here, of the name ``base`` without it) marks a later upload of a file of
    that name; where it orders two files otherwise than their ranks, nothing is guessed."""

    rank: tuple
    label: str
    base: str = ""
    copy: int = 0


@dataclass(frozen=True)
class NotGraded:
    """A chapter for which several different notebooks were handed in: the one ``graded``
    and every other one (``files``), each as the student knows it, and why that one."""

    chapter: str
    graded: str
    files: tuple[str, ...]
    why: str

    def text(self) -> str:
        """The review line: what was graded, and every file that was not."""
        return f"{self.chapter}: graded {self.graded}; not graded: {', '.join(self.files)} ({self.why})"


@dataclass
class Submission:
    """One student's notebooks, matched to chapters."""

    student: str
    notebooks: dict[str, Path] = field(default_factory=dict)  # chapter stem -> notebook file
    unmatched: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)  # chapter stem -> competing files
    not_graded: list[NotGraded] = field(default_factory=list)  # chapters chosen among different files
    problem: str = ""  # the whole submission could not be read (a bad zip)


def _sha(path: Path) -> str:
    return digest_untrusted(path)  # in chunks: a 500 MB file costs the batch one chunk


def _hidden(rel: Path) -> bool:
    return any(p in IGNORED_PARTS or p.startswith((".", "._")) for p in rel.parts)


def _notebook_files(folder: Path) -> list[Path]:
    """The notebooks under ``folder``, links and FIFOs named ``.ipynb`` among them (so
    that they are listed for review), found without following a link."""
    files, others = walk_untrusted(folder)
    found = [p for p in files + [p for p, _ in others]
             if p.suffix.lower() == ".ipynb" and not _hidden(p.relative_to(folder))]
    return sorted(found)


def shown_name(path: Path, folder: Path, copied: bool = False) -> str:
    """``path`` as the student knows it: relative to their ``folder``; for a ``copied``
    folder (a zip unpacked, an LMS's files gathered: ``NNN/name`` in a scratch folder),
    without the first part, which is ours, not the student's. Always :func:`readable`."""
    rel = path.relative_to(folder)
    return readable(str(Path(*rel.parts[1:])) if copied and len(rel.parts) > 1 else str(rel))


def match_folder(student: str, folder: Path, chapters: list[Chapter], copied: bool = False,
                 attempts: dict[str, Attempt] | None = None) -> Submission:
    """Match every notebook under ``folder`` (any depth) to a chapter. Several different
    files for one chapter: :func:`_choose` picks one, and the others are listed in
    ``not_graded``; identical copies are one file. ``copied``: ``folder`` is our copy of the
    student's files (:func:`shown_name`), so that messages name the student's files only.
    ``attempts``: what an LMS's names said of when each file was handed in, by its path
    relative to ``folder`` (:func:`grading.classroom.lms.gather`)."""
    sub = Submission(student)
    candidates: dict[str, list[tuple[Path, bool]]] = {}
    for path in _notebook_files(folder):
        m = match_name(path.name, chapters)
        shown = shown_name(path, folder, copied)
        if not_a_regular_file(path):
            sub.unmatched.append((shown, f"{entry_kind(path) or LINK}; it is not graded"))
        elif m.chapter is None:
            sub.unmatched.append((shown, m.reason))
        else:
            candidates.setdefault(m.chapter.stem, []).append((path, m.exact))
    when = {p: (attempts or {}).get(str(p.relative_to(folder))) for files in candidates.values() for p, _ in files}

    def shown(p: Path) -> str:  # as the student knows it, with when the LMS says it came
        return shown_name(p, folder, copied) + (f" ({when[p].label})" if when[p] else "")

    for stem, files in candidates.items():
        if len(files) == 1:
            sub.notebooks[stem] = files[0][0]
            continue
        sha = {p: _sha(p) for p, _ in files}
        chosen, why = (files[0][0], "") if len(set(sha.values())) == 1 else _choose(files, when)
        if chosen is None:
            sub.ambiguous[stem] = sorted(shown(p) for p, _ in files)
            continue
        sub.notebooks[stem] = chosen
        others = tuple(sorted(shown(p) for p, _ in files if sha[p] != sha[chosen]))
        if others:  # identical copies are the same work: only different files are listed
            sub.not_graded.append(NotGraded(stem, shown(chosen), others, why))
    return sub


def _choose(files: list[tuple[Path, bool]], when: dict[Path, Attempt | None]) -> tuple[Path | None, str]:
    """Which of several different ``files`` (path, named exactly) for one chapter is graded,
    and why; (None, "") when the names cannot tell (a person decides). Where every file has
    an LMS's :class:`Attempt`, the newest: an exactly named older file never beats it; two
    of the newest rank, or Canvas's ``-N`` marks ordering two files of one name against
    their ranks, and nothing is chosen. Where none has one, the one named exactly as the
    chapter, if only one is. A mix of both: nothing is chosen."""
    known = [p for p, _ in files if when[p] is not None]
    if known and len(known) < len(files):
        return None, ""
    if known:
        ranked = sorted(known, key=lambda p: when[p].rank)
        newest = ranked[-1]
        disagree = any(when[a].base == when[b].base and when[a].copy != when[b].copy
                       and (when[a].copy < when[b].copy) != (when[a].rank < when[b].rank)
                       for a in known for b in known)
        if disagree or when[ranked[-2]].rank == when[newest].rank:
            return None, ""
        return newest, "older attempts, as the LMS's names order them"
    exact = [p for p, e in files if e]
    if len(exact) == 1:
        return exact[0], ("named exactly as the chapter; the names do not say which is newer, "
                          "so check that it is the work to grade")
    return None, ""


def submission_digest(entry: Path) -> str:
    """A hash of a submission's content (a zip's bytes; a folder's file names and bytes,
    at any depth): equal digests, equal submissions, whatever the files' times. A link is
    hashed by its name and what it says it points to, a FIFO or a device by its name and
    kind: neither is followed or read. OSError where a regular file cannot be read."""
    h = hashlib.sha256()
    files, others = walk_untrusted(entry)
    for path in files:
        h.update(os.fsencode(path.relative_to(entry)) if path != entry else b"")  # a name's bytes, whatever they are
        h.update(b"\0" + _sha(path).encode() + b"\n")
    for path, kind in others:
        target = os.readlink(path) if path.is_symlink() else ""
        h.update(f"{path.relative_to(entry) if path != entry else ''}\0{kind}\0{target}\n".encode(errors="replace"))
    return h.hexdigest()


def unpack_zip(path: Path, dest: Path) -> str:
    """Extract only the notebooks of a zip into ``dest`` (flat names, no paths taken
    from the archive). Returns a problem description, or "" when it worked."""
    kind = entry_kind(path)
    if kind:  # a link or a FIFO named .zip: never opened
        return f"{path.name} {kind}; it is not graded"
    try:
        with zipfile.ZipFile(path) as zf:
            members = [i for i in zf.infolist() if i.filename.lower().endswith(".ipynb") and not i.is_dir()]
            members = [i for i in members if not any(p in IGNORED_PARTS or p.startswith((".", "._"))
                                                     for p in Path(i.filename).parts)]
            # A symbolic link stored in the zip (Unix mode bits in external_attr): unpacked,
            # it would become a file that names another; it is listed, never graded.
            links = [i for i in members if stat.S_ISLNK(i.external_attr >> 16)]
            if links:
                return (f"{path.name} holds {Path(links[0].filename).name}, which {LINK}; "
                        "hand in the notebook itself")
            if sum(i.file_size for i in members) > MAX_ZIP_NOTEBOOK_BYTES:
                return f"the notebooks in {path.name} are larger than {MAX_ZIP_NOTEBOOK_BYTES // 2**20} MB unpacked"
            dest.mkdir(parents=True, exist_ok=True)
            for n, info in enumerate(members):
                # Keep the file name (it is what we match) but never the archive's path.
                name = Path(info.filename.replace("\\", "/")).name
                target = dest / f"{n:03d}" / name
                target.parent.mkdir()
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
    except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError) as exc:
        return f"{path.name} is not a readable zip file ({type(exc).__name__}: {exc})"
    return ""


def list_students(submissions: Path, skip: set[str] = frozenset()) -> tuple[list[tuple[str, Path]], list[str]]:
    """(student, folder-or-zip) for every entry, sorted; and the entries ignored. A student
    is named by the entry's :func:`readable` name (its path stays the entry's own).
    ``skip``: entry names already taken as an LMS's bulk download (:func:`grading.classroom.lms.gather`)."""
    students, ignored = [], []
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith(".") or entry.name in IGNORED_PARTS or entry.name in skip:
            continue
        if entry.is_dir():  # a link to a folder too: listed, so that opening it refuses it for review
            students.append((readable(entry.name), entry))
        elif entry.suffix.lower() == ".zip":
            students.append((readable(entry.stem), entry))
        else:
            ignored.append(readable(entry.name))
    names = [s for s, _ in students]
    dupes = {n for n in names if names.count(n) > 1}
    # "alice/" and "alice.zip" side by side: keep both, visibly.
    students = [(f"{s}.zip" if s in dupes and p.suffix == ".zip" else s, p) for s, p in students]
    taken: set[str] = set()
    for n, (s, p) in enumerate(students):  # an escaped name equal to another's: never one entry for both
        while s in taken:
            s += "_"
        taken.add(s)
        students[n] = (s, p)
    return students, ignored
