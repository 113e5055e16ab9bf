"""The pieces of the Gradescope autograder's proof that ``make bench`` measures too: the
submissions graded, and the stand-in for ``/autograder`` and its ``run_autograder``.

``tests/meta/test_gradescope.py`` proves the zip with them; ``benchmarks/bench_grading.py``
and ``bench_gradescope.py`` time and weigh the same runs. A module of its own, so that
neither the benchmarks nor the test imports the other's module.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import nbformat

from grading.layout import EXERCISES, SOLUTIONS, TESTS
from grading.notebook.catalogue import load_catalogue
from tests.meta.isolated_python import clean_env

STEM = "01_kv_memory"
STEM3 = "03_quantized_kv_cache"
SCHEMA = json.loads((TESTS / "gradescope_results.schema.json").read_text())
MISTAKE = "gb_for_gib"  # Exercise 1.3
MISTAKE3 = "zero_point_not_applied_on_dequantize"  # Exercise 3.2


def solution(stem):
    return nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4)


def stub(stem):
    return nbformat.read(EXERCISES / f"{stem}.ipynb", as_version=4)


def crashing(stem):
    nb = solution(stem)
    nb.cells.insert(2, nbformat.v4.new_code_cell("import os\nos._exit(3)"))
    return nb


def mistaken(stem, name):
    """The solution with one known mistake of the catalogue."""
    bug = next(b for b in load_catalogue(stem) if b.name == name)
    return bug.apply(solution(stem), f"{stem}.ipynb")


# Each submission: chapter stem -> the notebook it hands in.
SUBMISSIONS = {
    "solved": {STEM: lambda: solution(STEM), STEM3: lambda: solution(STEM3)},
    "unsolved": {STEM: lambda: stub(STEM), STEM3: lambda: stub(STEM3)},
    "crashing": {STEM: lambda: crashing(STEM), STEM3: lambda: solution(STEM3)},
    "mistaken": {STEM: lambda: mistaken(STEM, MISTAKE), STEM3: lambda: mistaken(STEM3, MISTAKE3)},
}


def autograder_root(zip_path: Path, root: Path) -> Path:
    """What Gradescope makes of the zip: /autograder/source and /autograder/run_autograder."""
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
        for info in zf.infolist():  # zipfile drops the permissions: restore the executable bits
            mode = info.external_attr >> 16
            if mode & stat.S_IXUSR:
                os.chmod(root / "source" / info.filename, 0o755)
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    return root


def run_autograder(root: Path, python: Path) -> subprocess.CompletedProcess:
    """run_autograder as Gradescope runs it, from outside the checkout, with ``python``
    standing in for the ``.venv`` that setup.sh makes in ``source/``."""
    return subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, text=True,
                          env=clean_env(AUTOGRADER_PYTHON=str(python)), cwd=root, timeout=900)
