"""A translated edition grades and downloads its own exercise notebooks.

The Chinese exercise notebooks are ``exercises/zh_CN/`` (``make exercises``): the same code
cells, with the statements translated. A reader of the Chinese edition works in those, so
on its pages

- the grading command a code block prints, ``--notebooks exercises/``, names the edition's
  folder, ``--notebooks exercises/zh_CN/`` (the rule ``grading/stubs.py`` applies to the
  notebooks themselves, :data:`grading.stubs.NOTEBOOKS_OPTION`);
- the download button of an exercise page, which serves ``_sources/exercises/NN.ipynb``,
  serves the Chinese notebook.

Code blocks are not messages of the catalogues (code stays as it is in both editions), so
this is done here, after the pages are read; nothing changes in the English edition.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from docutils import nodes
from sphinx.transforms import SphinxTransform

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "en"
EXERCISES = "exercises"


def _language(app) -> str:
    return app.config.language or SOURCE


def notebooks_folder(language: str) -> str:
    """The folder a page of ``language`` grades: ``exercises/`` or ``exercises/zh_CN/``."""
    return f"{EXERCISES}/" if language == SOURCE else f"{EXERCISES}/{language}/"


class GradeTheEditionsNotebooks(SphinxTransform):
    """``--notebooks exercises/`` in a code block -> the edition's folder."""

    default_priority = 800  # after the translation (Locale, 20): code is never a message

    def apply(self):
        from grading.stubs import NOTEBOOKS_OPTION

        language = _language(self.app)
        if language == SOURCE:
            return
        folder = notebooks_folder(language)
        for block in self.document.findall(nodes.literal_block):
            text = block.astext()
            changed = NOTEBOOKS_OPTION.sub(lambda m: m.group(1) + folder, text)
            if changed != text:
                block.children = [nodes.Text(changed)]
                block.rawsource = changed


def serve_translated_notebooks(app, exception) -> None:
    """Each exercise page's download (``_sources/exercises/NN.ipynb``) is the edition's notebook."""
    language = _language(app)
    if exception is not None or language == SOURCE or app.builder.format != "html":
        return
    sources = Path(app.outdir) / "_sources" / EXERCISES
    for served in sorted(sources.glob("*.ipynb")):
        translated = ROOT / notebooks_folder(language) / served.name
        if not translated.is_file():
            raise FileNotFoundError(f"{translated.relative_to(ROOT)} is missing: run `make exercises`")
        shutil.copyfile(translated, served)


def setup(app):
    app.add_transform(GradeTheEditionsNotebooks)
    app.connect("build-finished", serve_translated_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
