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
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from grading.proc import zygote as launcher  # first, and light: the zygote's imports overlap the heavy ones below
from grading.proc.zygote import IN_PROCESS

launcher.head_start()

from grading.judge.messages import (brief_failure, cell_did_not_run, dependency_first, load_error_message,  # noqa: F401
                                    raised_where, student_message, variant_of)
from grading.judge.variant import Variant, chapter_stem
from grading.layout import ROOT, all_markers, exercise_of, exercise_of_marker
from grading.judge import replay
from grading import determinism, diagnosis
from grading.notebook.catalogue import load_catalogue
from grading.outcome import ChapterPoints, classify, earned, summary
from grading.compare import GradingFailure
from grading.notebook.loader import NotebookLoadError, read_notebook
from grading.judge import substitute  # each exercise graded alone (fixture + hook)
from grading.judge import preload  # the model loaded before the first test's clock





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
    config.addinivalue_line("markers", "core: the exercise's core cases, all or nothing (grading.outcome.earned)")
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped with the reason otherwise")
    for name in all_markers():
        config.addinivalue_line("markers", f"{name}: grades exercise {exercise_of_marker(name)}")
    # Memory a notebook allocates and never writes reads as NaN, the same on every run
    # (grading.determinism, which says why not torch.use_deterministic_algorithms).
    determinism.make_deterministic()
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


class Unloadable:
    """Stands in for a notebook that could not be read: every use says why."""

    def __init__(self, message: str):
        self.message = message

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        raise GradingFailure(self.message)


class GradingState:
    def __init__(self, config):
        self.config = config
        self.cache: dict[tuple[str, str], object] = {}
        # (stem, test function) -> [passed items, graded items, skipped items, points]
        self.tests = defaultdict(lambda: [0, 0, 0, 1, False])
        self.stub_escapes: list[str] = []
        self.stub_checked = 0
        self.bug_runs: dict[str, list[str]] = {}  # "stem/bug" -> tests that rejected it
        self.bug_why: dict[str, str] = {}
        self.load_errors_reported: set[tuple] = set()  # (stem, exercise, cells): said once per exercise
        # For grading.diagnosis: what each case produced, as an observation or "passed".
        self.graded_cases = defaultdict(lambda: defaultdict(dict))  # stem -> exercise -> case -> obs
        self.bug_cases = defaultdict(lambda: defaultdict(dict))  # stem -> bug -> case -> obs
        self.case_exercise = defaultdict(dict)  # stem -> case -> exercise
        self._proof: dict | None = None
        self.recorded_tests: list[str] = []  # --record-expected: the tests that ran (grading.judge.replay)
        # (stem, exercise) graded so far, and those with a failed test: a chapter graded as
        # a whole (the student edition) names a failing dependency first (student_message)
        self.exercises_ran: set[tuple[str, str]] = set()
        self.exercises_failed: set[tuple[str, str]] = set()

    # -- loading ---------------------------------------------------------------
    def notebook_dir(self) -> Path:
        option = self.config.getoption("notebooks")
        return Path(option).resolve() if option else ROOT / "solutions"

    def load(self, variant: Variant, stem: str, tmp_factory):
        key = (variant.id, stem)
        if key not in self.cache:
            self.cache[key] = self._load(variant, stem, tmp_factory)
        return self.cache[key]

    def _load(self, variant: Variant, stem: str, tmp_factory):
        """The variant's notebook as the judge grades it: a proxy whose code runs in a
        contestant (grading.judge). Only a submission (``--notebooks``) must be a regular
        file; the book's own notebooks and the ones made from them here are trusted."""
        import nbformat

        from grading.judge.proxy import RemoteNotebook, open_notebook

        name = f"{stem}.ipynb"
        if os.environ.get(IN_PROCESS) == "1":
            return self._load_in_process(variant, stem, name)
        try:
            if variant.kind == "graded":
                folder = self.notebook_dir()
                return open_notebook(folder / name, stem, trusted=folder == ROOT / "solutions")
            if variant.kind == "solution":
                return open_notebook(ROOT / "solutions" / name, stem, trusted=True)
            if variant.kind == "stub":
                return open_notebook(ROOT / "exercises" / name, stem, trusted=True)
            solution = read_notebook(ROOT / "solutions" / name)
            changed = substitute.only_solved(solution, variant.exercise, name) if variant.kind == "alone" \
                else variant.bug.apply(solution, name)
            return RemoteNotebook(ROOT / "solutions" / name, nbformat.writes(changed), stem, name)
        except NotebookLoadError as exc:
            return Unloadable(f"the notebook could not be loaded: {exc}")

    def _load_in_process(self, variant: Variant, stem: str, name: str):
        """The baseline of ``make bench``'s ``grade.isolation_overhead`` only: the notebook
        run in this process, as graders were run before the judge and the contestant were
        two processes. Never for grading anyone: the notebook's code would run here."""
        from grading.contestant import services
        from grading.notebook.loader import load_notebook

        folder = self.notebook_dir() if variant.kind == "graded" else ROOT / ("exercises" if variant.kind == "stub"
                                                                           else "solutions")
        loaded = load_notebook(folder / name)
        loaded.services = services.run  # this process is the contestant: make bench's in-process baseline
        return loaded

    def close(self):
        for notebook in self.cache.values():
            close = getattr(type(notebook), "close", None)
            if close is not None:
                notebook.close()

    # -- reporting -------------------------------------------------------------
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
            tally = self.tests[(stem, report.nodeid.split("::")[-1].split("[")[0])]
            tally[3] = props.get("points", 1)
            tally[4] = props.get("core", False)
            if report.skipped:
                tally[2] += 1
            else:
                tally[1] += 1
                tally[0] += 1 if report.passed and report.when == "call" else 0
        elif variant == "stub" and report.when == "call" and not report.skipped:
            self.stub_checked += 1
            if props.get("stub_escaped"):
                self.stub_escapes.append(report.nodeid)
        elif variant and variant.startswith("bug-") and report.when == "call":
            key = f"{stem}/{variant[4:]}"
            self.bug_why[key] = props.get("why", "")
            rejected = self.bug_runs.setdefault(key, [])
            if props.get("bug_rejected"):
                rejected.append(report.nodeid.split("::")[-1])

    def _observed(self, stem: str, variant: str, props: dict):
        case, exercise, observed = props["case"], props.get("exercise"), props.get("observed")
        if exercise is None:
            return
        self.case_exercise[stem][case] = exercise
        if variant == "graded":
            self.graded_cases[stem][exercise][case] = observed
        elif variant.startswith("bug-"):
            self.bug_cases[stem][variant[4:]][case] = observed

    # -- diagnosis ---------------------------------------------------------------
    def diagnoses(self) -> list[diagnosis.Diagnosis]:
        """The known mistakes behind the graded notebook's failures (grading.diagnosis);
        none with ``GRADING_DIAGNOSIS=off`` (how ``make bench`` measures what it costs)."""
        if os.environ.get("GRADING_DIAGNOSIS", "").lower() == "off":
            return []
        found = []
        for stem, runs in sorted(self.graded_cases.items()):
            found += diagnosis.diagnose_all(stem, runs)
        return found

    def proof_of_diagnosis(self) -> dict:
        """Under ``--prove``: each chapter's table checked against this run (or written,
        with ``--diagnosis-write``), and how well it diagnoses the catalogue."""
        if self._proof is None:
            self._proof = {}
            for stem in sorted(self.bug_cases):
                write = self.config.getoption("diagnosis_write")
                fresh = diagnosis.build(stem, load_catalogue(stem), self.bug_cases[stem], self.case_exercise[stem],
                                        write=write)
                if write:
                    diagnosis.write_table(stem, fresh)
                table = diagnosis.load_table(stem)
                result = diagnosis.proof(table, fresh)
                result["stale"] = sorted(set(table) ^ set(fresh))  # names only: a -k run still knows them all
                self._proof[stem] = result
            if self._proof:
                totals = {"bugs": sum(p["bugs"] for p in self._proof.values()),
                          "recalled": sum(p["recalled"] for p in self._proof.values()),
                          "false_diagnoses": sum(len(p["false_diagnoses"]) for p in self._proof.values())}
                totals["recall"] = totals["recalled"] / totals["bugs"] if totals["bugs"] else 1.0
                out = ROOT / "_build" / "diagnosis"
                out.mkdir(parents=True, exist_ok=True)
                (out / "proof.json").write_text(json.dumps(
                    {"totals": totals, "chapters": self._proof}, indent=1, sort_keys=True))
        return self._proof

    def points_by_chapter(self) -> dict[str, ChapterPoints]:
        """Points per chapter. A test function is worth its ``points``; parametrized cases
        share them (partial credit). A function whose every case was skipped is not counted;
        skipped cases of a function that ran are not counted either (its points are shared
        by the cases that ran)."""
        out: dict[str, ChapterPoints] = defaultdict(ChapterPoints)
        for (stem, _), (passed, graded, skipped, points, core) in self.tests.items():
            entry = out[stem]
            entry.skipped_cases += skipped
            if graded == 0:
                entry.skipped_tests += 1
                continue
            entry.earned += earned(points, passed, graded, core)
            entry.possible += points
        return dict(out)

    def escaped_bugs(self) -> list[str]:
        return sorted(k for k, v in self.bug_runs.items() if not v)

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        chapters = self.points_by_chapter()
        if chapters:
            tr.section("points")
            total = [0.0, 0]
            for stem, p in sorted(chapters.items()):
                got, possible, skipped, cases = p.earned, p.possible, p.skipped_tests, p.skipped_cases
                total[0] += got
                total[1] += possible
                # pytest counts skipped cases; say the same number, and which whole tests it holds.
                note = f"  ({cases} skipped case(s), not counted" if cases else ""
                note += f"; {skipped} test(s) skipped entirely)" if skipped else (")" if cases else "")
                tr.write_line(f"{stem:<28} {got:>6.1f} / {possible:<4}{note}")
            tr.write_line(f"{'total':<28} {total[0]:>6.1f} / {total[1]:<4}")
        if self.config.getoption("prove"):
            tr.section("grader proof")
            tr.write_line(f"stubs: {self.stub_checked} grader tests ran on exercises/, "
                          f"{len(self.stub_escapes)} passed a stub")
            for nodeid in self.stub_escapes:
                tr.write_line(f"  PASSED A STUB (asserts nothing): {nodeid}")
            for key in sorted(self.bug_runs):
                tests = self.bug_runs[key]
                if tests:
                    more = f" and {len(tests) - 1} more" if len(tests) > 1 else ""
                    tr.write_line(f"  rejected  {key:<48} by {tests[0]}{more}")
                else:
                    tr.write_line(f"  ESCAPED   {key:<48} no grader rejects it: {self.bug_why[key]}")
            tr.write_line(f"catalogue: {len(self.bug_runs)} wrong implementations, {len(self.escaped_bugs())} escaped")
            self._summarise_proof(tr)
        elif self.graded_cases:
            found = self.diagnoses()
            if found:
                tr.section("diagnosis")
                for d in found:
                    tr.write_line(f"Exercise {d.exercise}: {d.message()}")

    def _summarise_proof(self, tr):
        proof = self.proof_of_diagnosis()
        if not proof:
            return
        tr.section("diagnosis from the catalogue")
        for stem, p in proof.items():
            if not p["bugs"] and not p["stale"]:
                continue
            tr.write_line(f"{stem:<28} {p['recalled']:>3} / {p['bugs']:<3} bugs diagnosed as themselves, "
                          f"{len(p['false_diagnoses'])} false")
            for name, why in sorted(p["missed"].items()):
                tr.write_line(f"  not diagnosed  {name}: {why}")
            for line in p["false_diagnoses"]:
                tr.write_line(f"  FALSE DIAGNOSIS  {line}")
            if p.get("kinds_recognised"):
                tr.write_line(f"  recognised by kind: {', '.join(p['kinds_recognised'])}")
            for line in p.get("unrecognised", []):
                tr.write_line(f"  UNRECOGNISED  {line}")
            if p["stale"]:
                tr.write_line(f"  STALE TABLE  {diagnosis.table_path(stem).name} and the catalogue differ on: "
                              f"{', '.join(p['stale'])}; run python -m grading.diagnosis --write {stem}")
        bugs = sum(p["bugs"] for p in proof.values())
        recalled = sum(p["recalled"] for p in proof.values())
        false = sum(len(p["false_diagnoses"]) for p in proof.values())
        tr.write_line(f"diagnosis: {recalled} of {bugs} catalogue bugs diagnosed as themselves "
                      f"(recall {recalled / bugs if bugs else 1.0:.3f}), {false} false diagnoses")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        folder = self.config.getoption("record_expected")
        if folder and replay.recorder() is not None:
            replay.recorder().write(Path(folder), self.recorded_tests)
        if self.config.getoption("prove") and not hasattr(self.config, "workerinput"):
            proof = self.proof_of_diagnosis()
            broken = any(p["false_diagnoses"] or p["stale"] or p.get("unrecognised") for p in proof.values())
            if (self.escaped_bugs() or broken) and session.exitstatus == 0:
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
def nb(request, tmp_path_factory):
    """The chapter's notebook, run into a module (see grading.notebook.loader)."""
    stem = chapter_stem(request.module.__file__)
    if stem is None:
        raise RuntimeError(f"{request.module.__file__}: graders live in files named test_NN_topic.py")
    variant = getattr(request, "param", Variant("graded"))
    return request.config._grading.load(variant, stem, tmp_path_factory)


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
            # The structured outcome the batch grader records as it is (no text parsed back).
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
