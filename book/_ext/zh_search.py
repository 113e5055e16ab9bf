"""The Chinese edition's search: the book's terms indexed whole, and the pages that define them first.

Sphinx's Chinese search (``sphinx.search.zh``) cuts text with jieba, loading the user
dictionary that ``html_search_options["dict"]`` names (``tools/i18n_search.py`` writes it
from the catalogues). That keeps 多头潜在注意力 whole, but not a term with Latin words in
it: jieba cuts ``KV 缓存`` at the space, and drops the 首 of ``首 token 延迟``, a piece of one
character. So this language indexes each such compound (``html_search_options["compounds"]``)
as one more word, its key without spaces (``kv缓存``, ``首token延迟``), wherever the text
holds it, with or without spaces; ``static/zh_search.js`` (beside this module) joins what
the reader types the same way.

Sphinx ranks a page with the word in a heading above one that mentions it, and every
mention alike. A page that *defines* a term (in a heading, or set in bold or emphasis, as
the book sets a term where it introduces it, or in the glossary's table) should come first:
this extension records, for each term, the pages whose headings, bold and emphasis name it, in
``_static/zh_search_defined.js``, and the script raises those pages for a query of that term.

Loaded by the translated editions' configuration (``book/i18n/conf.py``); it changes
nothing for a language other than Chinese.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from docutils import nodes
from sphinx.search.zh import SearchChinese

from tools.i18n_search import compound_key, defined_terms

# The script, beside this module, not in the book's _static/: Jupyter Book puts every script
# there on every page of every edition, and this one belongs to the Chinese search page only.
STATIC = str(Path(__file__).resolve().parent / "static")
SCRIPT = "zh_search.js"  # the query's words, joined as the index holds them
DEFINED = "zh_search_defined.js"  # written at build time: term key -> the pages that define it
_DEFINING = (nodes.title, nodes.strong, nodes.emphasis)
GLOSSARY_PAGE = "book/notation"  # its table of terms in both editions defines each of them


def _read_terms(path: str | None) -> list[str]:
    if not path or not Path(path).is_file():
        return []
    return [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


class _LatinTerms(set):
    """The Latin words split so far, as a set: Sphinx 7's Chinese search keeps them in a list
    that grows with every page and searches it for every word it stems, which made the
    index of this edition a minute of a build (quadratic); membership is all it asks."""

    def extend(self, words) -> None:
        self.update(words)


class ChineseTerms(SearchChinese):
    """Sphinx's Chinese search, with each compound term of the book also indexed whole."""

    compounds: re.Pattern | None = None

    def init(self, options: dict[str, str]) -> None:
        super().init(options)
        self.latin_terms = _LatinTerms(self.latin_terms)
        terms = sorted(_read_terms(options.get("compounds")), key=len, reverse=True)
        # "KV 缓存" also matches "KV缓存" and "kv  缓存": spaces between the words are optional.
        patterns = [r"\s*".join(re.escape(word) for word in term.split()) for term in terms]
        self.compounds = re.compile("|".join(patterns), re.IGNORECASE) if patterns else None

    def split(self, input: str) -> list[str]:
        words = super().split(input)
        if self.compounds is not None:
            words += [compound_key(m.group(0)) for m in self.compounds.finditer(input)]
        return words


def _is_chinese(app) -> bool:
    return (app.config.language or "").startswith("zh")


def _all_terms(app) -> list[str]:
    options = app.config.html_search_options or {}
    return _read_terms(options.get("dict")) + _read_terms(options.get("compounds"))


def record_definitions(app, doctree) -> None:
    """The normalised text of the page's headings, bold and emphasis, kept in the environment."""
    if _is_chinese(app):
        kinds = _DEFINING + ((nodes.entry,) if app.env.docname == GLOSSARY_PAGE else ())
        texts = {node.astext() for node in doctree.findall(lambda n: isinstance(n, kinds))}
        app.env.zh_defining_texts = getattr(app.env, "zh_defining_texts", {})
        app.env.zh_defining_texts[app.env.docname] = sorted(texts)


def purge(app, env, docname) -> None:
    getattr(env, "zh_defining_texts", {}).pop(docname, None)


def merge(app, env, docnames, other) -> None:
    env.zh_defining_texts = getattr(env, "zh_defining_texts", {})
    for docname in docnames:
        if docname in getattr(other, "zh_defining_texts", {}):
            env.zh_defining_texts[docname] = other.zh_defining_texts[docname]


def defining_pages(texts: dict[str, list[str]], terms: list[str]) -> dict[str, list[str]]:
    """Term key -> the pages (docnames) with the term in a heading, in bold or in emphasis."""
    keys = {compound_key(term) for term in terms}
    found: dict[str, list[str]] = {}
    for docname, defined in sorted(texts.items()):
        for key in sorted(set().union(*(defined_terms(text, keys) for text in defined))):
            found.setdefault(key, []).append(docname)
    return found


def write_definitions(app, exception) -> None:
    if exception is not None or not _is_chinese(app) or app.builder.format != "html":
        return
    found = defining_pages(getattr(app.env, "zh_defining_texts", {}), _all_terms(app))
    target = Path(app.outdir) / "_static" / DEFINED
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"var ZH_SEARCH_DEFINED = {json.dumps(found, ensure_ascii=False, sort_keys=True)};\n",
                      encoding="utf-8")


def add_static(app, config) -> None:
    if STATIC not in config.html_static_path:
        config.html_static_path.append(STATIC)


def add_scripts(app, pagename, templatename, context, doctree) -> None:
    # Only the search page runs queries; the script must come before searchtools.js, whose
    # splitQuery defers to one already defined.
    if _is_chinese(app) and pagename == "search":
        app.add_js_file(DEFINED)
        app.add_js_file(SCRIPT)


def setup(app):
    app.add_search_language(ChineseTerms)
    app.connect("config-inited", add_static)
    app.connect("doctree-read", record_definitions)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    app.connect("html-page-context", add_scripts)
    app.connect("build-finished", write_definitions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
