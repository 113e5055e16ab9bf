"""The pytest plugin that turns ``tests/test_<stem>.py`` files into graders.

Options
  --notebooks DIR   grade the notebooks in DIR (default: solutions/)
  --prove           prove the graders instead: every test runs against the solution
                    (must pass), the stub in exercises/ (must fail) and every bug in
                    tests/catalogue/<stem>.py (each bug must fail at least one test)

Markers
  points(n)         what a test is worth (default 1)
  core              the exercise's core cases: all the points when every case passes,
                    none otherwise (other tests share their points among their cases)
  exN_M             the exercise a test grades: ``pytest -m ex1_2``
  gpu               needs CUDA; skipped with the reason when there is none

A test asks for the fixture ``nb``: the chapter's notebook as the judge holds it, a proxy
(:class:`grading.judge.proxy.RemoteNotebook`) whose calls a sandboxed contestant answers.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from grading.proc import zygote as launcher  # first, and light: the zygote's imports overlap the heavy ones below
from grading.proc.zygote import IN_PROCESS

launcher.head_start()

from grading import determinism
from grading.judge import (
    diagnosis,
    preload,  # the model loaded before the first test's clock
    replay,
    substitute,  # each exercise graded alone (fixture + hook)
)
from grading.judge.loading import Notebooks
from grading.judge.messages import brief_failure, cell_did_not_run, raised_where, student_message, variant_of
from grading.judge.points import Points
from grading.judge.proof import Proof
from grading.judge.variant import Variant, chapter_stem
from grading.layout import ROOT, all_markers, exercise_of, exercise_of_marker
from grading.notebook.catalogue import load_catalogue
from grading.notebook.loader import read_notebook
from grading.outcome import classify, summary


def pytest_addoption(parser):
    group = parser.getgroup("grading")
    group.addoption("--notebooks", default=None, help="directory of notebooks to grade (default: solutions/)")
    group.addoption(
        "--prove", action="store_true",
        help="prove the graders: solutions pass, stubs fail, every catalogued bug is rejected"
    )
    group.addoption("--record-expected", default=None, metavar="DIR",
                    help="record every reference call the graders make into DIR/NN_topic.npz (grading.judge.replay; "
                         "make release runs it)")
    group.addoption("--diagnosis-write", action="store_true",
                    help="with --prove: store what each bug outputs in tests/diagnosis/ (grading.diagnosis)")


def pytest_configure(config):
    # The student edition has expected values, not references: the tests import
    # tests.references.ref_NN as before and get the recorded values (grading.judge.replay).
    if (ROOT / "tests" / "expected").is_dir() and not (ROOT / "tests" / "references").is_dir():
        replay.install(ROOT / "tests" / "expected")
    elif config.getoption("record_expected"):
        from grading.layout import discover_chapters

        replay.start_recording([f"tests.references.ref_{c.stem}" for c in discover_chapters()
                                if (ROOT / "tests" / "references" / f"ref_{c.stem}.py").is_file()])
    config.addinivalue_line("markers", "points(n): what the test is worth (default 1)")
    config.addinivalue_line("markers", "core: the exercise's core cases, all or nothing (grading.scoring.earned)")
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped with the reason otherwise")
    for name in all_markers():
        config.addinivalue_line("markers", f"{name}: grades exercise {exercise_of_marker(name)}")
    # Memory a notebook allocates and never writes reads as NaN, the same on every run
    # (grading.determinism, which says why not torch.use_deterministic_algorithms).
    determinism.make_deterministic()
    # The judge's references run on the contestants' thread count (one unless the batch
    # says more): beside a contestant on the same cores, a pool of spinning threads per
    # small fp64 step made Chapter 6's reference loops ten times slower.
    import torch

    torch.set_num_threads(max(1, launcher.current_limits().threads))
    config._grading = GradingState(config)
    # A process that will run graders (not xdist's controller, not a collect-only run) starts
    # its contestants' zygote now: its `import torch` overlaps the collection.
    runs_tests = hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)
    if runs_tests and not config.getoption("collectonly") and os.environ.get(IN_PROCESS) != "1":
        launcher.launcher().prestart()  # started already by head_start, unless it guessed wrong
    else:
        launcher.configure(launcher.current_limits())  # a zygote head_start guessed wrong: closed
    config.pluginmanager.register(substitute, "grading-substitute")
    config.pluginmanager.register(preload, "grading-preload")
    config.pluginmanager.register(config._grading, "grading-state")


class GradingState:
    """What one judge's run keeps: its notebooks (grading.judge.loading), its points
    (grading.judge.points), what ``--prove`` proved (grading.judge.proof), and what the
    graded notebook's failures say (diagnosis, the failing exercises)."""

    def __init__(self, config):
        self.config = config
        self.notebooks = Notebooks(config)
        self.points = Points()
        self.proof = Proof(config)
        self.load_errors_reported: set[tuple] = set()  # (stem, exercise, cells): said once per exercise
        # For grading.diagnosis: what each case of the graded notebook produced.
        self.graded_cases = defaultdict(lambda: defaultdict(dict))  # stem -> exercise -> case -> obs
        self.recorded_tests: list[str] = []  # --record-expected: the tests that ran (grading.judge.replay)
        # (stem, exercise) graded so far, and those with a failed test: a chapter graded as
        # a whole (the student edition) names a failing dependency first (student_message)
        self.exercises_ran: set[tuple[str, str]] = set()
        self.exercises_failed: set[tuple[str, str]] = set()

    @property
    def cache(self) -> dict[tuple[str, str], object]:
        return self.notebooks.cache

    def notebook_dir(self) -> Path:
        return self.notebooks.notebook_dir()

    def close(self):
        self.notebooks.close()

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and not report.skipped:
            self.recorded_tests.append(report.nodeid)
        props = dict(report.user_properties)
        stem, variant = props.get("chapter"), props.get("variant")
        if stem is None or not (report.when == "call" or report.failed or report.skipped):
            return
        if "case" in props:
            self._observed(stem, variant, props)
        if report.when == "teardown" and not report.failed:
            return
        if variant in ("graded", "solution"):
            self.points.record(stem, report, props)
        elif variant == "stub" or (variant and variant.startswith("bug-")):
            self.proof.record(stem, variant, report, props)

    def _observed(self, stem: str, variant: str, props: dict):
        case, exercise, observed = props["case"], props.get("exercise"), props.get("observed")
        if exercise is None:
            return
        self.proof.case_exercise[stem][case] = exercise
        if variant == "graded":
            self.graded_cases[stem][exercise][case] = observed
        elif variant.startswith("bug-"):
            self.proof.bug_cases[stem][variant[4:]][case] = observed

    def diagnoses(self) -> list[diagnosis.Diagnosis]:
        """The known mistakes behind the graded notebook's failures (grading.diagnosis);
        none with ``GRADING_DIAGNOSIS=off`` (how ``make bench`` measures what it costs)."""
        if os.environ.get("GRADING_DIAGNOSIS", "").lower() == "off":
            return []
        found = []
        for stem, runs in sorted(self.graded_cases.items()):
            found += diagnosis.diagnose_all(stem, runs)
        return found

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        self.points.summarise(tr)
        if self.config.getoption("prove"):
            self.proof.summarise(tr)
        elif self.graded_cases:
            found = self.diagnoses()
            if found:
                tr.section("diagnosis")
                for d in found:
                    tr.write_line(f"Exercise {d.exercise}: {d.message()}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        folder = self.config.getoption("record_expected")
        if folder and replay.recorder() is not None:
            replay.recorder().write(Path(folder), self.recorded_tests)
        if self.config.getoption("prove") and not hasattr(self.config, "workerinput"):
            if self.proof.failed() and session.exitstatus == 0:
                session.exitstatus = 1


HYPOTHESIS_PLUGIN = "hypothesispytest"  # hypothesis's pytest plugin, as its entry point names it
HYPOTHESIS_REPORT_KEYS = ("_hypothesis_stats", "_hypothesis_failing_examples")  # what its reports carry


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    """hypothesis's plugin imports hypothesis (1.5 s) for the terminal summary of every run,
    to list the observation files its tests wrote. A run where no test imported hypothesis
    (and no xdist worker reported one's statistics or failing example) has nothing there
    for it to say: the plugin is let go before the summary, and the run ends 1.5 s sooner."""
    manager = session.config.pluginmanager
    plugin = manager.get_plugin(HYPOTHESIS_PLUGIN)
    if plugin is None or "hypothesis" in sys.modules:
        return
    statistics = getattr(plugin, "PRINT_STATISTICS_OPTION", "--hypothesis-show-statistics")
    if session.config.getoption(statistics, None):
        return
    reporter = manager.get_plugin("terminalreporter")
    reports = [r for rs in getattr(reporter, "stats", {}).values() for r in rs]
    if any(key in getattr(r, "__dict__", {}) for r in reports for key in HYPOTHESIS_REPORT_KEYS):
        return
    manager.unregister(plugin)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        determinism.same_property_examples()  # recording, replay and proof draw the same cases


def pytest_generate_tests(metafunc):
    if "nb" not in metafunc.fixturenames:
        return
    stem = chapter_stem(metafunc.module.__file__)
    if stem is None:
        return
    if not metafunc.config.getoption("prove"):
        return  # the fixture grades the --notebooks directory
    name = metafunc.function.__name__
    exercise = exercise_of(metafunc.definition)
    alone = exercise is not None and substitute.chapter_table(stem) is not None  # the independence check
    confined = _bugs_inside_their_regions(stem) if alone else frozenset()
    bugs = [b for b in load_catalogue(stem) if (b.tests is None or b.tests in name)
            and (b.exercise == exercise or b.name not in confined)]
    variants = [Variant("solution"), Variant("stub")] + [Variant("bug", b) for b in bugs]
    if alone:
        variants.append(Variant("alone", exercise=exercise))
    metafunc.parametrize("nb", variants, indirect=True, ids=[v.id for v in variants], scope="module")


@functools.lru_cache(maxsize=None)
def _bugs_inside_their_regions(stem: str) -> frozenset[str]:
    """The chapter's catalogue bugs that change nothing outside their own exercise's
    regions (grading.notebook.catalogue): under ``--prove`` each runs against its own exercise's
    tests only, which is what keeps the proof of a chapter graded exercise by exercise
    from starting a contestant for every bug and every exercise."""
    solution = read_notebook(ROOT / "solutions" / f"{stem}.ipynb")
    return frozenset(b.name for b in load_catalogue(stem) if b.inside_its_regions(solution, f"{stem}.ipynb"))


@pytest.fixture(scope="module")
def nb(request):
    """The chapter's notebook, run into a module (see grading.notebook.loader)."""
    stem = chapter_stem(request.module.__file__)
    if stem is None:
        raise RuntimeError(f"{request.module.__file__}: graders live in files named test_NN_topic.py")
    variant = getattr(request, "param", Variant("graded"))
    return request.config._grading.notebooks.load(variant, stem)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    for item in items:
        why = replay.not_recorded(item)
        if why:
            item.add_marker(pytest.mark.skip(reason=why))
        if isinstance(item, pytest.Function) and variant_of(item) is not None:
            item.repr_failure = brief_failure


def _record_observation(item, call, report, variant: Variant) -> None:
    """The case and what the code produced there (grading.diagnosis), for the graded
    notebook and for each catalogue bug. Hidden tests (outside tests/) are left out:
    the stored table knows only the public cases."""
    if variant.kind not in ("graded", "bug") or report.skipped:
        return
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        return  # its failing example depends on the search (and its database), not only on the code
    if not (call.when == "call" or report.failed) or ROOT / "tests" not in Path(str(item.path)).resolve().parents:
        return
    if call.excinfo is not None and isinstance(call.excinfo.value, replay.NotRecorded):
        # The student edition has no expected value for this input (a reference applied to
        # the student's own output, as 10.4's count of causal work is): the case says
        # nothing about which mistake it is, so diagnosis compares the other cases.
        return
    observed = "passed" if report.passed else (diagnosis.observe(call.excinfo.value) if call.excinfo else None)
    report.user_properties += [("case", diagnosis.case_key(item.path, item.name, variant.id if variant.bug else None)),
                               ("observed", observed)]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    variant = variant_of(item)
    stem = chapter_stem(item.path)
    if variant is None or stem is None:
        return report
    points = item.get_closest_marker("points")
    report.user_properties += [
        ("chapter", stem),
        ("variant", variant.id),
        ("points", points.args[0] if points else 1),
        ("core", item.get_closest_marker("core") is not None),
        ("exercise", exercise_of(item)),
    ]
    _record_observation(item, call, report, variant)
    if variant.kind in ("graded", "solution", "alone"):
        if report.when == "call" and not report.skipped and exercise_of(item):
            item.config._grading.exercises_ran.add((stem, exercise_of(item)))
        if report.failed and call.excinfo is not None:
            report.longrepr = student_message(item, call.excinfo)
            if exercise_of(item):
                item.config._grading.exercises_failed.add((stem, exercise_of(item)))
            # The structured outcome the class run records as it is (no text parsed back).
            exc = call.excinfo.value
            load_error = cell_did_not_run(item, exc)
            report.user_properties += [("status", classify(exc).value),
                                       ("summary", summary(load_error or exc, raised_where(exc)))]
        return report
    if call.when != "call" or report.skipped:
        return report
    if variant.kind == "stub":
        if report.passed:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid}: this grader passes the stub notebook in exercises/, "
                               "so it asserts nothing")
            report.user_properties.append(("stub_escaped", True))
        else:
            report.outcome = "passed"
    else:
        report.user_properties.append(("why", variant.bug.why))
        exercise = exercise_of(item)
        if report.failed and substitute.chapter_table(stem) is not None and exercise != variant.bug.exercise:
            # A mistake in one exercise must cost no points in another.
            shown = pytest.Function.repr_failure(item, call.excinfo) if call.excinfo else report.longrepr
            report.longrepr = (f"{item.nodeid}: the catalogue bug {variant.bug.name} of Exercise "
                               f"{variant.bug.exercise} fails this test of Exercise {exercise}:\n{shown}")
            return report
        if report.failed:
            report.user_properties.append(("bug_rejected", True))
        report.outcome = "passed"
        report.longrepr = None
    return report
