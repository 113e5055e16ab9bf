"""The README is a front page that stays true: its table of chapters is what the chapters
say, and every page it and ``docs/`` link to exists."""

from __future__ import annotations

import re

from grading.layout import ROOT

DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_chapter_table_is_generated_from_the_chapters():
    from tools.readme import README, pages, updated_readme

    text = README.read_text(encoding="utf-8")
    assert updated_readme(text) == text, (
        "README.md's table of chapters is not what the chapters say: run `python -m tools.readme`"
    )
    for path in pages():
        assert f"(chapters/{path.name})" in text, path.name


def test_every_chapter_has_a_title_and_a_line():
    from tools.readme import chapter, pages

    for path in pages():
        _, title, line = chapter(path)
        assert title and line, f"{path.name}: give it a '# ' title and a `description:` in its front matter"


def test_relative_links_of_the_readme_and_docs_resolve():
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            assert path.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
