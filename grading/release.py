"""The student edition: ``make release`` (``python -m grading.release``).

An instructor hands this out instead of the repository, which carries ``solutions/`` and
a book whose appendix prints them. ``_build/release/`` (and ``_build/release.zip``) holds:

- ``book/``: the book, built from ``_toc.yml`` without its solution pages (into
  ``_build/release-book``, beside the self-study build in ``_build/html``, which keeps
  the appendix; both share the execution cache, so after ``make book`` only Sphinx runs),
  as the student edition: ``book_edition: student`` (:func:`release_config`) shows the
  pages' ``{only} student`` blocks instead of their ``{only} self_study`` ones
  (book/_ext/book_edition.py);
- ``exercises/``: the exercise notebooks (and ``exercises/zh_CN/``, the same with Chinese statements);
- ``tests/test_NN_topic.py``: the public graders; ``grading/`` and ``modellab/``, which
  they import;
- ``tests/expected/NN_topic.npz``: what the references returned to the graders, in
  place of the references: :func:`record` runs each chapter's graders on its
  solution with the references recorded (:mod:`grading.judge.replay`), into ``_build/expected``
  (again only where a grader, a reference, a solution or the recorder changed); the
  release's graders replay them. No file of ``tests/references/`` ships;
- ``tests/diagnosis/``: the tables that name a known mistake (its hint, its section and
  what it outputs where it fails), so a student of the release is told what the
  repository's graders tell; no bug code;
- ``README.md`` (the student instructions), ``pytest.ini``, the grader's pinned
  requirements (``requirements-grader.txt``, not the author's ``requirements.txt``: no
  book build, no browser, no nbgrader) and the model of Chapter 8
  (``requirements-nodeps.txt``), and a ``pyproject.toml`` (:func:`release_pyproject`)
  whose editable install registers the graders' pytest plugin and names only the
  packages the release ships.

It has no ``solutions/``, no references, no hidden tests and no catalogue of wrong
implementations; :func:`reference_leaks` proves that no function of the references'
source appears in it, and :func:`leaks` proves that no solution body (the code between ``### BEGIN SOLUTION``
and ``### END SOLUTION`` of any solution notebook, whitespace normalised) appears in
any of its files, the HTML included; the build stops if one does. It stops too when the
README's install commands would send anything but PyTorch through PyTorch's package index
(:func:`install_problems`).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from grading.judge.recording import EXPECTED, record
from grading.layout import (
    BUILD,
    DIAGNOSIS,
    EXERCISES,
    REFERENCES,
    RELEASE,
    ROOT,
    SOLUTIONS,
    TESTS,
    cell_source,
    discover_chapters,
)
from grading.notebook.regions import find_regions
from grading.pins import pins

BOOK_OUT = BUILD / "release-book"  # jupyter-book --path-output: the HTML lands in BOOK_OUT/_build/html
TOC = BUILD / "release-src" / "_toc.yml"
CONFIG = BUILD / "release-src" / "_config.yml"
STUDENT_README = ROOT / "tools" / "release" / "README.md"
TOP_FILES = ("pytest.ini", "requirements-grader.txt", "requirements-nodeps.txt")
PACKAGES = ("distlab", "gpucompile", "grading", "modellab")  # what the graders import
# A body shorter than this (whitespace normalised) is a token, not an answer: `return x`
# could be anywhere. Every solution body of the book today is longer (the test says so).
MIN_BODY_CHARS = 12
# PyTorch's own package index: the README sends PyTorch's CPU build, and nothing else, through it.
# It also mirrors PyTorch's dependencies, so a command that could reach it for any other
# package might take them from there (or, where it cannot be reached, retry for minutes).
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
TEXT_SUFFIXES = {".html", ".htm", ".ipynb", ".py", ".md", ".txt", ".js", ".json", ".css", ".ini", ".toml", ".yml",
                 ".yaml", ".csv", ".svg", ".xml", ".inv", ""}


def normalise(text: str) -> str:
    return " ".join(text.split())


def solution_bodies(folder: Path = SOLUTIONS) -> dict[str, str]:
    """``{"01_kv_memory.ipynb cell 5": body}``: every solution region's body, normalised."""
    import nbformat

    bodies = {}
    for path in sorted(folder.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for n, cell in enumerate(nb.cells):
            if cell.get("cell_type") != "code":
                continue
            lines = cell_source(cell).splitlines()
            for region in find_regions(cell_source(cell), f"{path.name} cell {n}"):
                body = normalise("\n".join(lines[region.start + 1:region.end]))
                if body:
                    bodies[f"{path.name} cell {n} line {region.start + 1}"] = body
    return bodies


def texts_of(path: Path) -> list[str]:
    """The texts a reader could find in a file, normalised: the file itself and, for HTML,
    what a browser shows (tags stripped, entities decoded: highlighted code is split into
    spans); for a notebook, its cells' sources and outputs as they read."""
    if path.suffix.lower() not in TEXT_SUFFIXES:
        return []
    raw = path.read_bytes().decode("utf-8", errors="replace")
    texts = [raw]
    if path.suffix.lower() in (".html", ".htm", ".svg", ".xml"):
        texts.append(html.unescape(re.sub(r"<[^>]*>", "", raw)))
    if path.suffix.lower() in (".ipynb", ".json") or path.name.endswith(".ipynb.txt"):
        try:
            nb = json.loads(raw)
            for cell in nb.get("cells", []) if isinstance(nb, dict) else []:
                texts.append(cell_source(cell))
                for out in cell.get("outputs", []):
                    for value in [out.get("text", "")] + list(out.get("data", {}).values()):
                        texts.append(value if isinstance(value, str) else "".join(map(str, value)))
        except (ValueError, AttributeError, TypeError):
            pass
    return [normalise(t) for t in texts]


def leaks(folder: Path, bodies: dict[str, str] | None = None) -> list[str]:
    """Every (file, solution region) where a solution body appears in ``folder``."""
    bodies = solution_bodies() if bodies is None else bodies
    bodies = {k: v for k, v in bodies.items() if len(v) >= MIN_BODY_CHARS}
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        for text in texts_of(path):
            for where, body in bodies.items():
                if body in text:
                    found.append(f"{path.relative_to(folder)}: the solution body of {where}")
        found = list(dict.fromkeys(found))
    return found


def release_toc() -> Path:
    """``_toc.yml`` without the solution pages (the appendix keeps its other pages)."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = []
    for part in toc.get("parts", []):
        chapters = [c for c in part.get("chapters", []) if not str(c.get("file", "")).startswith("solutions/")]
        if chapters:
            caption = part.get("caption", "")
            parts.append({**part, "chapters": chapters,
                          **({"caption": "Appendix"} if caption.lower().startswith("appendix") else {})})
    toc["parts"] = parts
    TOC.parent.mkdir(parents=True, exist_ok=True)
    TOC.write_text("# Generated by grading.release from _toc.yml: the student edition, no solution pages.\n"
                   + yaml.safe_dump(toc, sort_keys=False))
    return TOC


def release_config() -> Path:
    """``_config.yml`` with ``book_edition: student``: the pages' ``{only} student`` blocks
    show, their ``{only} self_study`` blocks do not (book/_ext/book_edition.py). Jupyter
    Book finds local extensions beside the configuration file, so their folders are
    written relative to this one; every other path resolves against the source folder,
    the book's root, as before."""
    import os

    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    sphinx = config.setdefault("sphinx", {})
    sphinx["local_extensions"] = {name: os.path.relpath(ROOT / folder, CONFIG.parent)
                                  for name, folder in (sphinx.get("local_extensions") or {}).items()}
    sphinx.setdefault("config", {})["book_edition"] = "student"
    CONFIG.parent.mkdir(parents=True, exist_ok=True)
    CONFIG.write_text("# Generated by grading.release from _config.yml: the student edition.\n"
                      + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return CONFIG


def build_book() -> Path:
    """The book without its solution pages, into BOOK_OUT (warnings are errors, as in make book)."""
    toc, config = release_toc(), release_config()
    # The pages' code is the book's: executed side by side into the cache the build reads.
    subprocess.run([sys.executable, "-m", "tools.execute_pages"], cwd=ROOT, check=True)
    jb = Path(sys.executable).parent / "jupyter-book"
    subprocess.run([str(jb), "build", str(ROOT), "--toc", str(toc), "--config", str(config), "--path-output",
                    str(BOOK_OUT), "-W", "--keep-going"], cwd=ROOT, check=True)
    html_dir = BOOK_OUT / "_build" / "html"
    if (html_dir / "solutions").exists():
        raise RuntimeError(f"{html_dir / 'solutions'} exists: the release book has solution pages")
    return html_dir


def assemble(html_dir: Path, out: Path = RELEASE) -> Path:
    """Copy what a student needs into ``out`` (emptied first)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copytree(html_dir, out / "book", ignore=shutil.ignore_patterns(".buildinfo", ".doctrees"))
    files: dict[str, Path] = {name: ROOT / name for name in TOP_FILES}
    files["README.md"] = STUDENT_README
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            files[str(path.relative_to(ROOT))] = path
    files["tests/__init__.py"] = TESTS / "__init__.py"
    for path in sorted(EXPECTED.glob("*.npz")):  # expected values, not references
        files[f"tests/expected/{path.name}"] = path
    # What diagnosis needs: each bug's name, hint, section and the outputs it
    # produces at the checks it fails. Data, with no bug code: tests/catalogue stays out.
    for path in sorted(DIAGNOSIS.glob("*.json")):
        files[str(path.relative_to(ROOT))] = path
    for c in discover_chapters():
        files[f"tests/{c.test_file.name}"] = c.test_file
        files[f"exercises/{c.stem}.ipynb"] = EXERCISES / f"{c.stem}.ipynb"
        # The same stubs with Chinese statements (exercises/zh_CN/), graded alike.
        for edition in sorted(p for p in EXERCISES.iterdir() if p.is_dir()):
            if (edition / f"{c.stem}.ipynb").exists():
                files[f"exercises/{edition.name}/{c.stem}.ipynb"] = edition / f"{c.stem}.ipynb"
    for name, source in files.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    (out / "pyproject.toml").write_text(release_pyproject())
    return out


def release_pyproject() -> str:
    """The repository's ``pyproject.toml`` with the packages it finds cut to :data:`PACKAGES`
    (the repository's ``benchmarks`` stays behind): each package and those below it."""
    text = (ROOT / "pyproject.toml").read_text()
    listed = "include = [" + ", ".join(f'"{name}*"' for name in PACKAGES) + "]"
    text, found = re.subn(r"^include = \[.*\]$", listed, text, flags=re.M)
    if found != 1:
        raise RuntimeError("pyproject.toml has no one-line `include = [...]` for the release to rewrite")
    return text


def pyproject_problems(folder: Path) -> list[str]:
    """What in ``folder/pyproject.toml`` an install would stop at, or the release lacks:
    a listed package that does not ship, a package that ships and is not listed."""
    import tomllib

    found = tomllib.loads((folder / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    listed = [pattern.rstrip("*") for pattern in found["include"]]
    problems = [f"pyproject.toml lists {name}, which the release does not ship" for name in listed
                if not (folder / name / "__init__.py").is_file()]
    return problems + [f"{name}/ ships but pyproject.toml does not list it" for name in PACKAGES
                       if name not in listed]


def reference_functions(folder: Path = REFERENCES) -> dict[str, str]:
    """``{"ref_01_kv_memory.py: bytes_per_token": body}``: the body of every function and
    method of the references, normalised (its docstring left out: a body is the code)."""
    import ast

    bodies = {}
    for path in sorted(folder.glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr)
                                         and isinstance(getattr(node.body[0], "value", None), ast.Constant)
                                         and isinstance(node.body[0].value.value, str)) else node.body
                if body:
                    text = normalise("\n".join(ast.get_source_segment(source, b) or "" for b in body))
                    bodies[f"{path.name}: {node.name} (lines {body[0].lineno}-{node.end_lineno})"] = text
    return bodies


def reference_leaks(folder: Path) -> list[str]:
    """Every (file, reference function) where a function of ``tests/references/`` appears in
    ``folder`` (a body of at least MIN_BODY_CHARS, whitespace normalised), and every file of
    ``tests/references/`` that ships. A helper the exercise notebooks themselves hand the
    student (``_require_int``, the same input check) is no answer and is not counted."""
    found = [f"{p.relative_to(folder)} ships" for p in sorted((folder / "tests" / "references").rglob("*"))
             if p.is_file()] if (folder / "tests" / "references").is_dir() else []
    bodies = {k: v for k, v in reference_functions().items() if len(v) >= MIN_BODY_CHARS}
    given = {where for where, body in bodies.items()
             if any(body in text for path in sorted(EXERCISES.glob("*.ipynb")) for text in texts_of(path))}
    bodies = {k: v for k, v in bodies.items() if k not in given}
    return found + [f.replace("the solution body of", "the reference function") for f in leaks(folder, bodies)]


def readme_commands(readme: Path, heading: str) -> list[str]:
    """The commands of every ``bash`` block (indented in a list item or not) between
    ``heading`` of ``readme`` and the next heading of level 2 or 3, as printed: comment
    lines and trailing comments cut, continuation lines joined. Raises ValueError when
    ``heading`` is not in ``readme``."""
    text = readme.read_text(encoding="utf-8")
    if heading not in text:
        raise ValueError(f"{readme.name} has no heading {heading!r}")
    section = text[text.index(heading) + len(heading):]
    following = re.search(r"^#{2,3} ", section, re.M)
    section = section[:following.start()] if following else section
    commands = []
    for block in re.finditer(r"^( *)```bash\n(.*?)^\1```", section, re.S | re.M):
        lines = (re.sub(r"(^|\s+)#.*$", "", line).strip() for line in block.group(2).replace("\\\n", " ").splitlines())
        commands += [line for line in lines if line]
    return commands


def install_problems(folder: Path) -> list[str]:
    """What in the README's "Set up once" commands would send anything but PyTorch
    through PyTorch's index: an ``--extra-index-url`` (pip asks every index it has for
    every package), or a command naming :data:`TORCH_INDEX` that installs more than
    ``torch`` at ``requirements-grader.txt``'s pin, or without ``--no-deps`` (which keeps
    PyTorch's dependencies for PyPI), or with it as an extra index."""
    commands = readme_commands(folder / "README.md", "## Set up once")
    torch = f"torch=={pins((folder / 'requirements-grader.txt').read_text()).get('torch')}"
    problems = [f"`{c}` adds an index beside PyPI: pip asks both for every package" for c in commands
                if "--extra-index-url" in c]
    for command in (c for c in commands if TORCH_INDEX in c):
        words = shlex.split(command)
        wanted = [w for w in words[words.index("install") + 1:] if not w.startswith("-") and w != TORCH_INDEX]
        if ("--no-deps" not in words or f"--index-url {TORCH_INDEX}" not in command
                or [w.lower() for w in wanted] != [torch]):
            problems.append(f"`{command}` must be `pip install --no-deps --index-url {TORCH_INDEX} {torch}`: "
                            "PyTorch alone from its index")
    if not any(TORCH_INDEX in c for c in commands):
        problems.append(f"no command of the README's \"Set up once\" installs PyTorch's CPU build ({torch})")
    return problems


def write_zip(folder: Path) -> Path:
    path = folder.with_suffix(".zip")
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, Path(folder.name) / p.relative_to(folder))
    tmp.replace(path)
    return path


def check(folder: Path) -> list[str]:
    """What must not be in a release (solutions, the catalogue, hidden tests, solution
    bodies, reference code), a ``pyproject.toml`` its own install would stop at, and
    install commands that would send more than PyTorch through PyTorch's index."""
    problems = [f"{name}/ is in the release" for name in ("solutions", "tests/catalogue", "hidden_tests")
                if (folder / name).exists()]
    return (problems + pyproject_problems(folder) + install_problems(folder) + leaks(folder)
            + reference_leaks(folder))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grading.release", description=__doc__.split("\n\n")[0])
    p.add_argument("--skip-book", action="store_true",
                   help="reuse the last release book build in _build/release-book (assemble and check only)")
    p.add_argument("--record-again", action="store_true",
                   help="record every chapter's expected values again, changed or not")
    options = p.parse_args(sys.argv[1:] if argv is None else argv)
    start = time.monotonic()
    record(force=options.record_again)
    html_dir = BOOK_OUT / "_build" / "html"
    if not options.skip_book or not html_dir.is_dir():
        html_dir = build_book()
    built = time.monotonic() - start
    out = assemble(html_dir)
    problems = check(out)
    if problems:
        print("the release is not fit to hand out:\n" + "\n".join(f"  {p}" for p in problems[:50]), file=sys.stderr)
        return 1
    zip_path = write_zip(out)
    print(f"wrote {out} and {zip_path} ({zip_path.stat().st_size / 2**20:.1f} MiB); book {built:.0f} s, "
          f"total {time.monotonic() - start:.0f} s; no solution body in any file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
