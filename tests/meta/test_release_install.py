"""The student edition set up from its own README, as a student gets it.

``tests/meta/test_release.py`` grades from inside ``_build/release`` with the repository's
``.venv``, whose packages and editable install would hide a release that cannot be set up.
Here ``release.zip`` is unpacked into a temporary folder, a virtual environment is made by
the README's "Set up once" commands, run as printed (``python3`` is the Python running
this test), and Chapter 1 is graded by the README's "Solve and check" commands, as printed:
the stub fails as not implemented, the solution passes.

The commands reach two package indexes served here on 127.0.0.1 (PEP 503 "simple"
pages, :class:`LocalIndex`): "PyPI", pip's default index (``PIP_INDEX_URL``), which holds
every pin of ``requirements-grader.txt`` and ``requirements-nodeps.txt``, PyTorch
included, as PyPI does; and "PyTorch's index", put in place of
:data:`grading.release.TORCH_INDEX` in the commands, which holds PyTorch alone. A
command that asked PyTorch's index for anything else would fail there, as it retries
for minutes where that index cannot be reached; each index logs what it was asked for.

Downloading PyTorch again on every ``make test`` would take minutes, and packing it
into a wheel here 1.5 GB of writing, so each index serves *metadata wheels*
(:func:`metadata_wheel`): the ``.dist-info`` of the distribution installed in
``.venv``, with its real name, version, wheel tags, dependencies and entry points, and
no code. pip resolves every dependency of every pin from them as it would from PyPI,
and installs them; after each command, the files of each distribution it installed
are hard-linked in from ``.venv`` in place of the metadata (each exactly the files its
``RECORD`` lists), so that the commands that follow, and the tests, work on what pip
would have unpacked. ``RELEASE_INSTALL_FROM_INDEX=1`` runs the commands against the real
indexes instead: pip then installs everything from PyPI and PyTorch's index, as on a
student's machine (minutes, and the network).
"""

from __future__ import annotations

import ast
import base64
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from grading.layout import RELEASE, ROOT, SOLUTIONS
from grading.pins import canonical, pins
from grading.release import TORCH_INDEX, readme_commands
from tests.meta.isolated_python import clean_env, installed, link_distributions, site_packages

STEM = "01_kv_memory"
FROM_INDEX = os.environ.get("RELEASE_INSTALL_FROM_INDEX") == "1"
# What may be in the environment besides the pins: what `python -m venv` puts there, and
# the release itself (its editable install, project "longctx-book").
BESIDE_THE_PINS = {"pip", "longctx-book"}
# The release's own packages, and grading/stubs.py's `tools` (the author's `make exercises`,
# which needs the repository and is no part of grading).
OWN_MODULES = {"grading", "modellab", "distlab", "gpucompile", "tests", "tools"}
# A file of every metadata wheel's .dist-info: a distribution that has it still waits for its files.
WAITING = "LONGCTX_METADATA_ONLY"
needs_release = pytest.mark.skipif(not RELEASE.with_suffix(".zip").exists(),
                                   reason="no _build/release.zip: run `make release` (make test does) first")
pytestmark = [needs_release, pytest.mark.timeout(900 if not FROM_INDEX else 3600)]


# -- the two package indexes --------------------------------------------------------------
def _wheel_tag(wheel_text: str) -> str:
    """The compressed tag set of a wheel's file name (``py3-none-any``,
    ``cp311-cp311-manylinux_2_28_x86_64``) from the ``Tag:`` lines of its WHEEL file."""
    tags = [line.split(":", 1)[1].strip().split("-") for line in wheel_text.splitlines() if line.startswith("Tag:")]
    if not tags:
        raise ValueError("a WHEEL file without a Tag line")
    return "-".join(".".join(dict.fromkeys(tag[i] for tag in tags)) for i in range(3))


def metadata_wheel(dist, folder: Path) -> Path:
    """A wheel, written into ``folder``, of what ``dist`` (an installed distribution) says
    of itself: its METADATA (name, version, dependencies, Python versions), WHEEL (tags)
    and entry points, beside the :data:`WAITING` file; no code. Its path."""
    name, version = dist.metadata["Name"], dist.version
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    wheel = dist.read_text("WHEEL") or "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = {"METADATA": dist.read_text("METADATA"), "WHEEL": wheel, WAITING: "the files come from .venv\n",
             "entry_points.txt": dist.read_text("entry_points.txt")}
    record = io.StringIO()
    path = folder / f"{stem}-{_wheel_tag(wheel)}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for filename, text in files.items():
            if text is None:
                continue
            data, arcname = text.encode(), f"{stem}.dist-info/{filename}"
            zf.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.write(f"{arcname},sha256={digest},{len(data)}\n")
        zf.writestr(f"{stem}.dist-info/RECORD", record.getvalue() + f"{stem}.dist-info/RECORD,,\n")
    return path


@dataclass
class LocalIndex:
    """A PEP 503 index at ``url`` on 127.0.0.1, serving ``wheels`` (``{canonical name: wheel}``)
    and nothing else: any other project is a 404. ``asked`` is every project asked for, in
    order, served or not."""

    root: str  # the URL's path: "/simple" as PyPI's, "/whl/cpu" as PyTorch's
    wheels: dict[str, Path]
    asked: list[str] = field(default_factory=list)

    def __post_init__(self):
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                index.answer(self)

            def log_message(self, *args):  # pip's output says enough
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}{self.root}"

    def answer(self, request) -> None:
        path = urllib.parse.unquote(request.path.split("?")[0])
        files = {wheel.name: wheel for wheel in self.wheels.values()}
        if path.startswith("/files/") and path[len("/files/"):] in files:
            body, kind = files[path[len("/files/"):]].read_bytes(), "application/octet-stream"
        elif path.startswith(self.root + "/"):
            project = canonical(path[len(self.root):].strip("/"))
            self.asked.append(project)
            if project not in self.wheels:
                request.send_error(404)
                return
            body = (f'<!DOCTYPE html><html><body><a href="/files/{self.wheels[project].name}">'
                    f"{self.wheels[project].name}</a></body></html>").encode()
            kind = "text/html"
        else:
            request.send_error(404)
            return
        request.send_response(200)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    """``{"pypi": ..., "torch": ...}``: the two :class:`LocalIndex` of the module
    docstring, with metadata wheels of ``.venv``'s distributions of every pin."""
    folder = tmp_path_factory.mktemp("wheels")
    wanted = {**pins((ROOT / "requirements-grader.txt").read_text()),
              **pins((ROOT / "requirements-nodeps.txt").read_text())}
    ours = installed(site_packages(Path(sys.executable)))
    wheels = {name: metadata_wheel(ours[name], folder) for name in sorted(wanted)}
    served = {"pypi": LocalIndex("/simple", wheels), "torch": LocalIndex("/whl/cpu", {"torch": wheels["torch"]})}
    yield served
    for index in served.values():
        index.close()


# -- the student's folder --------------------------------------------------------------------
def pip_env(pypi: LocalIndex | None = None) -> dict[str, str]:
    """The environment the README's commands run in: no virtual environment active, nothing
    of this checkout on the path; without this machine's pip configuration, with ``pypi``
    as the default index, unless RELEASE_INSTALL_FROM_INDEX=1. No retries: a package one
    of the local indexes does not hold fails at once."""
    if FROM_INDEX or pypi is None:
        return clean_env()
    env = {k: v for k, v in clean_env().items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": pypi.url + "/", "PIP_NO_CACHE_DIR": "1",
            "PIP_RETRIES": "0", "PIP_TIMEOUT": "30", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def run(command: str, cwd: Path, timeout: float = 1800, pypi: LocalIndex | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=pip_env(pypi), capture_output=True, text=True,
                          timeout=timeout)


def unpack_what_pip_installed(python: Path) -> list[str]:
    """Hard-link ``.venv``'s files of every distribution in ``python``'s environment that
    still holds a metadata wheel (:data:`WAITING`) over it; their ``name==version``."""
    site = site_packages(python)
    waiting = [name for name, dist in installed(site).items() if dist.read_text(WAITING) is not None]
    return link_distributions(sorted(waiting), site)


@pytest.fixture(scope="module")
def student(tmp_path_factory, indexes) -> Path:
    """release.zip unpacked (without ``book/``, which is read, not run) and set up by the
    README's "Set up once" commands, PyTorch's index replaced by the local one; the folder."""
    base = tmp_path_factory.mktemp("student")
    with zipfile.ZipFile(RELEASE.with_suffix(".zip")) as zf:
        zf.extractall(base, members=[n for n in zf.namelist() if not n.startswith(f"{RELEASE.name}/book/")])
    folder = base / RELEASE.name
    setup = readme_commands(folder / "README.md", "## Set up once")
    assert setup[0] == "python3 -m venv .venv", setup
    python = getattr(sys, "_base_executable", sys.executable)  # python3 of the README, a version .venv's pins fit
    for command in setup:
        local = command if FROM_INDEX else command.replace(TORCH_INDEX, indexes["torch"].url)
        done = run(re.sub(r"^python3 ", f"{python} ", local), folder, pypi=indexes["pypi"])
        assert done.returncode == 0, f"`{command}` failed in the release:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        if not FROM_INDEX:
            unpack_what_pip_installed(folder / ".venv" / "bin" / "python")
    return folder


def test_only_torch_comes_from_the_torch_index(student, indexes):
    """PyTorch's index is asked for PyTorch alone; every other pin, and nothing else, is
    asked of PyPI, and PyTorch is not (the CPU build stays)."""
    if FROM_INDEX:
        pytest.skip("the real indexes keep no log here")
    torch_index, pypi = indexes["torch"].asked, set(indexes["pypi"].asked)
    assert torch_index == ["torch"], f"PyTorch's index was asked for {', '.join(torch_index) or 'nothing'}"
    wanted = {**pins((student / "requirements-grader.txt").read_text()),
              **pins((student / "requirements-nodeps.txt").read_text())}
    assert pypi == set(wanted) - {"torch"}, (f"PyPI was asked for {sorted(pypi - set(wanted) | pypi & {'torch'})} "
                                             f"and not for {sorted(set(wanted) - {'torch'} - pypi)}")


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
