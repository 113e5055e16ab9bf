"""The two editions of one book, and what each page may name.

The book is built twice from the same sources. The self-study edition (``make book``) is
the repository: chapters, solutions in the appendix, ``make bench``, ``tests/references/``.
The student edition (``make release``, :mod:`grading.release`) ships the book without its
solution pages, the exercise notebooks, the public graders and a README; a student runs
every command from the folder they unzipped. A page says what is true in both where one
sentence can, and otherwise gives each edition its own block::

    ```{only} self_study
    The fp64 reference is `tests/references/ref_05_flash_attention.py`.
    ```

This extension turns the setting ``book_edition`` (``self_study``, the default; the
release's build sets ``student`` in the configuration it writes) into a Sphinx tag of the
same name, which ``only`` tests. Sphinx's gettext builder reads every ``only`` block
whatever the tags (its ``I18nTags``), so both editions' sentences are translated.

It also gives the role ``{chapters}`count``` the number of numbered chapters in the
table of contents the build uses, so the introduction's count follows ``_toc.yml`` in
both languages (a role is a placeholder the translation keeps as it is).
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes

EDITIONS = ("self_study", "student")
DEFAULT = "self_study"
_ONLY = re.compile(r"^(?P<fence>`{3,}|:{3,})\{only\}\s*(?P<expr>.*?)\s*$")


def add_edition_tag(app, config):
    edition = config.book_edition
    if edition not in EDITIONS:
        raise ValueError(f"book_edition is {edition!r}; it must be one of {', '.join(EDITIONS)}")
    for other in EDITIONS:  # one edition at a time, whatever a command line added
        if other != edition and app.tags.has(other):
            app.tags.remove(other)
    app.tags.add(edition)


def edition_source(text: str, edition: str) -> str:
    """A page's MyST source as ``edition`` shows it: the ``{only}`` blocks whose condition
    is false for its tag removed, fences and all, and the fences of the others. What the
    build does, without a build, for a check that reads the sources."""
    from sphinx.util.tags import Tags

    tags = Tags([edition])
    kept, lines = [], text.split("\n")
    i = 0
    while i < len(lines):
        opened = _ONLY.match(lines[i])
        if not opened:
            kept.append(lines[i])
            i += 1
            continue
        fence = opened.group("fence")
        close = re.compile(rf"^{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
        if tags.eval_condition(opened.group("expr")):
            kept.append(edition_source("\n".join(lines[i + 1:end]), edition))
        i = end + 1
    return "\n".join(kept)


def numbered_chapters(toc_path: str | Path) -> list[str]:
    """The files of the numbered parts of a ``_toc.yml`` (the book's chapters), in order."""
    import yaml

    toc = yaml.safe_load(Path(toc_path).read_text(encoding="utf-8"))
    return [str(entry["file"]) for part in toc.get("parts", []) if part.get("numbered")
            for entry in part.get("chapters", []) if entry.get("file")]


def chapters_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{chapters}`count```: how many numbered chapters the table of contents holds."""
    env = inliner.document.settings.env
    if text.strip() != "count":
        message = inliner.reporter.error(f"{{chapters}} knows only `count`, not {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    toc = env.config.external_toc_path
    path = Path(toc) if Path(toc).is_absolute() else Path(env.srcdir) / toc
    return [nodes.Text(str(len(numbered_chapters(path))))], []


def setup(app):
    # "env": a build of the other edition reads every page again.
    app.add_config_value("book_edition", DEFAULT, "env", types=[str])
    app.connect("config-inited", add_edition_tag)
    app.add_role("chapters", chapters_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
