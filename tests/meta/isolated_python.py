"""A Python with this repository's third-party packages but not the repository itself.

The development ``.venv`` has ``pip install -e .`` of this checkout: ``grading``,
``modellab``, ``distlab`` and the pytest entry point that loads the grading plugin are
importable from any folder. Gradescope's image (``tools/gradescope/setup.sh``) and an
nbgrader kernel have none of that. A test that grades with ``.venv`` proves nothing about
them (issue 27), so the tests of those front doors use :func:`make_isolated_python`.

It makes a virtual environment from the same base interpreter whose ``site-packages`` is
``.venv``'s, hard-linked file by file (a second of work, no bytes copied: hard links need
the same file system, which ``/tmp`` and the checkout share on the machines we test on;
elsewhere the files are copied), minus the editable install's finder, ``.pth`` file and
``dist-info`` (whose entry point would register the plugin). The environment is a real
folder of its own, so the grading sandbox, which binds ``sys.prefix`` read-only, sees all
of it. :func:`assert_isolated` proves that ``import grading`` fails there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

# What `pip install -e .` of this checkout left in site-packages (project "longctx-book").
EDITABLE = ("__editable__.longctx_book", "__editable___longctx_book", "longctx_book-")


def make_isolated_python(folder: Path) -> Path:
    """Make ``folder`` a virtual environment with ``.venv``'s packages but not this
    checkout's; returns its ``bin/python``. Raises RuntimeError when venv fails."""
    base = getattr(sys, "_base_executable", sys.executable)
    done = subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"python -m venv failed: {done.stderr[-2000:]}")
    python = folder / "bin" / "python"
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    shutil.rmtree(theirs)
    try:
        shutil.copytree(ours, theirs, copy_function=os.link, symlinks=True)
    except OSError:  # another file system: hard links cannot cross it
        shutil.rmtree(theirs, ignore_errors=True)
        shutil.copytree(ours, theirs, symlinks=True)
    for entry in theirs.iterdir():
        if entry.name.startswith(EDITABLE):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    return python


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything that would put the checkout on
    ``sys.path`` (PYTHONPATH, a virtual environment's activation, user site-packages)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "AUTOGRADER_ROOT")}
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra)
    return env


def assert_isolated(python: Path, cwd: Path) -> None:
    """``import grading`` fails in ``python`` (run from ``cwd``, outside any checkout),
    while the third-party packages the graders need import."""
    probe = subprocess.run([str(python), "-c", "import grading"], capture_output=True, text=True,
                           cwd=cwd, env=clean_env())
    assert probe.returncode != 0 and "No module named 'grading'" in probe.stderr, \
        f"the isolated Python imports this checkout's grading: {probe.stdout}{probe.stderr}"
    probe = subprocess.run([str(python), "-c", "import torch, pytest, nbformat, pytest_timeout"],
                           capture_output=True, text=True, cwd=cwd, env=clean_env())
    assert probe.returncode == 0, f"the isolated Python lacks a third-party package: {probe.stderr[-2000:]}"
