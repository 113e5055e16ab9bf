"""Which chapters exist, and which of a student's notebooks is which chapter.

Chapters are discovered, not listed: a chapter is a ``tests/test_NN_topic.py`` whose
``solutions/NN_topic.ipynb`` exists, so the batch grader grades however many
chapters the book has today.

Students rename notebooks (``01_kv_memory (1).ipynb``, ``Copy of 01_kv_memory.ipynb``,
``chapter1_memory.ipynb``). A name is matched to a chapter by its number and its
topic words; a name whose number and words disagree, that fits no chapter or that
fits several, is reported as unmatched, never guessed.
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

from grading.notebook.untrusted import (LINK, digest_untrusted, entry_kind, not_a_regular_file,  # noqa: F401
                                       read_untrusted, walk_untrusted)
from grading.layout import Chapter

# A zip is read, not trusted: only notebooks come out of it, and not too many bytes.
MAX_ZIP_NOTEBOOK_BYTES = 200 * 2**20
IGNORED_PARTS = {"__MACOSX", ".ipynb_checkpoints", ".git", "__pycache__"}
# Words that say "this is homework", not which chapter it is.
FILLER = {"copy", "of", "chapter", "ch", "exercise", "exercises", "solution", "solutions", "lab", "hw", "homework",
          "notebook", "final", "submission", "my", "ipynb"}




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


@dataclass
class Submission:
    """One student's notebooks, matched to chapters."""

    student: str
    notebooks: dict[str, Path] = field(default_factory=dict)  # chapter stem -> notebook file
    unmatched: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)  # chapter stem -> competing files
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
    without the first part, which is ours, not the student's."""
    rel = path.relative_to(folder)
    return str(Path(*rel.parts[1:])) if copied and len(rel.parts) > 1 else str(rel)


def match_folder(student: str, folder: Path, chapters: list[Chapter], copied: bool = False) -> Submission:
    """Match every notebook under ``folder`` (any depth) to a chapter. Several files for
    one chapter: an exactly named one wins; identical copies are one file; otherwise
    the chapter is ambiguous and goes to review. ``copied``: ``folder`` is our copy of the
    student's files (:func:`shown_name`), so that messages name the student's files only."""
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
    for stem, files in candidates.items():
        exact = [p for p, e in files if e]
        pool = exact if len(exact) == 1 else [p for p, _ in files]
        if len({_sha(p) for p in pool}) == 1:
            sub.notebooks[stem] = pool[0]
        else:
            sub.ambiguous[stem] = sorted(shown_name(p, folder, copied) for p in pool)
    return sub


def submission_digest(entry: Path) -> str:
    """A hash of a submission's content (a zip's bytes; a folder's file names and bytes,
    at any depth): equal digests, equal submissions, whatever the files' times. A link is
    hashed by its name and what it says it points to, a FIFO or a device by its name and
    kind: neither is followed or read. OSError where a regular file cannot be read."""
    h = hashlib.sha256()
    files, others = walk_untrusted(entry)
    for path in files:
        h.update(str(path.relative_to(entry)).encode() if path != entry else b"")
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
    """(student, folder-or-zip) for every entry, sorted; and the entries ignored.
    ``skip``: entry names already taken as an LMS's bulk download (:func:`grading.classroom.lms.gather`)."""
    students, ignored = [], []
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith(".") or entry.name in IGNORED_PARTS or entry.name in skip:
            continue
        if entry.is_dir():  # a link to a folder too: listed, so that opening it refuses it for review
            students.append((entry.name, entry))
        elif entry.suffix.lower() == ".zip":
            students.append((entry.stem, entry))
        else:
            ignored.append(entry.name)
    names = [s for s, _ in students]
    dupes = {n for n in names if names.count(n) > 1}
    # "alice/" and "alice.zip" side by side: keep both, visibly.
    students = [(f"{s}.zip" if s in dupes and p.suffix == ".zip" else s, p) for s, p in students]
    return students, ignored

