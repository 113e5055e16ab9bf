"""The student edition (issue 15, item 3): ``make release`` writes ``_build/release/``.

Building the book is the expensive part, so ``make test`` runs ``make release`` once and
these tests check the folder it left; run alone without it, they are skipped with that
reason. The checks that need no build (the leak detector finds what it must, the toc
of the release has no solution page) always run.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from grading import release
from grading.layout import RELEASE, SOLUTIONS

STEM = "01_kv_memory"
needs_release = pytest.mark.skipif(not (RELEASE / "README.md").exists(),
                                   reason="no _build/release: run `make release` (make test does) first")


def test_every_solution_body_is_checked():
    """No body is short enough to be exempt from the leak check, and there are bodies."""
    bodies = release.solution_bodies()
    assert len(bodies) >= 30
    short = {k: v for k, v in bodies.items() if len(v) < release.MIN_BODY_CHARS}
    assert not short, short


def test_leak_check_finds_a_body_in_highlighted_html_and_in_a_notebook(tmp_path):
    """The detector can fail: a body rendered as Pygments would (spans, entities, its own
    line breaks) and a body inside a notebook's JSON are both found."""
    where, body = max(release.solution_bodies().items(), key=lambda kv: len(kv[1]))
    tokens = body.split(" ")
    (tmp_path / "page.html").write_text("<pre>" + "\n   ".join(
        f'<span class="n">{html.escape(t)}</span>' for t in tokens) + "</pre>")
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": body.replace(" ", "\n  "),
                                                               "outputs": []}]}))
    found = release.leaks(tmp_path)
    assert any(f.startswith("page.html") for f in found) and any(f.startswith("nb.ipynb") for f in found), found
    (tmp_path / "page.html").write_text("<pre>nothing here</pre>")
    (tmp_path / "nb.ipynb").unlink()
    assert release.leaks(tmp_path) == []


def test_release_toc_has_no_solution_page_and_keeps_the_rest():
    import yaml

    toc = yaml.safe_load(release.release_toc().read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert not [f for f in files if f.startswith("solutions/")]
    assert "book/references" in files and "chapters/05_flash_attention" in files and "exercises/01_kv_memory" in files


@needs_release
def test_release_has_no_solutions_catalogue_hidden_tests_or_solution_body():
    assert release.check(RELEASE) == []
    assert (RELEASE / "book" / "index.html").is_file()
    assert not (RELEASE / "book" / "solutions").exists()
    assert (RELEASE / "exercises" / f"{STEM}.ipynb").is_file() and (RELEASE / "tests" / f"test_{STEM}.py").is_file()
    assert RELEASE.with_suffix(".zip").is_file()


@needs_release
def test_graders_run_from_inside_the_release(tmp_path):
    """pytest tests/test_01_kv_memory.py --notebooks exercises/ works there: the stubs
    fail as not implemented, and a solved notebook passes, with the release's own grading/."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(RELEASE)}
    where = subprocess.run([sys.executable, "-c", "import grading; print(grading.__file__)"], cwd=RELEASE, env=env,
                           capture_output=True, text=True)
    assert where.stdout.strip().startswith(str(RELEASE)), where
    args = [sys.executable, "-m", "pytest", f"tests/test_{STEM}.py", "-p", "no:cacheprovider", "-q", "-n", "0"]
    stubs = subprocess.run([*args, "--notebooks", "exercises/"], cwd=RELEASE, env=env, capture_output=True, text=True)
    assert stubs.returncode == 1 and "not implemented" in stubs.stdout, stubs.stdout[-3000:] + stubs.stderr[-2000:]
    solved = tmp_path / "mine"
    solved.mkdir()
    shutil.copyfile(SOLUTIONS / f"{STEM}.ipynb", solved / f"{STEM}.ipynb")
    ok = subprocess.run([*args, "--notebooks", str(solved)], cwd=RELEASE, env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]


@needs_release
def test_a_catalogue_bug_graded_from_the_release_is_diagnosed(tmp_path):
    """Issue 26, item 2: the release ships the diagnosis tables (names, hints, sections,
    outputs; no bug code), so a known mistake graded there is named as in the repository."""
    from grading.catalogue import load_catalogue

    stem = "10_context_parallel"
    bug = next(b for b in load_catalogue(stem) if b.name == "merge_lse_overflows")
    mine = tmp_path / "mine"
    mine.mkdir()
    nb = bug.apply(nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4))
    nbformat.write(nb, mine / f"{stem}.ipynb")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(RELEASE)}
    done = subprocess.run([sys.executable, "-m", "pytest", f"tests/test_{stem}.py", "-p", "no:cacheprovider", "-q",
                           "-n", "0", "-m", "ex10_1", "--notebooks", str(mine)], cwd=RELEASE, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "This looks like a known mistake" in done.stdout and "overflows" in done.stdout, done.stdout[-3000:]
