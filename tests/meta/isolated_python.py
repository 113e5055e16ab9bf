"""A Python with this repository's third-party packages but not the repository itself.

The development ``.venv`` has ``pip install -e .`` of this checkout: ``grading``,
``modellab``, ``distlab`` and the pytest entry point that loads the grading plugin are
importable from any folder. Gradescope's image (``tools/gradescope/setup.sh``) and an
nbgrader kernel have none of that. A test that grades with ``.venv`` proves nothing about
them, so the tests of those front doors use :func:`make_isolated_python`.

It makes a virtual environment from the same base interpreter whose ``site-packages`` is
``.venv``'s, hard-linked file by file (a second of work, no bytes copied: hard links need
the same file system, which ``/tmp`` and the checkout share on the machines we test on;
elsewhere the files are copied), minus the editable install's finder, ``.pth`` file and
``dist-info`` (whose entry point would register the plugin). The environment is a real
folder of its own, so the grading sandbox, which binds ``sys.prefix`` read-only, sees all
of it. :func:`assert_isolated` proves that ``import grading`` fails there.

Given a requirements text (``requirements-grader.txt``, or the part of it a Gradescope zip
ships), it links only the distributions that text pins, each exactly the files its
``RECORD`` lists (:func:`link_distributions`): what ``pip install`` of those pins would
have put there, so a grader that imports anything else fails as it would on Gradescope or
in the student edition.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

# What `pip install -e .` of this checkout left in site-packages (project "longctx-book").
EDITABLE = ("__editable__.longctx_book", "__editable___longctx_book", "longctx_book-")


def site_packages(python: Path) -> Path:
    """The ``purelib`` folder of the Python ``python``."""
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except FileExistsError:
        os.unlink(target)
        os.link(source, target)
    except FileNotFoundError:
        if not os.path.exists(source):
            raise
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.link(source, target)
    except OSError:  # another file system: hard links cannot cross it
        shutil.copy2(source, target)


def installed(site: Path) -> dict:
    """``{canonical name: importlib.metadata.Distribution}`` of the distributions in ``site``."""
    from importlib import metadata

    from grading.pins import canonical

    return {canonical(d.metadata["Name"]): d for d in metadata.distributions(path=[str(site)])}


def _record(dist) -> list[str]:
    """The paths, relative to site-packages, that a distribution's RECORD lists there
    (console scripts and other files RECORD places outside it are left out)."""
    return [path for entry in dist.files or [] if not (path := os.path.normpath(entry)).startswith("..")]


def remove_distribution(site: Path, dist) -> None:
    """Remove ``dist`` (a distribution in ``site``) as ``pip uninstall`` would: the files
    its RECORD lists, then its dist-info folder."""
    paths = _record(dist)
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(site / path)
    for folder in {path.split(os.sep)[0] for path in paths if path.split(os.sep)[0].endswith(".dist-info")}:
        shutil.rmtree(site / folder, ignore_errors=True)


def link_distributions(names: list[str], target: Path, source: Path | None = None) -> list[str]:
    """Hard-link into ``target`` (a ``site-packages``) every file that the RECORD of each
    distribution ``names`` lists in ``source`` (this Python's ``site-packages``), in place
    of a distribution of the same name already in ``target`` (removed first, as pip's
    upgrade would). Returns ``name==version`` of each one linked. Raises LookupError for a
    name that ``source`` does not hold."""
    from grading.pins import canonical

    source = Path(sysconfig.get_paths()["purelib"]) if source is None else source
    ours, theirs = installed(source), installed(target)
    missing = sorted(canonical(n) for n in names if canonical(n) not in ours)
    if missing:
        raise LookupError(f"{source} does not hold {', '.join(missing)}")
    linked = []
    for name in names:
        dist = ours[canonical(name)]
        if canonical(name) in theirs:
            remove_distribution(target, theirs[canonical(name)])
        for path in _record(dist):
            with contextlib.suppress(FileNotFoundError):  # RECORD may list what was never written
                _link(os.path.join(source, path), os.path.join(target, path))
        linked.append(f"{dist.metadata['Name']}=={dist.version}")
    return linked


def make_isolated_python(folder: Path, requirements: str | None = None) -> Path:
    """Make ``folder`` a virtual environment with ``.venv``'s packages but not this
    checkout's (with ``requirements``, a requirements text: only the distributions it
    pins); returns its ``bin/python``. Raises RuntimeError when venv fails."""
    base = getattr(sys, "_base_executable", sys.executable)
    done = subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"python -m venv failed: {done.stderr[-2000:]}")
    python = folder / "bin" / "python"
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = site_packages(python)
    if requirements is not None:
        from grading.pins import pins

        link_distributions(sorted(pins(requirements)), theirs, ours)
        return python
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
