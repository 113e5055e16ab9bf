"""The notebooks a judge grades, each loaded once: the graded one, and under ``--prove``
the solution, the stubs, each catalogue bug and each ``alone-N.M`` (grading.judge.variant).

A notebook is a proxy (:class:`grading.judge.proxy.RemoteNotebook`) whose code runs in a
contestant; one that cannot be read is an :class:`Unloadable`, which says why on every use.
"""

from __future__ import annotations

import os
from pathlib import Path

from grading.compare import GradingFailure
from grading.judge import substitute
from grading.judge.variant import Variant
from grading.layout import ROOT
from grading.notebook.loader import NotebookLoadError, read_notebook
from grading.proc.zygote import IN_PROCESS


class Unloadable:
    """Stands in for a notebook that could not be read: every use says why."""

    def __init__(self, message: str):
        self.message = message

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        raise GradingFailure(self.message)


class Notebooks:
    """The loaded notebooks, keyed by (variant id, chapter stem)."""

    def __init__(self, config):
        self.config = config
        self.cache: dict[tuple[str, str], object] = {}

    def notebook_dir(self) -> Path:
        option = self.config.getoption("notebooks")
        return Path(option).resolve() if option else ROOT / "solutions"

    def load(self, variant: Variant, stem: str):
        key = (variant.id, stem)
        if key not in self.cache:
            self.cache[key] = self._load(variant, stem)
        return self.cache[key]

    def _load(self, variant: Variant, stem: str):
        """The variant's notebook as the judge grades it: a proxy whose code runs in a
        contestant (grading.judge). Only a submission (``--notebooks``) must be a regular
        file; the book's own notebooks and the ones made from them here are trusted."""
        import nbformat

        from grading.judge.proxy import RemoteNotebook, open_notebook

        name = f"{stem}.ipynb"
        if os.environ.get(IN_PROCESS) == "1":
            return self._load_in_process(variant, name)
        try:
            if variant.kind == "graded":
                folder = self.notebook_dir()
                return open_notebook(folder / name, stem, trusted=folder == ROOT / "solutions")
            if variant.kind == "solution":
                return open_notebook(ROOT / "solutions" / name, stem, trusted=True)
            if variant.kind == "stub":
                return open_notebook(ROOT / "exercises" / name, stem, trusted=True)
            solution = read_notebook(ROOT / "solutions" / name)
            changed = substitute.only_solved(solution, variant.exercise, name) if variant.kind == "alone" \
                else variant.bug.apply(solution, name)
            return RemoteNotebook(ROOT / "solutions" / name, nbformat.writes(changed), stem, name)
        except NotebookLoadError as exc:
            return Unloadable(f"the notebook could not be loaded: {exc}")

    def _load_in_process(self, variant: Variant, name: str):
        """The baseline of ``make bench``'s ``grade.isolation_overhead`` only: the notebook
        run in this process, as graders were run before the judge and the contestant were
        two processes. Never for grading anyone: the notebook's code would run here."""
        from grading.contestant import services
        from grading.notebook.loader import load_notebook

        folder = self.notebook_dir() if variant.kind == "graded" else ROOT / ("exercises" if variant.kind == "stub"
                                                                           else "solutions")
        loaded = load_notebook(folder / name)
        loaded.services = services.run  # this process is the contestant: make bench's in-process baseline
        return loaded

    def close(self):
        for notebook in self.cache.values():
            close = getattr(type(notebook), "close", None)
            if close is not None:
                notebook.close()
