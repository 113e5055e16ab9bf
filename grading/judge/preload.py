"""Load the model the selected graders run before the first test's clock starts.

A grader that runs SmolLM2 (Chapters 8 and 12, ``modellab.load_model``) loads it in the
judge, once per process (``load_model`` keeps it). Read from its converted safetensors
that takes a second or two with a warm page cache; a student's first run converts it from
the wheel's GGUF first (20 s to over a minute), and a small container's cold disk is slow.
Counted inside the first such test, the load spent up to 104 s of pytest-timeout's 120 s
(``pytest.ini``) and could fail a correct notebook as an endless loop. So this plugin
loads it when collection is done, where a test selected to run needs it, before any
test's timer starts, and keeps the seconds it took (:func:`seconds_spent`): the judge
reports them (a :class:`grading.wire.SetupRecord`) and its parent adds them to the
chapter's time limit (:mod:`grading.proc.judges`). A load that fails is left for the test
to report, in its own words, when it runs.
"""

from __future__ import annotations

import time
import types

import pytest

MODEL_PACKAGE = "modellab"


def needs_model(item) -> bool:
    """Does this test load the model: its function names ``modellab`` (an import in its
    body, as Chapter 12's does) or its module holds ``modellab`` (Chapter 8's fixture)?"""
    code = getattr(getattr(item, "function", None), "__code__", None)
    if code is not None and MODEL_PACKAGE in code.co_names:
        return True
    module = getattr(item, "module", None)
    return isinstance(getattr(module, MODEL_PACKAGE, None), types.ModuleType)


def _runs_tests(config) -> bool:
    """Only a process that runs tests loads it: not a collect-only run, not xdist's controller."""
    if config.getoption("collectonly"):
        return False
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    session.config._model_load_s = 0.0
    if not _runs_tests(session.config) or not any(needs_model(item) for item in session.items):
        return
    start = time.monotonic()
    try:
        import modellab

        if modellab.is_installed():
            modellab.load_model()
    except Exception:  # noqa: BLE001 - the test that needs the model reports why it cannot load
        pass
    session.config._model_load_s = time.monotonic() - start


def seconds_spent(config) -> float:
    """Seconds this run spent loading the model before its first test (0.0 if none)."""
    return float(getattr(config, "_model_load_s", 0.0))
