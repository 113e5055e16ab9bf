"""Every page links to the same page in the other edition, and the book's own words translate.

The English edition is built at ``_build/html/``, each translation at ``_build/html/<lang>/``
(``tools/i18n.py build``), page for page: ``chapters/05_flash_attention.html`` is
``zh_CN/chapters/05_flash_attention.html``. Section ids come from the English headings in
both (Sphinx translates a title's text, not its id), so the link carries the reader's
``#section`` along, and ``_static/editions.js`` adds it at the moment of the click.

The words of ``_toc.yml`` (the sidebar's part captions, and the titles it gives the exercise
and solution pages) come from no page, and Sphinx inserts them after it has translated the
pages, so the page catalogues cannot reach them. They are translated here, from
``locales/<lang>/LC_MESSAGES/book.po``, which ``tools/i18n.py`` writes from ``_toc.yml`` and
checks with the page catalogues. So are this extension's own label, the book's title, and
the "Show code cell source" toggles of MyST-NB (settings, set here from the catalogue, and
the word MyST-NB puts in them).
"""

from __future__ import annotations

from pathlib import Path

from babel.messages.pofile import read_po
from sphinx import addnodes
from sphinx.transforms import SphinxTransform
from sphinx.transforms.post_transforms import SphinxPostTransform

CATALOGUE = "book"  # locales/<lang>/LC_MESSAGES/book.po
SOURCE = "en"
EDITIONS = {"en": ("English", "en"), "zh_CN": ("中文", "zh-CN")}  # name in its own language, hreflang
LOCALES = Path(__file__).resolve().parents[2] / "locales"
SWITCH_LABEL = "Other editions of this page"
TEMPLATES = str(Path(__file__).resolve().parent / "templates")
SWITCH_TEMPLATE = "edition-switch.html"
# Settings whose English words the pages show (the book's title; MyST-NB's code toggles).
TRANSLATED_SETTINGS = ("html_title", "nb_code_prompt_show", "nb_code_prompt_hide")
# The theme's words, in html_theme_options: the search box's placeholder.
TRANSLATED_THEME_OPTIONS = ("search_bar_text",)
# The words MyST-NB puts for {type} in a toggle ("Show code cell source"), in English whatever
# the language; ToggleWords translates them after MyST-NB has put them in.
TOGGLE_WORDS = ("source", "outputs", "output", "content")


def _language(app) -> str:
    return app.config.language or SOURCE


def book_messages(language: str) -> dict[str, str]:
    """English -> translation from book.po ({} for English, or where a message is untranslated)."""
    path = LOCALES / language / "LC_MESSAGES" / f"{CATALOGUE}.po"
    if language == SOURCE or not path.exists():
        return {}
    with path.open("rb") as f:
        return {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}


def edition_links(app, pagename: str) -> list[tuple[str, str, str]]:
    """(href, name, hreflang) of this page in every other edition, relative to it."""
    here = _language(app)
    up = "../" * pagename.count("/")
    root = up if here == SOURCE else up + "../"  # the English edition's root, from this page
    links = []
    for language, (name, hreflang) in EDITIONS.items():
        if language == here:
            continue
        prefix = root if language == SOURCE else f"{root}{language}/"
        links.append((f"{prefix}{pagename}.html", name, hreflang))
    return links


def add_switch(app, pagename, templatename, context, doctree):
    """The links for ``templates/edition-switch.html``, which this extension puts first in
    the theme's article header (sphinx-book-theme's ``article_header_end``), and their
    ``<link rel="alternate">`` tags. Runs before the theme drops header templates that
    render empty."""
    if doctree is None or "body" not in context:
        return None
    links = edition_links(app, pagename)
    context["edition_links"] = links
    # Read by screen readers, in the page's language.
    context["edition_switch_label"] = app.env.book_messages.get(SWITCH_LABEL, SWITCH_LABEL)
    header = context.get("theme_article_header_end") or []
    header = [t.strip() for t in header.split(",")] if isinstance(header, str) else list(header)
    if SWITCH_TEMPLATE not in header:
        context["theme_article_header_end"] = [SWITCH_TEMPLATE] + header
    context["metatags"] = context.get("metatags", "") + "".join(
        f'\n<link rel="alternate" hreflang="{hreflang}" href="{href}" />' for href, _name, hreflang in links
    )
    return None


def add_templates(app, config):
    if TEMPLATES not in config.templates_path:
        config.templates_path.append(TEMPLATES)


class TranslateTocTitles(SphinxTransform):
    """The captions and titles that _toc.yml puts in the sidebar, in this edition's language."""

    default_priority = 900  # after sphinx_external_toc inserts the toctrees (100)

    def apply(self):
        messages = self.env.book_messages
        if not messages:
            return
        for toctree in self.document.findall(addnodes.toctree):
            if toctree.get("caption"):
                toctree["caption"] = messages.get(toctree["caption"], toctree["caption"])
            toctree["entries"] = [(messages.get(title, title) if title else title, ref)
                                  for title, ref in toctree["entries"]]


class ToggleWords(SphinxPostTransform):
    """The part of a code toggle that MyST-NB fills in English ({type}), in this edition's language."""

    default_priority = 200  # after MyST-NB's HideInputCells (199) has filled in {type}
    formats = ("html",)

    def run(self, **kwargs):
        messages = self.env.book_messages
        if not messages:
            return
        from myst_nb.sphinx_ import HideCodeCellNode

        for node in self.document.findall(HideCodeCellNode):
            for key in ("prompt_show", "prompt_hide"):
                for word in TOGGLE_WORDS:  # "outputs" before "output"
                    if word in node[key] and word in messages:
                        node[key] = node[key].replace(word, messages[word])
                        break


def load_messages(app, env, docnames):
    env.book_messages = book_messages(_language(app))


def translate_settings(app, config):
    messages = book_messages(_language(app))
    for name in TRANSLATED_SETTINGS:
        value = getattr(config, name, None)
        if value in messages:
            setattr(config, name, messages[value])
    options = config.html_theme_options
    for name in TRANSLATED_THEME_OPTIONS:
        if options.get(name) in messages:
            config.html_theme_options = {**options, name: messages[options[name]]}
            options = config.html_theme_options


def setup(app):
    app.connect("config-inited", translate_settings)
    app.connect("config-inited", add_templates)
    app.connect("env-before-read-docs", load_messages)
    app.connect("html-page-context", add_switch, priority=100)  # before the theme's (500)
    app.add_transform(TranslateTocTitles)
    app.add_post_transform(ToggleWords)
    app.add_js_file("editions.js")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
