"""Each edition of the book names only what it has, and each exercise notebook grades itself.

The book is built twice (book/_ext/book_edition.py): the self-study edition (``make book``,
the repository) and the student edition (``make release``), which has no ``solutions/``,
no ``tests/references/``, no ``benchmarks/`` or ``make bench``, and no repository: its
README runs every command "from this folder". The checks here read the sources the
release's build reads, as the student edition shows them (its ``{only}`` blocks applied),
so they need no book build; the built release book is checked too where
``_build/release-book`` exists (``make test`` builds it first), since only it shows the
outputs of executed cells.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from grading import release
from grading.layout import EXERCISES, ROOT, cell_source, discover_chapters

sys.path.insert(0, str(ROOT / "book" / "_ext"))
import book_edition  # noqa: E402  (book/_ext is no package: Sphinx loads it by path)

# What the student edition does not have, however a page words it.
ABSENT = re.compile(r"tests/references|make\s+bench|benchmarks/|solutions/|repository\s+root", re.I)
RELEASE_HTML = release.BOOK_OUT / "_build" / "html"
HIDDEN_TAGS = {"remove-input", "remove-cell"}  # a code cell's source the HTML does not show
_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?P<body>.*?)^```\s*$", re.M | re.S)
_TAGS = re.compile(r"^:tags:\s*\[(?P<tags>[^\]]*)\]", re.M)


def _shown_markdown_page(text: str) -> str:
    """A MyST page as the student edition shows its source: ``{only}`` applied, and the
    code cells whose input is removed left out (their outputs are the built book's check)."""
    text = book_edition.edition_source(text, "student")
    # A literalinclude shows the code it reads, never the file it reads it from.
    text = re.sub(r"^(```\{literalinclude\})[^\n]*$", r"\1", text, flags=re.M)

    def code_cell(match: re.Match) -> str:
        tags = _TAGS.search(match.group("body"))
        hidden = tags and HIDDEN_TAGS & {t.strip().strip("'\"") for t in tags.group("tags").split(",")}
        return "" if hidden else match.group(0)

    return _CODE_CELL.sub(code_cell, text)


def _shown_notebook(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(book_edition.edition_source(cell_source(cell), "student"))
        elif not HIDDEN_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            parts.append(cell_source(cell))
    return "\n".join(parts)


def release_sources() -> list[Path]:
    """The sources the student edition is made of: the pages of its table of contents,
    the translated exercise notebooks it ships beside the English ones, and its README."""
    toc = yaml.safe_load(release.release_toc().read_text())
    files = [toc["root"]] + [entry["file"] for part in toc["parts"] for entry in part["chapters"]]
    pages = []
    for name in files:
        found = [ROOT / f"{name}{suffix}" for suffix in (".md", ".ipynb") if (ROOT / f"{name}{suffix}").is_file()]
        assert found, f"{name} in the release's table of contents has no source"
        pages.append(found[0])
    pages += sorted(p for p in EXERCISES.glob("*/*.ipynb"))
    return pages + [release.STUDENT_README]


def _absent_names(label: str, text: str) -> list[str]:
    text = " ".join(text.split())
    return [f"{label}: ...{text[max(0, m.start() - 70):m.end() + 40]}..." for m in ABSENT.finditer(text)]


def test_release_sources_name_only_what_the_release_has():
    sources = release_sources()
    assert len(sources) > 30  # every chapter, book page and exercise notebook, both languages
    found = []
    for path in sources:
        text = path.read_text(encoding="utf-8")
        shown = _shown_notebook(path) if path.suffix == ".ipynb" else _shown_markdown_page(text)
        found += _absent_names(str(path.relative_to(ROOT)), shown)
    assert found == [], ("the student edition would name what it does not have (say it in an "
                         "{only} self_study block, or in words true in both editions):\n" + "\n".join(found))


@pytest.mark.skipif(not RELEASE_HTML.is_dir(),
                    reason="no _build/release-book: `make release` (which make test runs) builds the student book")
def test_release_html_names_only_what_the_release_has():
    """The built pages, outputs of executed cells included. ``_sources/`` (the pages'
    MyST source, both editions' blocks in it) is the download, not a page."""
    found = []
    for path in sorted(RELEASE_HTML.rglob("*.html")):
        raw = re.sub(r"<script\b.*?</script>", " ", path.read_text(encoding="utf-8"), flags=re.S)
        found += _absent_names(str(path.relative_to(RELEASE_HTML)), html.unescape(re.sub(r"<[^>]*>", " ", raw)))
    assert found == [], "a page of the student book names what the release does not have:\n" + "\n".join(found)


def test_the_self_study_edition_keeps_what_it_has():
    """The mechanism removes from the student edition only: the repository's pages still
    point at the references, the benchmarks and the worked solutions."""
    chapter = (ROOT / "chapters" / "05_flash_attention.md").read_text(encoding="utf-8")
    self_study = book_edition.edition_source(chapter, "self_study")
    assert "`tests/references/ref_05_flash_attention.py`" in self_study
    assert "{solution}`05_flash_attention`" in self_study
    assert "tests/references" not in book_edition.edition_source(chapter, "student")


def test_edition_source_applies_only_blocks_as_sphinx_does():
    text = ("A\n```{only} self_study\nB\n```\n````{only} student\nC\n```bash\nD\n```\n````\n"
            ":::{only} student and not self_study\nE\n:::\nF")
    assert book_edition.edition_source(text, "student").split() == ["A", "C", "```bash", "D", "```", "E", "F"]
    assert book_edition.edition_source(text, "self_study").split() == ["A", "B", "F"]


def _sphinx(tmp_path: Path, builder: str, *options: str) -> Path:
    src = tmp_path / "src"
    if not src.exists():
        src.mkdir()
        (src / "conf.py").write_text(
            "import sys\n"
            f"sys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
            "extensions = ['myst_parser', 'sphinx_external_toc', 'book_edition']\n"
            "external_toc_path = '_toc.yml'\n"
            "gettext_compact = False\n")
        (src / "_toc.yml").write_text(
            "format: jb-book\nroot: index\nparts:\n  - caption: Preface\n    chapters:\n      - file: preface\n"
            "  - caption: Chapters\n    numbered: true\n    chapters:\n      - file: one\n      - file: two\n")
        (src / "index.md").write_text(
            "# Home\n\nThe book has {chapters}`count` chapters.\n\n"
            "```{only} self_study\nRun `make bench` from the repository root.\n```\n\n"
            "```{only} student\nRun the graders from this folder.\n```\n")
        for name in ("preface", "one", "two"):
            (src / f"{name}.md").write_text(f"# {name.title()}\n\nText.\n")
    out = tmp_path / f"{builder}-{'-'.join(options) or 'default'}"
    run = subprocess.run([sys.executable, "-m", "sphinx", "-b", builder, "-q", "-W", *options, str(src), str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_each_edition_builds_its_own_blocks_and_gettext_reads_both(tmp_path):
    """A small book built as each edition (the release passes ``book_edition: student``
    through the configuration it writes, grading.release.release_config); the gettext
    build, which makes the catalogues, reads both editions' blocks."""
    def text(out: Path) -> str:
        return " ".join(html.unescape(re.sub(r"<[^>]*>", " ", (out / "index.html").read_text())).split())

    self_study = text(_sphinx(tmp_path, "html"))
    student = text(_sphinx(tmp_path, "html", "-D", "book_edition=student"))
    assert "The book has 2 chapters." in self_study and "The book has 2 chapters." in student
    assert "repository root" in self_study and "this folder" not in self_study
    assert "this folder" in student and "repository root" not in student and "make bench" not in student
    pot = (_sphinx(tmp_path, "gettext") / "index.pot").read_text()
    assert "Run `make bench` from the repository root." in pot and "Run the graders from this folder." in pot
    assert "{chapters}`count`" in pot  # a placeholder: both languages count the same chapters


def test_release_config_builds_the_student_edition_and_changes_nothing_else():
    """Jupyter Book looks for local extensions beside the configuration it is given, so the
    release's config (in _build/release-src/) names the same folders from there."""
    path = release.release_config()
    config = yaml.safe_load(path.read_text())
    original = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["config"].pop("book_edition") == "student"
    assert original["sphinx"]["config"].pop("book_edition") == "self_study"
    extensions = config["sphinx"].pop("local_extensions")
    assert {name: (path.parent / folder).resolve() for name, folder in extensions.items()} == \
        {name: (ROOT / folder).resolve() for name, folder in original["sphinx"].pop("local_extensions").items()}
    assert config == original


def test_the_introduction_counts_and_lists_every_chapter():
    """The count is the toc's ({chapters}`count`, in both languages), never a number
    written down, and the list has one entry per numbered chapter, in order."""
    toc_chapters = book_edition.numbered_chapters(ROOT / "_toc.yml")
    assert toc_chapters == [f"chapters/{c.stem}" for c in discover_chapters()]
    intro = (ROOT / "intro.md").read_text(encoding="utf-8")
    assert "{chapters}`count`" in intro
    words = "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen"
    # "a course of ten weeks", "the book has 10 chapters", "in ten chapters" (not "two chapters go ...")
    stale = re.findall(rf"\b(?:of|has|in|all)\s+(?:{words}|\d+)\s+(?:chapters|weeks)\b", intro, re.I)
    assert stale == [], f"a count written by hand in intro.md: {stale}; use {{chapters}}`count`"
    section = intro.split("## The chapters", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\d+\.\s+\[[^\]]+\]\(([^)]+)\.md\)", section, re.M)
    assert listed == toc_chapters


def _printed_commands(path: Path) -> list[tuple[str, str]]:
    """(test file, --notebooks folder) of every grading command in a notebook's markdown."""
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(cell_source(c) for c in nb.cells if c.cell_type == "markdown")
    return re.findall(r"pytest\s+(tests/test_\S+\.py)\s+--notebooks\s+(\S+)", text)


def _exercise_notebooks() -> list[tuple[Path, Path]]:
    """(top folder, notebook) for the repository's exercise notebooks and, where it is
    built, the release's."""
    tops = [ROOT] + ([release.RELEASE] if (release.RELEASE / "exercises").is_dir() else [])
    return [(top, path) for top in tops for path in sorted((top / "exercises").rglob("*.ipynb"))]


@pytest.mark.parametrize("top, path", _exercise_notebooks(),
                         ids=[str(path.relative_to(ROOT)) for _top, path in _exercise_notebooks()])
def test_each_exercise_notebook_prints_a_command_that_grades_itself(top, path):
    """The grader opens ``<--notebooks folder>/<stem>.ipynb`` (grading/judge/plugin.py,
    notebook_dir), so the command a notebook prints, run from the top folder, must name
    that notebook's own folder: ``exercises/zh_CN/`` in a Chinese one."""
    commands = _printed_commands(path)
    assert commands, f"{path.relative_to(top)} prints no grading command"
    for test_file, folder in commands:
        assert test_file == f"tests/test_{path.stem}.py"
        assert (top / folder / path.name).resolve() == path.resolve(), (
            f"{path.relative_to(top)} prints `--notebooks {folder}`, which grades "
            f"{(Path(folder) / path.name).as_posix()}")
