"""The student edition set up from its own README, as a student gets it.

``tests/meta/test_release.py`` grades from inside ``_build/release`` with the repository's
``.venv``, whose packages and editable install would hide a release that cannot be set up.
Here ``release.zip`` is unpacked into a temporary folder, a virtual environment is made by
the README's "Set up once" commands, run as printed (``python3`` is the Python running
this test), and Chapter 1 is graded by the README's "Solve and check" commands, as printed:
the stub fails as not implemented, the solution passes.

Downloading PyTorch again on every ``make test`` would take minutes, so by default pip
runs offline (``PIP_NO_INDEX``, no configuration file) after the distributions that
``requirements-grader.txt`` and ``requirements-nodeps.txt`` pin have been hard-linked in
from ``.venv``, each exactly the files its ``RECORD`` lists, in place of a version the new
environment came with (setuptools, on Python 3.11): what pip would have unpacked.
Everything else is pip's own work from the README's commands: it must find every pin and
every dependency of every pin satisfied with nothing to fetch (one missing from the file
stops it, there being no index), and it builds and installs the release's own
``pyproject.toml``, which registers the grading plugin. ``RELEASE_INSTALL_FROM_INDEX=1``
skips the linking: pip then installs everything from the configured index, as on a
student's machine (minutes, and the network).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grading.layout import RELEASE, SOLUTIONS
from grading.pins import canonical, pins
from tests.meta.isolated_python import clean_env, link_distributions, site_packages

STEM = "01_kv_memory"
FROM_INDEX = os.environ.get("RELEASE_INSTALL_FROM_INDEX") == "1"
# What may be in the environment besides the pins: what `python -m venv` puts there, and
# the release itself (its editable install, project "longctx-book").
BESIDE_THE_PINS = {"pip", "longctx-book"}
# The release's own packages, and grading/stubs.py's `tools` (the author's `make exercises`,
# which needs the repository and is no part of grading).
OWN_MODULES = {"grading", "modellab", "distlab", "gpucompile", "tests", "tools"}
needs_release = pytest.mark.skipif(not RELEASE.with_suffix(".zip").exists(),
                                   reason="no _build/release.zip: run `make release` (make test does) first")
pytestmark = [needs_release, pytest.mark.timeout(900 if not FROM_INDEX else 3600)]


def readme_commands(readme: Path, heading: str) -> list[str]:
    """The commands of the first ``bash`` block after ``heading`` in ``readme``, as printed
    (comment lines and trailing comments cut, continuation lines joined)."""
    text = readme.read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text[text.index(heading):], re.S).group(1)
    lines = (re.sub(r"(^|\s+)#.*$", "", line).strip() for line in block.replace("\\\n", " ").splitlines())
    return [line for line in lines if line]


def pip_env() -> dict[str, str]:
    """The environment the README's commands run in: no virtual environment active, nothing
    of this checkout on the path; offline, without this machine's pip configuration, unless
    RELEASE_INSTALL_FROM_INDEX=1."""
    if FROM_INDEX:
        return clean_env()
    env = {k: v for k, v in clean_env().items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def run(command: str, cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=pip_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    """release.zip unpacked (without ``book/``, which is read, not run) and set up by the
    README's "Set up once" commands; the folder."""
    base = tmp_path_factory.mktemp("student")
    with zipfile.ZipFile(RELEASE.with_suffix(".zip")) as zf:
        zf.extractall(base, members=[n for n in zf.namelist() if not n.startswith(f"{RELEASE.name}/book/")])
    folder = base / RELEASE.name
    setup = readme_commands(folder / "README.md", "## Set up once")
    assert setup[0] == "python3 -m venv .venv", setup
    python = getattr(sys, "_base_executable", sys.executable)  # python3 of the README, a version .venv's pins fit
    for n, command in enumerate(setup):
        if n == 1 and not FROM_INDEX:
            wanted = {**pins((folder / "requirements-grader.txt").read_text()),
                      **pins((folder / "requirements-nodeps.txt").read_text())}
            link_distributions(sorted(wanted), site_packages(folder / ".venv" / "bin" / "python"))
        done = run(re.sub(r"^python3 ", f"{python} ", command), folder)
        assert done.returncode == 0, f"`{command}` failed in the release:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return folder


def test_the_readme_installs_the_pinned_grader_and_nothing_else(student):
    """Every pin of requirements-grader.txt is installed at its version, nothing but those,
    the model and the release itself, and no installed distribution lacks a dependency
    (but the model's, which it installs with --no-deps on purpose: a llama.cpp build and
    a CLI that transformers does not need)."""
    python = student / ".venv" / "bin" / "python"
    listed = json.loads(run(f"{python} -m pip list --format json", student).stdout)
    have = {canonical(d["name"]): d["version"] for d in listed}
    grader = pins((student / "requirements-grader.txt").read_text())
    model = pins((student / "requirements-nodeps.txt").read_text())
    wrong = {name: (version, have.get(name)) for name, version in {**grader, **model}.items()
             if have.get(name, "").split("+")[0] != version}
    assert not wrong, f"pinned vs installed: {wrong}"
    extra = sorted(set(have) - set(grader) - set(model) - BESIDE_THE_PINS)
    assert not extra, f"installed beside the pins: {extra}"
    check = run(f"{python} -m pip check", student)
    broken = [line for line in check.stdout.splitlines() if not line.startswith(tuple(model))]
    assert not broken, check.stdout


def _third_party_imports(folder: Path) -> set[str]:
    """The top-level modules the release's Python files and exercise notebooks import, less
    the standard library and the release's own packages."""
    sources = [p.read_text(encoding="utf-8") for p in folder.rglob("*.py") if ".venv" not in p.parts]
    for path in sorted((folder / "exercises").glob("*.ipynb")):
        sources += ["\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
                    for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
    names = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "importorskip"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                names.add(str(node.args[0].value).split(".")[0])
    return names - set(sys.stdlib_module_names) - OWN_MODULES


def test_every_module_the_release_imports_is_installed(student):
    """What Chapters 7 and 8 import (triton, transformers) included, though only Chapter 1
    is graded here."""
    modules = sorted(_third_party_imports(student))
    assert {"torch", "numpy", "pytest", "nbformat", "triton", "transformers"} <= set(modules), modules
    probe = run(f"{student / '.venv' / 'bin' / 'python'} -c 'import {', '.join(modules)}'", student)
    assert probe.returncode == 0, probe.stderr[-3000:]


def test_the_readme_check_commands_grade_chapter_1(student):
    """The README's "Solve and check" commands, as printed: on the stub, its one-exercise
    command fails with "not implemented"; with the solution in place of the stub, its
    whole-chapter command passes."""
    check = readme_commands(student / "README.md", "## Solve and check")
    chapter = next(c for c in check if f"test_{STEM}.py" in c and not re.search(r" -m ex\d", c))
    one = next(c for c in check if f"test_{STEM}.py" in c and re.search(r" -m ex\d", c))
    stub = run(one, student, timeout=600)
    assert stub.returncode == 1 and "not implemented" in stub.stdout, stub.stdout[-3000:] + stub.stderr[-2000:]
    shutil.copyfile(SOLUTIONS / f"{STEM}.ipynb", student / "exercises" / f"{STEM}.ipynb")
    solved = run(chapter, student, timeout=600)
    assert solved.returncode == 0, solved.stdout[-3000:] + solved.stderr[-2000:]
    assert " passed" in solved.stdout.splitlines()[-1] and "failed" not in solved.stdout.splitlines()[-1], \
        solved.stdout[-2000:]
