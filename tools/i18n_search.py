"""The terms the Chinese search must find as a reader types them, taken from the catalogues.

Sphinx's Chinese search cuts each page into words with jieba and looks up what the reader
types as words of that index. jieba's own dictionary cuts 预填充 into 预 and 填充, and
Sphinx drops a piece of one character, so a term jieba does not know is never found.
This module lists the book's terms, from the one source of its Chinese words, the
catalogues of ``locales/zh_CN/``: the glossary (``book/notation.md``) and the table of
``tools/i18n_terms.py``, and every heading, bold or emphasised span and table header the
catalogues translate, cut at punctuation and stripped of exercise numbers ("12.5 调度器的一步。"
-> 调度器的一步). A term must be short (at most :data:`MAX_CHARS` Chinese characters), as a
term is; a long heading is a sentence.

Two kinds come out:

- **words**, all Chinese (多头潜在注意力): written one a line into a jieba user dictionary,
  which Sphinx loads (``html_search_options["dict"]``), so jieba keeps each whole;
- **compounds**, Chinese with Latin words (KV 缓存, 首 token 延迟): jieba cuts them at the
  spaces, and a part of one character (首) is dropped. ``book/_ext/zh_search.py`` indexes
  each compound as one more word, :func:`compound_key` of it (``kv缓存``), and
  ``book/_ext/static/zh_search.js`` joins what the reader types the same way, with or
  without spaces.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tools import i18n
from tools.i18n_terms import TERMS

MAX_CHARS = 8  # a term of more Chinese characters than this is a phrase, not a term
CJK = re.compile(r"[\u3400-\u9fff]")
_CJK_ONLY = re.compile(r"[\u3400-\u9fff]+")
# What a term holds: Chinese, and Latin words or numbers joined to it by spaces or hyphens.
_TERM = re.compile(r"[\u3400-\u9fffA-Za-z0-9](?:[\u3400-\u9fffA-Za-z0-9\- ]*[\u3400-\u9fffA-Za-z0-9])?")
# Where a span is cut: punctuation of either script, inline code, math, roles.
_CUT = re.compile(r"`[^`]*`|\$[^$]*\$|\{[^}]*\}|[，。：；、？！（）“”‘’《》,.:;?!()\"'/|+=<>\[\]]")
# "练习 12.5", "Q1", "12.5", "第 3 步": numbering, not a term.
_NUMBERING = re.compile(r"^(?:练习\s*)?(?:Q\d+|\d+(?:\.\d+)*)\s*|^第\s*\d+\s*[步章节]\s*")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_EMPHASIS = re.compile(r"(?<![*\w])\*([^*\s][^*]*?)\*(?![*\w])")
# A piece that starts with a particle or a conjunction is the tail of a phrase (的最大值, 以及块).
_TAIL = re.compile(r"^(?:的|以及|而|并|和|与|或)")


def compound_key(term: str) -> str:
    """The one index word of a term: lower case, without its spaces (``KV 缓存`` -> ``kv缓存``)."""
    return re.sub(r"\s+", "", term).lower()


def _pieces(span: str) -> list[str]:
    """The term-sized pieces of one heading, bold span or table cell."""
    out = []
    for part in _CUT.split(span):
        part = _NUMBERING.sub("", part.strip()).strip()
        for term in _TERM.findall(part):
            term = " ".join(term.split())
            chinese = sum(1 for _c in CJK.finditer(term))
            if _TAIL.match(term) or chinese > MAX_CHARS:
                continue
            if chinese >= 2 or re.search(r"[A-Za-z]{2}", term) and chinese == 1:  # 首 token 延迟
                out.append(term)
    return out


def _structural_spans(page: str, messages: dict[str, str], parser) -> list[str]:
    """The translations of the page's headings and table headers (its English source says which)."""
    source = i18n.ROOT / f"{page}.md"
    notebook = i18n.ROOT / f"{page}.ipynb"
    if source.exists():
        texts = [source.read_text(encoding="utf-8")]
    elif notebook.exists():
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        texts = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    else:
        return []
    spans = []
    for text in texts:
        tokens = parser.parse(text)
        for before, token in zip(tokens, tokens[1:]):
            if token.type == "inline" and before.type in ("heading_open", "th_open"):
                translated = messages.get(token.content.replace("\n", " ").strip())
                spans += [translated] if translated else []
    return spans


def catalogue_terms(language: str = "zh_CN") -> list[str]:
    """Every term the catalogues of ``language`` use, glossary first, each once."""
    parser = i18n._markdown_parser()
    spans = [zh for _en, zh in i18n.glossary()] + [t.chinese for t in TERMS]
    for page in i18n.catalogues(language):
        messages = i18n.translations(language, page)
        spans += _structural_spans(page, messages, parser)
        for text in messages.values():
            spans += _BOLD.findall(text) + _EMPHASIS.findall(_BOLD.sub(" ", text))
    terms = [term for span in spans for term in _pieces(span)]
    return list(dict.fromkeys(terms))


def search_words(language: str = "zh_CN") -> list[str]:
    """The all-Chinese terms, for jieba's user dictionary."""
    return [t for t in catalogue_terms(language) if _CJK_ONLY.fullmatch(t)]


def search_compounds(language: str = "zh_CN") -> list[str]:
    """The terms that mix Chinese and Latin words (KV 缓存), indexed whole by their key."""
    return [t for t in catalogue_terms(language) if CJK.search(t) and not _CJK_ONLY.fullmatch(t)]


def write_search_files(folder: Path, language: str = "zh_CN") -> dict[str, str]:
    """Write jieba's dictionary and the compounds (one a line) into ``folder``; the
    ``html_search_options`` that name them."""
    folder.mkdir(parents=True, exist_ok=True)
    terms = catalogue_terms(language)
    dictionary, compounds = folder / "search_dictionary.txt", folder / "search_compounds.txt"
    dictionary.write_text("".join(f"{t}\n" for t in terms if _CJK_ONLY.fullmatch(t)), encoding="utf-8")
    compounds.write_text("".join(f"{t}\n" for t in terms if CJK.search(t) and not _CJK_ONLY.fullmatch(t)),
                         encoding="utf-8")
    return {"dict": str(dictionary), "compounds": str(compounds)}


def defined_terms(text: str, keys: set[str]) -> set[str]:
    """The terms (by :func:`compound_key`) that a heading, bold span or glossary cell names.

    The text is read left to right, taking at each place the longest term that starts
    there, as a reader reads it: "解码上下文并行" names 解码上下文并行, not 上下文并行.
    """
    text, found, start = compound_key(text), set(), 0
    longest = max((len(k) for k in keys), default=0)
    while start < len(text):
        for end in range(min(len(text), start + longest), start, -1):
            if text[start:end] in keys:
                found.add(text[start:end])
                start = end
                break
        else:
            start += 1
    return found
