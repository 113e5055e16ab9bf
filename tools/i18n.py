"""The translated editions: their catalogues, the checks that keep them complete, and the builds.

The English pages are the only source. Sphinx's ``gettext`` builder cuts them into
messages (a paragraph, a heading, a list item, a table cell, a caption), one ``.pot`` file
per page; ``sphinx-intl update`` keeps one ``.po`` file per page and language in
``locales/<lang>/LC_MESSAGES/``, and the translated build (``-D language=zh_CN``) replaces
each message by its ``msgstr``. A message whose English changed becomes *fuzzy* and shows
in English until someone translates it again; this module's ``check`` fails on it, so an
English change comes with its translation (CONTRIBUTING, "Translations").

    python -m tools.i18n update          # new English -> catalogues (empty or fuzzy entries)
    python -m tools.i18n check           # fails on an empty, fuzzy or inconsistent message,
                                         # a changed placeholder, or a glossary term not used
    python -m tools.i18n stats           # the counts `make bench` reports (JSON)
    python -m tools.i18n build [--lang zh_CN]   # _build/html/<lang>/, after `make book`

Placeholders are the parts of a message that are not prose: inline code, math, MyST roles
(``{glue:text}`key:.1f```, ``{cite:p}`...```, ``{numref}`...```), link targets and
format fields. A translation must contain each exactly as often as the English does. The
title of a titled cross-reference (``{ref}`the notation page <glossary>```) is prose: only
its role and target must stay, and a title of four English words or more left as it was
is reported as untranslated. So are the words of a formula's ``\text{...}``: they may be
translated, while an identifier there (``\text{num_layers}``, with an underscore) stays.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = ROOT / "book" / "i18n"
LOCALES = ROOT / "locales"
POT_DIR = ROOT / "_build" / "gettext"
HTML = ROOT / "_build" / "html"
GLOSSARY_PAGE = ROOT / "book" / "notation.md"
GLOSSARY_HEADING = "## Terms in both editions"
BOOK_CATALOGUE = "book"  # the words of _toc.yml and of book/_ext (book/_ext/editions.py)
LANGUAGES = ("zh_CN",)
BIN = Path(sys.executable).parent

# A MyST role with its content: {glue:text}`key:.1f`, {cite:p}`a,b`, {numref}`fig-x`.
_ROLE = r"\{[A-Za-z][\w:.-]*\}`[^`]*`"
_CODE = r"``[^`]+``|`[^`]+`"
_MATH = r"\$\$.+?\$\$|\$[^$\s](?:[^$]*[^$\s])?\$"
_LINK_TARGET = r"\]\(([^)\s]+)\)"
_AUTOLINK = r"<(?:https?|mailto):[^>\s]+>|https?://[^\s)>\]]+"
_FORMAT_FIELD = r"\{\{[^}]*\}\}|\{[A-Za-z_][\w.]*(?::[^{}\s]*)?\}(?!`)"
_PLACEHOLDER = re.compile("|".join(f"(?:{p})" for p in (_ROLE, _CODE, _MATH, _AUTOLINK, _FORMAT_FIELD)))
_TARGET = re.compile(_LINK_TARGET)


_TITLED_ROLE = re.compile(r"^(\{[A-Za-z][\w:.-]*\}`)[^`<]*?\s*<([^<>`]+)>`$")


def _placeholder(found: str) -> str:
    # A cross-reference with a title of its own ({ref}`the notation page <glossary>`) keeps
    # its role and target; its title is prose, and is translated.
    titled = _TITLED_ROLE.match(found)
    return f"{titled.group(1)}<{titled.group(2)}>`" if titled else found


# Words in a formula, \text{bytes per token}: prose, which the translation may change. An
# identifier there (\text{num_layers}, \text{head\_dim}) has an underscore and must stay.
_PROSE_TEXT = re.compile(r"\\text(?:bf|rm|it|sf)?\{[^{}\\_]*\}")


def _math_key(found: str) -> str:
    # Spaces in a formula typeset nothing; with its prose taken out they would differ.
    return re.sub(r"\s+", "", found.replace("\\text{}", "")) if found.startswith("$") else found


# The words a reader clicks: a titled reference's title, a Markdown link's text.
_LINK_TITLE = re.compile(r"\{[A-Za-z][\w:.-]*\}`([^`<]+?)\s*<[^<>`]+>`|(?<!!)\[([^\]]+)\]\([^)\s]+\)")
# Four words or more: a shorter title is often a name that stays English ("Flash attention").
_ENGLISH_WORDS = re.compile(r"[A-Za-z]+(?:'s)?(?:\s+[A-Za-z]+(?:'s)?){3,}")


def english_titles(english: str, translation: str) -> list[str]:
    """Link titles of the English, in words, that the translation still shows in English."""
    titles = [a or b for a, b in _LINK_TITLE.findall(english)]
    shown = {a or b for a, b in _LINK_TITLE.findall(translation)}
    return [t for t in titles if t in shown and _ENGLISH_WORDS.search(_PLACEHOLDER.sub(" ", t))]


def placeholders(text: str) -> collections.Counter:
    """The placeholders of one message, counted: roles, code, math, link targets, fields.

    Math must stay as it is, but for the words of its ``\\text{...}`` (not identifiers).
    """
    text = _PROSE_TEXT.sub(lambda _m: "\\text{}", text)  # emptied, not removed: "$\text{low}$" stays math
    found = collections.Counter(_math_key(_placeholder(m.group(0))) for m in _PLACEHOLDER.finditer(text))
    found.update(f"]({t})" for t in _TARGET.findall(text))
    return found


@dataclass
class Problem:
    """One thing wrong with one message of one catalogue."""

    catalogue: str  # e.g. "zh_CN/chapters/01_kv_memory.po"
    kind: str  # "untranslated", "fuzzy", "placeholder", "glossary", "style", "inconsistent"
    msgid: str
    detail: str = ""

    def __str__(self) -> str:
        head = self.msgid if len(self.msgid) <= 90 else self.msgid[:87] + "..."
        return f"{self.catalogue}: {self.kind}: {head!r}" + (f"\n    {self.detail}" if self.detail else "")


@dataclass
class Report:
    """What `check` found, and the counts `make bench` records."""

    language: str
    messages: int = 0
    untranslated: int = 0
    fuzzy: int = 0
    placeholder_mismatches: int = 0
    glossary_misses: int = 0
    style: int = 0
    inconsistent: int = 0
    problems: list[Problem] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, indent=1)


def glossary() -> list[tuple[str, str]]:
    """(English, translation) pairs from the notation page's table, the one list of terms."""
    text = GLOSSARY_PAGE.read_text(encoding="utf-8")
    if GLOSSARY_HEADING not in text:
        raise SystemExit(f"{GLOSSARY_PAGE.relative_to(ROOT)} has no section {GLOSSARY_HEADING!r}")
    section = text.split(GLOSSARY_HEADING, 1)[1].split("\n## ", 1)[0]
    pairs = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] and not set(cells[0]) <= {"-", " "} and cells[0] != "English":
            pairs.append((cells[0], cells[1]))
    return pairs


def _term_pattern(term: str) -> re.Pattern:
    # "KV cache" also matches "KV-cache" and "KV caches", "inter-token latency" also
    # "inter-token latencies"; not inside another word.
    words = [re.escape(w) for w in re.split(r"[\s-]+", term)]
    plural = r"(?:e?s)?"
    if re.search(r"[^aeiou]y$", words[-1], re.IGNORECASE):
        words[-1], plural = words[-1][:-1], r"(?:y|ies)"
    return re.compile(r"(?<![\w-])" + r"[\s-]+".join(words) + plural + r"(?![\w-])", re.IGNORECASE)


def _prose(text: str) -> str:
    """The message without its placeholders: a term inside code or a link is not prose."""
    return _TARGET.sub("]", _PLACEHOLDER.sub(" ", text))


def catalogues(language: str) -> dict[str, Path]:
    """Page name (``chapters/01_kv_memory``) -> its .po file, for one language."""
    base = LOCALES / language / "LC_MESSAGES"
    return {str(p.relative_to(base).with_suffix("")): p for p in sorted(base.rglob("*.po"))}


def templates() -> dict[str, Path]:
    """Page name -> its .pot file from the last gettext build, and book.pot (book_template)."""
    return {str(p.relative_to(POT_DIR).with_suffix("")): p for p in sorted(POT_DIR.rglob("*.pot"))}


def book_template() -> list[str]:
    """The words no page holds: _toc.yml's captions and titles, and the edition switch's label.

    book/_ext/editions.py translates them from book.po (Sphinx inserts the toc after it has
    translated the pages).
    """
    import yaml

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from editions import SWITCH_LABEL, TOGGLE_WORDS, TRANSLATED_SETTINGS, TRANSLATED_THEME_OPTIONS

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    sys.path.insert(0, str(CONF_DIR))
    import conf  # book/i18n/conf.py: the settings the build uses
    from myst_nb.core.config import NbParserConfig

    defaults = NbParserConfig()  # MyST-NB's settings, as the build has them unless conf sets them
    settings = [getattr(conf, name, None) or getattr(defaults, name.removeprefix("nb_"))
                for name in TRANSLATED_SETTINGS]
    theme = [conf.html_theme_options[name] for name in TRANSLATED_THEME_OPTIONS if name in conf.html_theme_options]
    words = [SWITCH_LABEL] + settings + theme + list(TOGGLE_WORDS)
    for part in toc.get("parts", []):
        words.append(part["caption"])
        words.extend(entry["title"] for entry in part["chapters"] if entry.get("title"))
    return list(dict.fromkeys(words))


def _write_book_pot() -> None:
    from babel.messages.catalog import Catalog

    template = Catalog(project="Long Context, Short Memory")
    for word in book_template():
        template.add(word)
    _write(POT_DIR / f"{BOOK_CATALOGUE}.pot", template)


def _read(path: Path):
    with path.open("rb") as f:
        return read_po(f)


def _write(path: Path, catalog) -> None:
    # No wrapping: one line per message, so a diff shows the paragraph that changed.
    with path.open("wb") as f:
        write_po(f, catalog, width=0, no_location=True, omit_header=False, ignore_obsolete=True)


def gettext() -> None:
    """Cut the English pages into .pot files under _build/gettext (no notebook executes)."""
    subprocess.run(
        [str(BIN / "sphinx-build"), "-b", "gettext", "-q", "-c", str(CONF_DIR),
         # Messages are the Markdown; code outputs are not translated, so nothing runs.
         "-D", "nb_execution_mode=off", str(ROOT), str(POT_DIR)],
        check=True, cwd=ROOT, stderr=subprocess.DEVNULL,
    )
    _write_book_pot()


def update(language: str) -> None:
    """New English -> catalogues; then fill each empty message that another page translated."""
    gettext()
    subprocess.run(
        [str(BIN / "sphinx-intl"), "update", "-p", str(POT_DIR), "-d", str(LOCALES), "-l", language,
         "-w", "0", "--no-obsolete"],
        check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
    )
    pages = catalogues(language)
    live = set(templates())
    for name, path in pages.items():
        if name not in live:  # the page is gone from the book
            path.unlink()
    pages = {n: p for n, p in pages.items() if n in live}
    loaded = {name: _read(path) for name, path in pages.items()}
    # exercises/NN and solutions/NN share their statement cells: translate once, fill the other.
    memory = {}
    for catalog in loaded.values():
        for m in catalog:
            if m.id and m.string and not m.fuzzy:
                memory.setdefault(m.id, m.string)
    for name, catalog in loaded.items():
        for m in catalog:
            if m.id and not m.string and m.id in memory:
                m.string = memory[m.id]
                m.flags.discard("fuzzy")
        catalog.project = "Long Context, Short Memory"
        catalog.header_comment = (f"# {language} translation of the page {name} of Long Context, Short Memory.\n"
                                  "# Made by `python -m tools.i18n update`; translate the empty msgstr entries.")
        catalog.last_translator = "The long-context inference book contributors"
        catalog.language_team = f"{language} <the book's contributors>"
        catalog.creation_date = catalog.revision_date = catalog.creation_date.replace(year=2026, month=1, day=1,
                                                                                     hour=0, minute=0)
        _write(pages[name], catalog)


def check(language: str, *, fresh: bool = True) -> Report:
    """Every message of every page translated, current, with its placeholders, its terms (the
    glossary's and tools/i18n_terms.py's) and none of the phrasings tools/i18n_terms.py avoids."""
    from tools.i18n_terms import page_terms, style_problems

    if fresh:
        gettext()
    report = Report(language=language)
    pages = catalogues(language)
    book_terms = [(en, zh, _term_pattern(en)) for en, zh in glossary()]
    glossary_terms = {en for en, _zh, _pattern in book_terms}
    seen: dict[str, tuple[str, str]] = {}
    for name, pot_path in templates().items():
        label = f"{language}/{name}.po"
        wanted = [m.id for m in _read(pot_path) if m.id]
        report.messages += len(wanted)
        if name not in pages:
            report.untranslated += len(wanted)
            report.problems.append(Problem(label, "untranslated", f"{len(wanted)} messages",
                                           "no catalogue: run `python -m tools.i18n update`"))
            continue
        catalog = _read(pages[name])
        terms = book_terms + [(en, zh, _term_pattern(en)) for en, zh in page_terms(name)]
        for msgid in wanted:
            m = catalog.get(msgid)
            if m is None or not m.string:
                report.untranslated += 1
                report.problems.append(Problem(label, "untranslated", msgid))
                continue
            if m.fuzzy:
                report.fuzzy += 1
                report.problems.append(Problem(label, "fuzzy", msgid, "the English changed: translate it again, "
                                                                       "then remove the fuzzy flag"))
                continue
            want, got = placeholders(msgid), placeholders(m.string)
            if want != got:
                report.placeholder_mismatches += 1
                missing = ", ".join(sorted((want - got).elements()))
                extra = ", ".join(sorted((got - want).elements()))
                report.problems.append(Problem(label, "placeholder", msgid,
                                               f"missing: {missing or '-'}; not in the English: {extra or '-'}"))
            for title in english_titles(msgid, m.string):
                report.untranslated += 1
                report.problems.append(Problem(label, "untranslated", msgid,
                                               f"the link title {title!r} is still English"))
            prose = _prose(msgid)
            # A message that is a term of the glossary by itself (its own English column)
            # may stay English; every other use of a term takes the translation.
            for en, zh, pattern in ([] if msgid.strip() in glossary_terms else terms):
                if pattern.search(prose) and zh not in m.string:
                    report.glossary_misses += 1
                    report.problems.append(Problem(label, "glossary", msgid,
                                                   f"{en!r} is {zh!r} in this edition (book/notation.md, "
                                                   "tools/i18n_terms.py)"))
            for found in style_problems(name, m.string):
                report.style += 1
                report.problems.append(Problem(label, "style", msgid, found))
            if msgid in seen and seen[msgid][1] != m.string:
                report.inconsistent += 1
                report.problems.append(Problem(label, "inconsistent", msgid,
                                               f"translated differently in {seen[msgid][0]}"))
            seen.setdefault(msgid, (label, m.string))
    return report


def _markdown_parser():
    # The parser of the book build, with the book's extensions (_config.yml, parse:).
    import yaml
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    extensions = set(config.get("parse", {}).get("myst_enable_extensions", []))
    return create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)


def translations(language: str, page: str) -> dict[str, str]:
    """msgid -> msgstr of one page's catalogue: its current (non-fuzzy, non-empty) entries."""
    path = catalogues(language).get(page)
    if path is None:
        return {}
    return {m.id: m.string for m in _read(path) if m.id and m.string and not m.fuzzy}


def translate_markdown(text: str, messages: dict[str, str], parser=None) -> tuple[str, list[str]]:
    """A Markdown cell with each message replaced by its translation; and the messages not found.

    The messages are those Sphinx's gettext cuts from the same text: the inline content of
    each heading, paragraph, list item and table cell, its lines joined by spaces. A message
    that spans lines becomes one line, after the same prefix ("## ", "- ", "> ", indent).
    Code, math blocks and directives' options are not messages and stay as they are.
    """
    parser = parser or _markdown_parser()
    lines = text.split("\n")
    drop: set[int] = set()
    missing = []
    for token in parser.parse(text):
        if token.type != "inline" or not token.map or not token.content.strip():
            continue
        msgid = token.content.replace("\n", " ").strip()
        if msgid not in messages:
            missing.append(msgid)
            continue
        start, end = token.map
        first = token.content.split("\n", 1)[0]
        at = lines[start].find(first)
        if at < 0:
            missing.append(msgid)
            continue
        if "\n" in token.content:
            lines[start] = lines[start][:at] + messages[msgid]
            drop.update(range(start + 1, start + token.content.count("\n") + 1))
        else:  # one line; a table row holds several cells on one line
            lines[start] = lines[start][:at] + lines[start][at:].replace(first, messages[msgid], 1)
    return "\n".join(line for i, line in enumerate(lines) if i not in drop), missing


def translate_notebook(nb, language: str, page: str):
    """A copy of a notebook whose markdown cells read in ``language`` (code cells untouched)."""
    import copy

    messages = translations(language, page)
    parser = _markdown_parser()
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type == "markdown":
            source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
            cell.source, _missing = translate_markdown(source, messages, parser)
    return out


# _build/html/index.html: both editions, and the one the browser's language asks for.
# (Jupyter Book writes a bare redirect to intro.html there; this replaces it.)
FRONT_DOOR = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8" />
<title>Long Context, Short Memory</title>
<script>
  const zh = (navigator.languages || [navigator.language || ""]).some(l => /^zh/i.test(l));
  window.location.replace(zh ? "zh_CN/intro.html" : "intro.html");
</script>
</head>
<body>
<p><a href="intro.html" hreflang="en" lang="en">Long Context, Short Memory (English)</a></p>
<p><a href="zh_CN/intro.html" hreflang="zh-CN" lang="zh-CN">长上下文，短记忆（中文版）</a></p>
</body>
</html>
"""


def build(language: str) -> float:
    """_build/html/<language>/ from the same execution cache as `make book`; returns seconds.

    Also writes the front door, _build/html/index.html, which offers every edition.
    """
    start = time.perf_counter()
    subprocess.run(
        [str(BIN / "sphinx-build"), "-b", "html", "-W", "--keep-going", "-q", "-c", str(CONF_DIR),
         "-D", f"language={language}", "-d", str(ROOT / "_build" / "doctrees" / language),
         str(ROOT), str(HTML / language)],
        check=True, cwd=ROOT,
    )
    (HTML / "index.html").write_text(FRONT_DOOR, encoding="utf-8")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.i18n", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["update", "check", "stats", "build"])
    parser.add_argument("--lang", default=LANGUAGES[0], choices=LANGUAGES)
    parser.add_argument("--no-gettext", action="store_true", help="check against the .pot files already built")
    args = parser.parse_args(argv)
    if args.command == "update":
        update(args.lang)
        return 0
    if args.command == "build":
        print(f"{args.lang}: built in {build(args.lang):.0f} s")
        return 0
    report = check(args.lang, fresh=not args.no_gettext)
    if args.command == "stats":
        print(report.to_json())
        return 0
    for problem in report.problems:
        print(problem)
    bad = len(report.problems)
    print(f"{args.lang}: {report.messages} messages, {report.untranslated} untranslated, {report.fuzzy} fuzzy, "
          f"{report.placeholder_mismatches} placeholder mismatches, {report.glossary_misses} glossary misses, "
          f"{report.style} style, {report.inconsistent} inconsistent")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
