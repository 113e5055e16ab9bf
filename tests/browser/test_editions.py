"""The Chinese edition: every page there, the same sections, the link between them, no English left.

Run after ``make book`` (which builds both editions); ``make test`` does both. The pages
themselves (math, links, console, phone width) are opened by ``test_book_pages.py``,
which walks ``_build/html/`` and so ``_build/html/zh_CN/`` too. Here:

- every English page has its Chinese page, with the same section ids, so the language link
  lands on the same section;
- each page links to the other edition's page, and the link carries the reader's ``#section``;
- no paragraph of a Chinese page is left in English where the catalogue has its
  translation (a message that did not match: a stale ``.mo``, a changed paragraph), and
  none shows MyST as text (a role, or ``**`` that did not close next to Chinese punctuation);
- the Chinese search finds what a reader types: for thirty terms, the pages that define a
  term come first and every page found holds it;
- a Chinese page's grading command names ``exercises/zh_CN/``, and an exercise page's
  download button serves the Chinese notebook.
"""

from __future__ import annotations

import functools
import json
import re
from html.parser import HTMLParser

import pytest

from grading.layout import ROOT
from tests.browser.test_book_pages import CHROMEDRIVER, CHROMIUM, HTML, MATH_TIMEOUT_S, browser, pages, server  # noqa: F401
from tools.i18n import glossary
from tools.i18n_search import compound_key, defined_terms, search_compounds, search_words
from tools.i18n_terms import TERMS

LANG = "zh_CN"
ZH = HTML / LANG
CJK = re.compile(r"[\u4e00-\u9fff]")
# A paragraph of prose: this many Latin words in a row, and not one Chinese character.
ENGLISH_RUN = re.compile(r"(?:\b[A-Za-z][a-z']+\b[ ,;:()-]+){7,}")
# MyST that a translation broke shows as text: a role, emphasis that did not close, a code span.
RAW_MARKUP = re.compile(r"\{(?:glue|cite|ref|numref|doc|eq|solution)[:a-z]*\}|\*\*|`")

pytestmark = pytest.mark.skipif(not (ZH / "index.html").exists(),
                                reason="no Chinese edition built: run `make book` (or `make book-zh`) first")


class _Page(HTMLParser):
    """Section ids, the edition links, the text of prose blocks outside code and output, the
    text of the code blocks, and the article's headings, bold and emphasis (what defines a term)."""

    SKIP = {"pre", "code", "script", "style", "math", "svg"}
    SKIP_CLASSES = ("cell_output", "output", "highlight", "math", "bibtex", "citation", "edition-switch",
                    "bd-sidebar", "bd-header", "bd-footer", "prev-next", "toc", "nav")
    NOT_SKIPPED = {"tex2jax_ignore", "mathjax_ignore"}
    BLOCKS = {"p", "li", "h1", "h2", "h3", "h4", "td", "th", "figcaption", "dt", "dd"}
    DEFINING = {"h1", "h2", "h3", "h4", "strong", "em", "dfn"}

    def __init__(self):
        super().__init__()
        self.sections, self.editions, self.blocks, self.code, self.defining, self.cells = [], [], [], [], [], []
        self._stack: list[tuple[str, bool]] = []
        self._text: list[list[str]] = []
        self._code: list[str] | None = None
        self._defining: list[list[str]] = []
        self._cells: list[list[str]] = []  # a table cell's text, its paragraphs included

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        # A class names what to skip as a part of it ("bd-toc", "navbar"); MyST-NB's
        # "mathjax_ignore" on a page's whole section is no math, and must not hide the page.
        classes = [c for c in (a.get("class") or "").split() if c not in self.NOT_SKIPPED]
        skipping = (self._stack[-1][1] if self._stack else False) or tag in self.SKIP or any(
            c in token for token in classes for c in self.SKIP_CLASSES)
        if tag in ("br", "img", "hr", "meta", "link", "input", "wbr"):
            return
        self._stack.append((tag, skipping))
        if tag == "section" and a.get("id"):
            self.sections.append(a["id"])
        if tag == "a" and "edition-link" in (a.get("class") or ""):
            self.editions.append(a.get("href", ""))
        if tag in self.BLOCKS and not skipping:
            self._text.append([])
        if tag in self.DEFINING and not skipping:
            self._defining.append([])
        if tag == "td" and not skipping:
            self._cells.append([])
        if tag == "pre" and self._code is None:
            self._code = []

    def handle_endtag(self, tag):
        while self._stack:
            open_tag, skipping = self._stack.pop()
            if open_tag in self.BLOCKS and not skipping and self._text:
                self.blocks.append(" ".join("".join(self._text.pop()).split()))
            if open_tag in self.DEFINING and not skipping and self._defining:
                self.defining.append(" ".join("".join(self._defining.pop()).split()))
            if open_tag == "td" and not skipping and self._cells:
                self.cells.append(" ".join("".join(self._cells.pop()).split()))
            if open_tag == "pre" and self._code is not None and not any(t == "pre" for t, _s in self._stack):
                self.code.append("".join(self._code))
                self._code = None
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self._code is not None:
            self._code.append(data)
        if self._stack and self._stack[-1][1]:
            return
        if self._text:
            self._text[-1].append(data)
        for open_span in self._defining + self._cells:
            open_span.append(data)


def _read(path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


REDIRECTS = ("index.html",)  # the front door, and Sphinx's redirect to intro.html in each edition


def english_pages() -> list[str]:
    return [p for p in pages() if not p.startswith(f"{LANG}/") and p not in REDIRECTS]


def test_the_front_door_offers_both_editions():
    door = (HTML / "index.html").read_text(encoding="utf-8")
    assert 'href="intro.html"' in door and f'href="{LANG}/intro.html"' in door, \
        "_build/html/index.html does not link to both editions' front pages"


@pytest.mark.parametrize("page", english_pages())
def test_same_page_same_sections(page):
    """Both editions have the page, with the same section ids, linked to each other."""
    zh_path = ZH / page
    assert zh_path.exists(), f"{page} has no Chinese page ({zh_path.relative_to(ROOT)})"
    en, zh = _read(HTML / page), _read(zh_path)
    assert zh.sections == en.sections, f"{page}: the Chinese page's sections differ from the English ones"
    depth = page.count("/")
    assert en.editions == [f"{'../' * depth}{LANG}/{page}"], f"{page}: link to the Chinese page is {en.editions}"
    assert zh.editions == [f"{'../' * (depth + 1)}{page}"], f"{LANG}/{page}: link to the English page is {zh.editions}"


@pytest.mark.parametrize("page", [p for p in pages() if p.startswith(f"{LANG}/") and p != f"{LANG}/index.html"])
def test_no_english_left(page):
    """Every prose block of a Chinese page reads in Chinese (the bibliography excepted)."""
    if page.endswith("book/references.html"):
        pytest.skip("the bibliography lists the sources in their own language")
    blocks = _read(HTML / page).blocks
    left = [b for b in blocks if ENGLISH_RUN.search(b) and not CJK.search(b)]
    assert not left, f"{page}: {len(left)} blocks still in English, e.g. {left[:3]}"
    raw = [b for b in blocks if RAW_MARKUP.search(b)]
    assert not raw, f"{page}: markup shown as text (a role, ** or ` that did not parse): {raw[:3]}"


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")
def test_switch_keeps_the_section(browser, server):  # noqa: F811
    """A reader on a section of an English page clicks the link and lands on that section."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = "chapters/05_flash_attention.html"
    section = _read(HTML / page).sections[2]
    browser.get(f"{server}/{page}#{section}")
    browser.find_element(By.CSS_SELECTOR, "a.edition-link").click()
    WebDriverWait(browser, MATH_TIMEOUT_S).until(lambda d: f"/{LANG}/" in d.current_url)
    assert browser.current_url.endswith(f"/{LANG}/{page}#{section}"), browser.current_url
    assert browser.execute_script(f"return document.getElementById('{section}') !== null"), \
        f"{LANG}/{page} has no section {section!r}"


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")
@pytest.mark.parametrize("edition", ["", f"{LANG}/"])
def test_switch_sits_at_the_top_and_covers_no_text(browser, server, edition):  # noqa: F811
    """On a phone, the language link is where the how-to-use page says: at the top right, in
    the article's header bar, in reach from a section deep in the page, and over no text.

    It was a pill fixed in the bottom-right corner, over the paragraph being read.
    """
    from selenium.webdriver.support.ui import WebDriverWait

    size = browser.get_window_size()
    browser.set_window_size(390, 844)
    page = "chapters/05_flash_attention.html"
    try:
        for section in ("", "#" + _read(HTML / page).sections[-1]):
            browser.get(f"{server}/{edition}{page}{section}")
            WebDriverWait(browser, MATH_TIMEOUT_S).until(
                lambda d: d.execute_script("return document.readyState") == "complete")
            switch, in_header, on_top = browser.execute_script("""
                const link = document.querySelector('a.edition-link');
                const box = link.getBoundingClientRect();
                const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
                return [box.toJSON(), link.closest('.bd-header-article') !== null,
                        hit !== null && link.contains(hit)];""")
            where = f"{edition}{page}{section}"
            assert in_header, f"{where}: the language link is not in the article's header bar"
            assert 0 <= switch["top"] and switch["bottom"] <= 844 / 4, f"{where}: the link {switch} is not at the top"
            assert switch["width"] > 0 and switch["right"] <= 390, f"{where}: the link {switch} is off the screen"
            assert on_top, f"{where}: something covers the language link at {switch}"
    finally:
        browser.set_window_size(size["width"], size["height"])


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")
def test_chinese_emphasis_is_not_slanted(browser, server):  # noqa: F811
    """Chinese typography has no italics: emphasis takes emphasis dots (_static/book.css)."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{server}/{LANG}/chapters/05_flash_attention.html")
    WebDriverWait(browser, MATH_TIMEOUT_S).until(lambda d: d.execute_script("return document.readyState") == "complete")
    styles = browser.execute_script("""
        return [...document.querySelectorAll('.bd-article p em')].map(e => getComputedStyle(e).fontStyle);""")
    assert styles, "no emphasis on the page to check"
    assert set(styles) == {"normal"}, f"emphasis in the Chinese edition is set as {set(styles)}"
    dots = browser.execute_script("""
        return [...document.querySelectorAll('.bd-article a[href*="references.html#"] em')]
            .map(e => getComputedStyle(e).textEmphasisStyle || getComputedStyle(e).webkitTextEmphasisStyle);""")
    assert dots, "no citation with et al. on the page to check"
    assert set(dots) == {"none"}, f"a citation's et al. is set with emphasis dots: {set(dots)}"


def _search_terms() -> dict:
    import json

    text = (ZH / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1:text.rindex(")")])["terms"]


def test_chinese_search_index_has_chinese_words():
    """Sphinx cuts Chinese text into words with jieba when it is installed (requirements.txt)."""
    terms = _search_terms()
    for word in ("缓存", "注意力", "量化"):
        assert word in terms, f"the Chinese search index has no entry {word!r}: is jieba installed?"


def test_chinese_search_index_has_every_term_whole():
    """Each term of the glossary and of tools/i18n_terms.py is indexed whole: the Chinese
    ones by jieba's dictionary, those with Latin words in them (KV 缓存) by their key
    (book/_ext/zh_search.py)."""
    terms = set(_search_terms()) | set(json.loads(_index_text())["titleterms"])
    named = [zh for _en, zh in glossary()] + [t.chinese for t in TERMS]
    wanted = {compound_key(t) for t in named if CJK.search(t) and (len(t) > 1 or " " in t)}
    body = _all_zh_text()
    missing = sorted(w for w in wanted if w in body and w not in terms)
    assert not missing, f"the Chinese search index lacks {missing}: did the build load its term lists?"


def _index_text() -> str:
    text = (ZH / "searchindex.js").read_text(encoding="utf-8")
    return text[text.index("(") + 1:text.rindex(")")]


@functools.cache
def _page_text(page: str) -> str:
    """The words of a Chinese page's article, as a reader reads them: no spaces, lower case."""
    return compound_key(" ".join(_read(ZH / page).blocks + _read(ZH / page).code))


@functools.cache
def _all_zh_text() -> str:
    return " ".join(_page_text(p.removeprefix(f"{LANG}/")) for p in pages() if p.startswith(f"{LANG}/"))


# Thirty terms a reader types, as they type them: the ones a Chinese-speaking reader found
# nothing for (or the wrong pages), a Latin-Chinese compound typed without its space, the
# glossary's terms of one character joined to Latin words, and terms of every part of the book.
SEARCHED = ("多头潜在注意力", "张量并行", "基数树", "投机解码", "潜在向量", "KV缓存", "调度器", "权重吸收",
            "解码上下文并行", "首 token 延迟", "首token延迟", "token 间延迟", "KV 缓存", "分页 KV 缓存", "块表",
            "写时复制", "前缀缓存", "分块预填充", "连续批处理", "抢占", "注意力汇聚点", "在线 softmax",
            "环形注意力", "上下文并行", "稀疏注意力", "闪电索引器", "位置插值", "门控 DeltaNet", "脊点", "预填充")
TOP = 2  # the defining pages must be within this many results past their own number


GLOSSARY_PAGE = f"{LANG}/book/notation.html"  # its table of terms defines each of them


@functools.cache
def _term_keys() -> frozenset[str]:
    return frozenset(compound_key(t) for t in search_words() + search_compounds())


def _defining_pages(term: str) -> list[str]:
    """The Chinese pages that define ``term``: they name it in a heading, in bold or in
    emphasis (read as a reader reads: 解码上下文并行 names no 上下文并行), or in the glossary."""
    key, keys = compound_key(term), _term_keys() | {compound_key(term)}
    found = []
    for page in (p for p in pages() if p.startswith(f"{LANG}/")):
        html = _read(HTML / page)
        texts = html.defining + (html.cells if page == GLOSSARY_PAGE else [])
        if any(key in defined_terms(text, keys) for text in texts):
            found.append(page)
    return found


def _search(driver, url: str, term: str) -> list[str]:
    """The pages a reader finds for ``term`` on the Chinese search page, best first, each once."""
    from urllib.parse import quote

    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{url}/{LANG}/search.html?q={quote(term)}")
    WebDriverWait(driver, MATH_TIMEOUT_S).until(
        lambda d: d.execute_script("return document.querySelector('#search-results .search-summary') !== null "
                                   "&& document.querySelector('#search-results .search-summary').innerText !== ''"),
        message=f"searching the Chinese edition for {term!r} did not finish")
    hrefs = driver.execute_script(
        "return [...document.querySelectorAll('#search-results li a')].map(a => a.getAttribute('href'))")
    found = [f"{LANG}/" + h.split("#")[0].split("?")[0] for h in hrefs if h]
    return list(dict.fromkeys(found))


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")
@pytest.mark.parametrize("term", SEARCHED)
def test_chinese_search_finds_the_pages_that_define_a_term(browser, server, term):  # noqa: F811
    """A reader who types a term finds, first, the pages that define it, and no page without it.

    A term no page defines (投机解码, used where it is needed) is found on the pages that use it.
    """
    found = _search(browser, server, term)
    defining = _defining_pages(term)
    assert found, f"searching the Chinese edition for {term!r} found no page"
    first = found[:len(defining) + TOP]
    late = [p for p in defining if p not in first]
    assert not late, f"{term!r}: the pages that define it, {late}, are not among the first results {first}"
    key = compound_key(term)
    without = [p for p in found if key not in _page_text(p.removeprefix(f"{LANG}/"))]
    assert not without, f"{term!r}: the results {without} do not contain it"


CODE_COMMAND = re.compile(r"--notebooks\s+(\S+)")


@pytest.mark.parametrize("page", [p for p in pages() if p.startswith(f"{LANG}/")])
def test_chinese_pages_grade_the_chinese_notebooks(page):
    """A command a Chinese page prints grades the Chinese notebooks (exercises/zh_CN/)."""
    folders = {m.group(1) for code in _read(HTML / page).code for m in CODE_COMMAND.finditer(code)}
    wrong = sorted(f for f in folders if f.rstrip("/") != f"exercises/{LANG}")
    assert not wrong, f"{page} prints `--notebooks {wrong[0]}`: a reader of this edition grades exercises/{LANG}/"


@pytest.mark.parametrize("page", [p for p in pages() if p.startswith(f"{LANG}/exercises/")])
def test_chinese_exercise_pages_download_the_chinese_notebook(page):
    """The download button of a Chinese exercise page serves the Chinese notebook."""
    links = re.findall(r'href="([^"]*_sources/[^"]*\.ipynb)"', (HTML / page).read_text(encoding="utf-8"))
    assert links, f"{page} has no download link to its notebook"
    for link in links:
        served = ((HTML / page).parent / link).resolve()
        expected = ROOT / "exercises" / LANG / served.name
        assert served.read_bytes() == expected.read_bytes(), \
            f"{page}: the download {link} is not {expected.relative_to(ROOT)}"
