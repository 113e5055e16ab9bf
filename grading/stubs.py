"""Generate exercise notebooks (stubs) from solution notebooks.

``solutions/`` is the one source of truth: ``make exercises`` rewrites
``exercises/`` from it, and a test fails when the two drift apart. The translated
editions' exercises (``exercises/zh_CN/``) are the same stubs with their markdown cells
translated through the book's catalogues (``locales/``, :mod:`tools.i18n`): the same code,
graded alike. First it writes
nbgrader's cell metadata and the autograder cells into the solutions themselves
(:mod:`grading.nbgrader`; the points come from the graders), so the exercises carry
them too.

    python -m grading.stubs [--check] [SOLUTIONS_DIR] [EXERCISES_DIR]
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

from grading.layout import ROOT, cell_source
from grading.notebook.regions import replace_regions, stub_lines

NB_VERSION = 4


def make_stub(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """The exercise notebook for one solution notebook: regions replaced, outputs dropped."""
    stub = copy.deepcopy(solution)
    for index, cell in enumerate(stub.cells):
        cell.pop("id", None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.source = replace_regions(cell_source(cell), stub_lines, where=f"{name} cell {index}")
        cell.metadata.pop("execution", None)
    stub.metadata.pop("widgets", None)
    return stub


def render(nb: nbformat.NotebookNode) -> str:
    """Byte-stable JSON text of a notebook (what is written and compared)."""
    return nbformat.writes(nb, version=NB_VERSION) + "\n"


def expected_stubs(solutions: Path) -> dict[str, str]:
    out = {}
    for path in sorted(solutions.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=NB_VERSION)
        out[path.name] = render(make_stub(nb, path.name))
    return out


# The grading command a notebook prints: `--notebooks exercises/` (the folder it grades).
NOTEBOOKS_OPTION = re.compile(r"(--notebooks\s+)exercises/(?=[\s`]|$)", re.M)


def grade_own_folder(nb: nbformat.NotebookNode, folder: str) -> nbformat.NotebookNode:
    """``nb`` with the grading commands of its markdown cells pointed at ``folder``
    (``exercises/zh_CN/``): a command copied from a translated notebook must grade that
    notebook, not the English stub of the same name in ``exercises/``."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = NOTEBOOKS_OPTION.sub(lambda m: m.group(1) + folder, cell_source(cell))
    return nb


def translated_stubs(stubs: dict[str, str]) -> dict[str, str]:
    """``zh_CN/NN_topic.ipynb`` -> text, for each stub and translated edition."""
    from tools import i18n

    out = {}
    for language in i18n.LANGUAGES:
        for name, text in stubs.items():
            nb = nbformat.reads(text, as_version=NB_VERSION)
            translated = i18n.translate_notebook(nb, language, f"exercises/{Path(name).stem}")
            out[f"{language}/{name}"] = render(grade_own_folder(translated, f"exercises/{language}/"))
    return out


def annotated_solutions(solutions: Path) -> dict[str, str]:
    """The text of each solution notebook with its nbgrader metadata and autograder cells
    as they should be (:func:`grading.nbgrader.annotate`), for the notebooks of chapters
    that have graders (a notebook without graders yet is left as it is)."""
    from grading.layout import discover_chapters
    from grading.nbgrader import annotate, exercise_points

    stems = {p.stem for p in solutions.glob("*.ipynb")}
    chapters = [c for c in discover_chapters() if c.stem in stems]
    points = exercise_points(chapters) if chapters else {}
    out = {}
    for c in chapters:
        path = solutions / f"{c.stem}.ipynb"
        nb = nbformat.read(path, as_version=NB_VERSION)
        out[path.name] = render(annotate(nb, c.stem, points[c.stem], path.name))
    return out


def _sync(expected: dict[str, str], folder: Path, check: bool) -> list[str]:
    """Write each notebook of ``expected`` into ``folder`` where it differs (or only list
    those, with ``check``); the names that differed."""
    stale = []
    for name, text in expected.items():
        target = folder / name
        current = target.read_text() if target.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {target}")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("solutions", nargs="?", type=Path, default=ROOT / "solutions")
    parser.add_argument("exercises", nargs="?", type=Path, default=ROOT / "exercises")
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    parser.add_argument("--no-nbgrader", action="store_true",
                        help="leave the solutions' nbgrader metadata as it is (no graders are collected)")
    args = parser.parse_args(argv)
    unannotated = [] if args.no_nbgrader else _sync(annotated_solutions(args.solutions), args.solutions, args.check)
    stubs = expected_stubs(args.solutions)
    stale = _sync(stubs, args.exercises, args.check) + _sync(translated_stubs(stubs), args.exercises, args.check)
    if args.check and unannotated:
        print("solutions/ lacks the nbgrader metadata the graders give for: " + ", ".join(unannotated)
              + " (run `make exercises`)", file=sys.stderr)
    if args.check and stale:
        print("exercises/ is out of date for: " + ", ".join(stale) + " (run `make exercises`)", file=sys.stderr)
    return 1 if args.check and (stale or unannotated) else 0


if __name__ == "__main__":
    sys.exit(main())
