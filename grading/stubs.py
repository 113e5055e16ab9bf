"""Generate exercise notebooks (stubs) from solution notebooks.

``solutions/`` is the one source of truth: ``make exercises`` rewrites
``exercises/`` from it, and a test fails when the two drift apart.

    python -m grading.stubs [--check] [SOLUTIONS_DIR] [EXERCISES_DIR]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

from grading.layout import ROOT, cell_source
from grading.regions import replace_regions, stub_lines

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("solutions", nargs="?", type=Path, default=ROOT / "solutions")
    parser.add_argument("exercises", nargs="?", type=Path, default=ROOT / "exercises")
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for name, text in expected_stubs(args.solutions).items():
        target = args.exercises / name
        current = target.read_text() if target.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {target}")
    if args.check and stale:
        print("exercises/ is out of date for: " + ", ".join(stale) + " (run `make exercises`)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
