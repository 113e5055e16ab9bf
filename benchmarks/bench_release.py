"""``make bench`` records of the student edition (``make release``).

- ``release.reference_source_lines``: lines of reference implementation in the release:
  the non-blank lines of every ``tests/references/*.py`` it ships, and the lines of each
  reference function whose body is found in one of its files (``grading.release.reference_leaks``). Goal ``== 0``: a
  grader that students run at home must hold expected values, not reference code.
- ``release.zip_mib``: the size of ``_build/release.zip``. Goal ``<= 50``.
- ``release.diagnose_recall``: of every catalogue bug, injected alone into its chapter's
  solution and graded from inside ``_build/release`` (its own graders, ``grading/`` and
  diagnosis tables; only the bug's exercise, ``-m exN_M``), the fraction whose output names
  the bug's own hint as the known mistake. Goal ``>= 0.9``.
- ``release.false_diagnoses``: of those, the ones that name another bug's hint. Goal ``== 0``.

They read the release that ``make release`` wrote last (``make test`` writes one); a
missing release records NaN with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from benchmarks.records import Record
from grading.judge.diagnosis import load_table
from grading.layout import RELEASE, SOLUTIONS, discover_chapters
from grading.notebook.catalogue import load_catalogue

KNOWN = "This looks like a known mistake: "


def reference_source_lines(folder: Path = RELEASE) -> int:
    """Non-blank lines of any ``tests/references/*.py`` shipped, plus the lines of every
    function of the references whose body appears in a file of the release."""
    from grading.release import reference_leaks

    shipped = sum(1 for path in sorted((folder / "tests" / "references").glob("*.py"))
                  for line in path.read_text().splitlines() if line.strip())
    functions = {found.split(": the reference function ", 1)[-1] for found in reference_leaks(folder)
                 if ": the reference function " in found}
    spans = [re.search(r"\(lines (\d+)-(\d+)\)$", where) for where in functions]
    return shipped + sum(int(m.group(2)) - int(m.group(1)) + 1 for m in spans if m)


def _graded_from_release(stem: str, bug, folder: Path) -> str:
    """The release's pytest output for the chapter's solution with ``bug`` in it."""
    notebook = bug.apply(nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4))
    nbformat.write(notebook, folder / f"{stem}.ipynb")
    marker = "ex" + bug.exercise.replace(".", "_")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(RELEASE)}
    done = subprocess.run([sys.executable, "-m", "pytest", f"tests/test_{stem}.py", "-p", "no:cacheprovider", "-q",
                           "-n", "0", "-m", marker, "--notebooks", str(folder)], cwd=RELEASE, env=env,
                          capture_output=True, text=True)
    return done.stdout


def recall(stems: list[str] | None = None, log=print) -> tuple[int, int, list[str], list[str]]:
    """(bugs, diagnosed as themselves, the bugs missed, the bugs named as another) over the
    chapters ``stems``, each chapter's count logged as it ends."""
    bugs = diagnosed = 0
    missed, false = [], []
    for chapter in discover_chapters():
        if stems is not None and chapter.stem not in stems:
            continue
        table = load_table(chapter.stem)
        mine = load_catalogue(chapter.stem)
        found = 0
        for bug in mine:
            with tempfile.TemporaryDirectory(prefix="release-bug-") as tmp:
                out = _graded_from_release(chapter.stem, bug, Path(tmp))
            # The message ends the hint with a full stop: without it, one hint that begins another
            # ("... of the scores", "... of the scores in dQ") would be found in both.
            named = {name for name, row in table.items() if f"{KNOWN}{row['hint'].rstrip('.')}." in out}
            found += bug.name in named
            if bug.name not in named:
                missed.append(f"{chapter.stem[:2]}/{bug.name}")
            if named - {bug.name}:
                false.append(f"{chapter.stem[:2]}/{bug.name} as {', '.join(sorted(named - {bug.name}))}")
        bugs += len(mine)
        diagnosed += found
        log(f"   release diagnosis, {chapter.stem}: {found} of {len(mine)}")
    return bugs, diagnosed, missed, false


def run() -> list[Record]:
    if not (RELEASE / "README.md").is_file():
        why = "no _build/release: run make release first"
        return [Record(n, float("nan"), u, g, note=why) for n, u, g in (
            ("release.reference_source_lines", "lines", "== 0"), ("release.zip_mib", "MiB", "<= 50"),
            ("release.diagnose_recall", "fraction", ">= 0.9"), ("release.false_diagnoses", "count", "== 0"))]
    bugs, diagnosed, missed, false = recall()
    return [
        Record("release.reference_source_lines", reference_source_lines(), "lines", "== 0",
               note="tests/references/*.py lines shipped, and lines of reference functions found in _build/release"),
        Record("release.zip_mib", RELEASE.with_suffix(".zip").stat().st_size / 2**20, "MiB", "<= 50"),
        Record("release.diagnose_recall", diagnosed / bugs if bugs else float("nan"), "fraction", ">= 0.9",
               note=f"{diagnosed} of {bugs} catalogue bugs, each graded from inside _build/release; missed: "
                    + (", ".join(missed) or "none")),
        Record("release.false_diagnoses", len(false), "count", "== 0",
               note=f"of {bugs} catalogue bugs" + (": " + "; ".join(false) if false else "")),
    ]
