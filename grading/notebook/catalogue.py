"""The catalogue of wrong implementations.

Each chapter keeps, in ``tests/catalogue/<stem>.py``, a list ``BUGS`` of the
mistakes people really make. A bug is the solution notebook with one change:

- ``code``: the whole solution region of ``exercise`` replaced by this code
  (indentation is added to match the region), or
- ``old``/``new``: one exact text substitution inside that exercise's cell(s),
  which must match exactly once.

``pytest --prove`` runs the graders against every bug and fails unless each bug is
rejected by at least one test (and says which). In a chapter graded exercise by
exercise, a bug whose change lies inside its own exercise's regions
(:meth:`Bug.inside_its_regions`) runs against that exercise's tests only: the other
exercises' tests reach its code only through a call that the graders answer with the
reference, and their ``alone`` runs (the stubs with only that exercise solved) already
prove that they pass whatever the other regions hold. Any other bug runs against every
test of the chapter.
"""

from __future__ import annotations

import importlib.util
import textwrap
from dataclasses import dataclass

import nbformat

from grading.layout import CATALOGUE, cell_source
from grading.notebook.regions import exercises_in, replace_regions

CATALOGUE_DIR = CATALOGUE


@dataclass(frozen=True)
class Bug:
    name: str  # short id, shown in test ids: "forgot_kv_factor_2"
    exercise: str  # "1.1"
    why: str  # the mistake in one sentence
    code: str | None = None
    old: str | None = None
    new: str | None = None
    tests: str | None = None  # optional substring: only tests whose name contains it run against this bug
    # What a student who made this mistake is told (grading.diagnosis): ``why`` unless set,
    # and where the book teaches it (found in the chapter unless set).
    hint: str | None = None
    section: str | None = None
    # The kind of mistake this is, where a check recognises the kind without this entry
    # (a key of grading.diagnosis.KINDS): --prove then checks that a check recognises it.
    kind: str | None = None

    def apply(self, nb: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
        """A copy of the solution notebook ``nb`` with this bug in it."""
        if (self.code is None) == (self.old is None):
            raise ValueError(f"bug {self.name}: give either code or old/new")
        nb = nbformat.from_dict(nb)
        hits = 0
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            source = cell_source(cell)
            if self.exercise not in exercises_in(source, f"{name} cell {index}"):
                continue
            if self.code is not None:
                body = textwrap.dedent(self.code).strip("\n").splitlines()
                cell.source = replace_regions(
                    source, lambda region, _: [region.indent + line if line else line for line in body],
                    only=self.exercise
                )
                hits += 1
            else:
                count = source.count(self.old)
                hits += count
                cell.source = source.replace(self.old, self.new)
        if hits != 1:
            raise ValueError(f"bug {self.name}: expected to change exercise {self.exercise} once, changed it {hits} "
                             "times")
        return nb

    def inside_its_regions(self, nb: nbformat.NotebookNode, name: str = "notebook") -> bool:
        """Whether this bug changes the solution notebook ``nb`` only inside the solution
        regions of its own exercise: with those regions blanked out, the two notebooks
        are the same. Such a bug reaches another exercise's tests only through a call
        into this exercise, which the graders answer with the reference (grading.judge.substitute).
        A ``code`` bug replaces its exercise's regions and nothing else."""
        if self.code is not None:
            self.apply(nb, name)  # still raises on a bug that matches no region
            return True

        def blanked(notebook) -> list[str]:
            return [replace_regions(cell_source(c), lambda region, _: [region.indent], only=self.exercise)
                    if c.cell_type == "code" else cell_source(c) for c in notebook.cells]

        return blanked(nb) == blanked(self.apply(nb, name))


def _module(stem: str):
    path = CATALOGUE_DIR / f"{stem}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"catalogue_{stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_sections(stem: str) -> dict[str, str]:
    """``SECTIONS`` from ``tests/catalogue/<stem>.py``: exercise -> the title of the
    chapter's ``##`` section that teaches it, where a diagnosis sends the student."""
    module = _module(stem)
    return dict(getattr(module, "SECTIONS", {})) if module else {}


def load_rules(stem: str) -> dict[str, dict[str, tuple[str, ...]]] | None:
    """``RULES`` from ``tests/catalogue/<stem>.py``: exercise -> {a graded rule of its
    statement, verbatim -> the names of the bugs that break it} (grading.notebook.rules);
    None when the catalogue declares none."""
    module = _module(stem)
    rules = getattr(module, "RULES", None) if module else None
    return None if rules is None else {e: dict(table) for e, table in rules.items()}


def load_catalogue(stem: str) -> list[Bug]:
    """``BUGS`` from ``tests/catalogue/<stem>.py`` (empty if the file is absent)."""
    module = _module(stem)
    if module is None:
        return []
    path = CATALOGUE_DIR / f"{stem}.py"
    bugs = list(module.BUGS)
    names = [b.name for b in bugs]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate bug names")
    return bugs
