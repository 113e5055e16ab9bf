"""The Chinese edition: every page there, the same sections, the link between them, no English left.

Run after ``make book`` (which builds both editions); ``make test`` does both. The pages
themselves (math, links, console, phone width) are opened by ``test_book_pages.py``,
which walks ``_build/html/`` and so ``_build/html/zh_CN/`` too. Here:

- every English page has its Chinese page, with the same section ids, so the language link
  lands on the same section;
- each page links to the other edition's page, and the link carries the reader's ``#section``;
- no paragraph of a Chinese page is left in English where the catalogue has its
  translation (a message that did not match: a stale ``.mo``, a changed paragraph), and
  none shows MyST as text (a role, or ``**`` that did not close next to Chinese punctuation).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from grading.layout import ROOT

from tests.browser.test_book_pages import CHROMEDRIVER, CHROMIUM, HTML, MATH_TIMEOUT_S, browser, server, pages  # noqa: F401
from tools.i18n import glossary, search_words

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
    """Section ids, the edition links, and the text of prose blocks outside code and output."""

    SKIP = {"pre", "code", "script", "style", "math", "svg"}
    SKIP_CLASSES = ("cell_output", "output", "highlight", "math", "bibtex", "citation", "edition-switch",
                    "bd-sidebar", "bd-header", "bd-footer", "prev-next", "toc", "nav")
    BLOCKS = {"p", "li", "h1", "h2", "h3", "h4", "td", "th", "figcaption", "dt", "dd"}

    def __init__(self):
        super().__init__()
        self.sections, self.editions, self.blocks = [], [], []
        self._stack: list[tuple[str, bool]] = []
        self._text: list[list[str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        skipping = (self._stack[-1][1] if self._stack else False) or tag in self.SKIP or any(
            c in (a.get("class") or "") for c in self.SKIP_CLASSES)
        if tag in ("br", "img", "hr", "meta", "link", "input", "wbr"):
            return
        self._stack.append((tag, skipping))
        if tag == "section" and a.get("id"):
            self.sections.append(a["id"])
        if tag == "a" and "edition-link" in (a.get("class") or ""):
            self.editions.append(a.get("href", ""))
        if tag in self.BLOCKS and not skipping:
            self._text.append([])

    def handle_endtag(self, tag):
        while self._stack:
            open_tag, skipping = self._stack.pop()
            if open_tag in self.BLOCKS and not skipping and self._text:
                self.blocks.append(" ".join("".join(self._text.pop()).split()))
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self._text and not (self._stack and self._stack[-1][1]):
            self._text[-1].append(data)


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


def _search_terms() -> dict:
    import json

    text = (ZH / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1:text.rindex(")")])["terms"]


def test_chinese_search_index_has_chinese_words():
    """Sphinx cuts Chinese text into words with jieba when it is installed (requirements.txt)."""
    terms = _search_terms()
    for word in ("缓存", "注意力", "量化"):
        assert word in terms, f"the Chinese search index has no entry {word!r}: is jieba installed?"


def test_chinese_search_index_has_every_glossary_term():
    """Each term of the glossary is indexed whole (tools/i18n.py's dictionary for jieba)."""
    terms = _search_terms()
    missing = [word for word in search_words() if word not in terms]
    assert not missing, f"the Chinese search index lacks {missing}: did the build load its jieba dictionary?"


# Sphinx indexes no word of one character (位, "bit"): a reader cannot search for those.
SEARCHABLE = [zh for _en, zh in glossary() if re.search(r"[A-Za-z]{2}|[\u3400-\u9fff]{2}", zh)]


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")
@pytest.mark.parametrize("term", SEARCHABLE)
def test_chinese_search_finds_pages(browser, server, term):  # noqa: F811
    """A reader who types a glossary term, as the notation page writes it, finds pages."""
    from urllib.parse import quote

    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{server}/{LANG}/search.html?q={quote(term)}")
    WebDriverWait(browser, MATH_TIMEOUT_S).until(
        lambda d: d.execute_script("return document.querySelectorAll('#search-results li').length") > 0,
        message=f"searching the Chinese edition for {term!r} found no page")
