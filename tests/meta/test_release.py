"""The student edition: ``make release`` writes ``_build/release/``.

Building the book is the expensive part, so ``make test`` runs ``make release`` once and
these tests check the folder it left; run alone without it, they are skipped with that
reason. The checks that need no build (the leak detector finds what it must, the toc
of the release has no solution page) always run. These grade with the repository's
``.venv``; ``test_release_install.py`` sets the release up as its README tells a student.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from grading import release
from grading.layout import RELEASE, ROOT, SOLUTIONS, discover_chapters
from grading.notebook.catalogue import load_catalogue

STEM = "01_kv_memory"
CHAPTERS = [c.stem for c in discover_chapters()]
# A chapter graded from the release in a child pytest: its own per-test timeout holds there;
# this one waits for the whole chapter (Chapter 8 loads the model, Chapter 7 compiles).
CHAPTER_TIMEOUT_S = 1200
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


# The README's worked example of points: one row per test of the exercise, then its total.
POINTS_ROW = re.compile(r"^\| `(test_\w+)` \| (core|other) \| (\d+) \| (\d+) of (\d+) \| ([\d.]+) \|$", re.M)
POINTS_TOTAL = re.compile(r"^\| \*\*Exercise (\d+)\.(\d+)\*\* \| \| \*\*(\d+)\*\* \| \| \*\*([\d.]+)\*\* \|$", re.M)


def _collected(chapter) -> list:
    """The chapter's tests as the class run plans them (one collect-only judge's plan)."""
    from grading.proc.judges import run_child

    report = run_child({"test_files": [str(chapter.test_file)], "hidden_files": [], "collect_only": True},
                       timeout=300, memory_mb=0, threads=1).report
    assert report.plan is not None and not report.collect_errors, report.output[-3000:]
    return list(report.plan.tests)


def test_the_readme_points_example_is_what_the_grader_gives():
    """The student README's worked example of points is the scorer's: the exercise's tests,
    their kinds (core or not), points and numbers of cases are its graders' own, and the
    points each earns, the exercise's total and the one decimal a run prints are what
    grading.scoring.earned and the gradebook's rows give when that many cases pass. The
    book's page on grading tells the same example."""
    from grading.classroom.rows import graded_rows
    from grading.outcome import Status, TestOutcome
    from grading.scoring import earned, group_plan

    text = release.STUDENT_README.read_text(encoding="utf-8")
    rows, total = POINTS_ROW.findall(text), POINTS_TOTAL.search(text)
    assert rows and total, "the README's Points section has no worked example in the form this test reads"
    major, minor, possible, total_earned = total.groups()
    chapter = next(c for c in discover_chapters() if c.stem.startswith(f"{int(major):02d}_"))
    tests = _collected(chapter)
    functions = {fn.name: fn for fn in group_plan(tests)[f"{major}.{minor}"]}
    assert sorted(functions) == sorted(row[0] for row in rows), "the example lists other tests than the exercise's"
    outcomes = {}
    for name, kind, points, passed, cases, got in rows:
        fn = functions[name]
        assert (fn.core, fn.points, len(fn.nodeids)) == (kind == "core", int(points), int(cases)), name
        assert round(earned(fn.points, int(passed), int(cases), fn.core), 3) == float(got), name
        for n, nodeid in enumerate(fn.nodeids):
            outcomes[nodeid] = (TestOutcome(nodeid, "passed") if n < int(passed)
                                else TestOutcome(nodeid, "failed", status=Status.FAILED.value))
    [row] = [r for r in graded_rows("student", chapter.stem, tests, outcomes) if r.exercise == f"{major}.{minor}"]
    assert (round(row.points, 3), row.max_points) == (float(total_earned), int(possible)), \
        f"the example's total is {total_earned} of {possible}, the gradebook's {row.points:.3f} of {row.max_points}"
    assert f"`{row.points:.1f} / {possible}`" in text, "the README's rounded total is not the one a run prints"
    book = " ".join((ROOT / "book" / "exercises_and_grading.md").read_text(encoding="utf-8").split())
    assert (f"Exercise {major}.{minor} is worth {possible} points" in book
            and f"= {total_earned} points, printed as `{row.points:.1f}`" in book), \
        "book/exercises_and_grading.md's example of points is not the README's"


def test_the_readme_sends_only_torch_through_the_torch_index(tmp_path):
    """The student README as written passes the release's check of its install commands,
    and the check can fail: an ``--extra-index-url`` line, a torch command that also takes
    PyTorch's dependencies from its index, and a pin that is not requirements-grader.txt's."""
    shutil.copyfile(ROOT / "requirements-grader.txt", tmp_path / "requirements-grader.txt")
    readme = release.STUDENT_README.read_text(encoding="utf-8")
    (tmp_path / "README.md").write_text(readme)
    assert release.install_problems(tmp_path) == []
    commands = release.readme_commands(tmp_path / "README.md", "## Set up once")
    assert commands[0] == "python3 -m venv .venv" and len(commands) == 5, commands
    torch_line = next(c for c in commands if release.TORCH_INDEX in c)
    pin = f"torch=={release.pins((ROOT / 'requirements-grader.txt').read_text())['torch']}"
    for wrong in (torch_line.replace("--no-deps --index-url", "--extra-index-url"),
                  torch_line.replace("--no-deps ", ""), torch_line.replace(pin, "torch==2.0.0"),
                  torch_line.replace(pin, f"{pin} numpy")):
        (tmp_path / "README.md").write_text(readme.replace(torch_line, wrong))
        assert release.install_problems(tmp_path), wrong


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
    """The release ships the diagnosis tables (names, hints, sections,
    outputs; no bug code), so a known mistake graded there is named as in the repository."""
    from grading.notebook.catalogue import load_catalogue

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


@needs_release
def test_a_kind_of_mistake_graded_from_the_release_is_named(tmp_path):
    """The release recognises a kind of mistake (grading.diagnosis.KINDS) from its recorded
    expected values: `make release` recorded each check's alternative on the solution."""
    from tests.meta.test_diagnosis import grouped_with_repeat

    mine = tmp_path / "mine"
    mine.mkdir()
    grouped_with_repeat(mine)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(RELEASE)}
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/test_11_sparse_attention.py", "-p",
                           "no:cacheprovider", "-q", "-n", "0", "-m", "ex11_2", "--notebooks", str(mine)],
                          cwd=RELEASE, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Exercise 11.2: Your query heads are grouped as h % H_kv" in done.stdout, done.stdout[-3000:]


def _graded_from_release(stem: str, notebooks, *extra: str) -> subprocess.CompletedProcess:
    """Chapter ``stem`` graded by the release's own pytest on the notebooks in ``notebooks``."""
    return subprocess.run(_release_pytest([stem], notebooks, *extra), cwd=RELEASE, env=_release_env(),
                          capture_output=True, text=True)


def _release_env() -> dict:
    # The repository's converted model (Chapter 8), not a conversion of its own in the release.
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(RELEASE),
            "MODELLAB_CACHE": os.environ.get("MODELLAB_CACHE", str(ROOT / "_build" / "modellab"))}


def _release_pytest(stems, notebooks, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", *(f"tests/test_{stem}.py" for stem in stems), "-p", "no:cacheprovider",
            "-q", "-n", "0", "--notebooks", str(notebooks), *extra]


# The chapters graded together in one pytest: all of them, in one run. (Chapter 10 ran
# apart while its ranks' measured peaks moved with what had run before them; a rank's peak
# is now what it holds (grading.judge.measure): graded after Chapters 1 to 9 in one run,
# its ranks peaked at 298-300 MiB on 3 ranks and on 4 alike, twice.)
TOGETHER = [list(CHAPTERS)]


def _graded_chapters(notebooks, where, *extra: str) -> dict:
    """Every chapter graded by the release's own pytest on the notebooks in ``notebooks``,
    the chapters of each group of :data:`TOGETHER` in one run (one start of Python, of the
    judge and of Chapter 8's model for the group), read back from pytest's JUnit XML:
    ``{"procs": the runs, "cases": {stem: [(test, "passed" | "failed" | "skipped")]}}``."""
    import xml.etree.ElementTree as ET

    procs, cases = [], {stem: [] for stem in CHAPTERS}
    for n, stems in enumerate(TOGETHER):
        junit = where / f"junit-{n}.xml"
        procs.append(subprocess.run(_release_pytest(stems, notebooks, f"--junitxml={junit}", *extra), cwd=RELEASE,
                                    env=_release_env(), capture_output=True, text=True))
        for case in (ET.parse(junit).getroot().iter("testcase") if junit.is_file() else ()):
            stem = case.get("classname", "").rpartition("test_")[2]
            outcome = ("failed" if case.find("failure") is not None or case.find("error") is not None
                       else "skipped" if case.find("skipped") is not None else "passed")
            cases.setdefault(stem, []).append((case.get("name"), outcome))
    return {"procs": procs, "cases": cases}


def _said(run: dict) -> str:
    return "".join(proc.stdout[-3000:] + proc.stderr[-2000:] for proc in run["procs"])


@pytest.fixture(scope="module")
def solutions_graded(tmp_path_factory):
    """Every chapter's solution, graded from the release in one run."""
    solved = tmp_path_factory.mktemp("solved")
    for stem in CHAPTERS:
        shutil.copyfile(SOLUTIONS / f"{stem}.ipynb", solved / f"{stem}.ipynb")
    return _graded_chapters(solved, tmp_path_factory.mktemp("solved-run"))


@pytest.fixture(scope="module")
def stubs_graded(tmp_path_factory):
    """The exercise notebooks as handed out, every chapter graded from the release in one run."""
    return _graded_chapters(RELEASE / "exercises", tmp_path_factory.mktemp("stubs-run"), "-rN")


def _sample(stem: str) -> list:
    """A sample of the catalogue: each chapter's first bug and its last."""
    bugs = load_catalogue(stem)
    return bugs[:1] + bugs[1:][-1:]


@pytest.fixture(scope="module")
def sample_graded(tmp_path_factory):
    """The catalogue sample (:func:`_sample`): the first bugs of every chapter graded from the
    release in one run, the last bugs in another, each bug on its exercise's tests only
    (the whole catalogue through the release costs what make bench measures,
    release.diagnose_recall). ``{(stem, bug name): its chapter's cases in its run}``."""
    out = {}
    for which in (0, 1):
        folder = tmp_path_factory.mktemp(f"sample-{which}")
        bugs = {stem: _sample(stem)[min(which, len(_sample(stem)) - 1)] for stem in CHAPTERS}
        for stem, bug in bugs.items():
            nbformat.write(bug.apply(nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4)),
                           folder / f"{stem}.ipynb")
        marks = " or ".join(sorted({"ex" + bug.exercise.replace(".", "_") for bug in bugs.values()}))
        run = _graded_chapters(folder, tmp_path_factory.mktemp(f"sample-run-{which}"), "-m", marks)
        out.update({(stem, bug.name): {"run": run, "cases": run["cases"][stem]} for stem, bug in bugs.items()})
    return out


@needs_release
def test_release_ships_expected_values_not_reference_code(record_property):
    """No file of tests/references/ ships and no function of the
    references' source appears in any file of the release (the book included); each
    chapter's graders have their recorded expected values instead; the zip's size is
    reported (goal: at most 50 MiB)."""
    assert not (RELEASE / "tests" / "references").exists()
    assert release.reference_leaks(RELEASE) == []
    assert sorted(p.stem for p in (RELEASE / "tests" / "expected").glob("*.npz")) == CHAPTERS
    mib = RELEASE.with_suffix(".zip").stat().st_size / 2**20
    record_property("release_zip_mib", round(mib, 2))
    print(f"release.zip: {mib:.1f} MiB")
    assert mib <= 50


def test_reference_leak_check_finds_a_reference_function(tmp_path):
    """The check can fail: a reference's function body pasted into a file is found."""
    where, body = max(release.reference_functions().items(), key=lambda kv: len(kv[1]))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "mine.py").write_text("def f():\n    " + body.replace(" ", "\n    ", 3) + "\n")
    assert any(where in found for found in release.reference_leaks(tmp_path))


@needs_release
@pytest.mark.parametrize("stem", CHAPTERS)
@pytest.mark.timeout(CHAPTER_TIMEOUT_S)
def test_solution_earns_full_marks_from_the_release(stem, solutions_graded):
    """A solution notebook graded from _build/release, on the replayed expected values and
    with its own functions throughout (no swap), passes every test there."""
    cases = solutions_graded["cases"][stem]
    failed = [name for name, outcome in cases if outcome == "failed"]
    assert cases and not failed, f"{stem}: {failed or 'no test ran'}\n" + _said(solutions_graded)
    assert any(outcome == "passed" for _, outcome in cases), _said(solutions_graded)


@needs_release
@pytest.mark.parametrize("stem", CHAPTERS)
@pytest.mark.timeout(CHAPTER_TIMEOUT_S)
def test_stubs_fail_from_the_release(stem, stubs_graded):
    """The exercise notebooks as handed out earn no test from the release's graders."""
    cases = stubs_graded["cases"][stem]
    passed = [name for name, outcome in cases if outcome == "passed"]
    assert not passed and any(outcome == "failed" for _, outcome in cases), \
        f"{stem}: passed {passed or 'nothing, and failed nothing'}\n" + _said(stubs_graded)


@needs_release
@pytest.mark.parametrize("stem", CHAPTERS)
@pytest.mark.timeout(CHAPTER_TIMEOUT_S)
def test_catalogue_sample_is_rejected_from_the_release(stem, sample_graded):
    """A sample of the catalogue (each chapter's first bug and its last, graded on their
    exercise's tests only) is rejected by the release's graders."""
    for bug in _sample(stem):
        graded = sample_graded[stem, bug.name]
        assert any(outcome == "failed" for _, outcome in graded["cases"]), \
            f"{bug.name} passes from the release: {graded['cases']}\n" + _said(graded["run"])


# (chapter, the catalogue bug put in, the exercises graded, the line the failure opens with)
DEPENDENCY_CASES = [
    # 5.5's code calls the student's online_update (5.2).
    ("05_flash_attention", "accumulator_not_rescaled", "ex5_2 or ex5_5",
     "5.5 calls your `online_update` (5.2), which fails its own tests: fix 5.2 first."),
    # 2.5's fork tests append with the student's append (2.3), which fork's code never calls.
    ("02_paged_kv_cache", "append_replaces_pages", "ex2_3 or ex2_5",
     "2.5's test calls your `append` (2.3), which fails its own tests: fix 2.3 first."),
]


@needs_release
@pytest.mark.timeout(CHAPTER_TIMEOUT_S)
@pytest.mark.parametrize("stem,bug_name,marker,first_line", DEPENDENCY_CASES, ids=[c[1] for c in DEPENDENCY_CASES])
def test_a_failing_dependency_is_named_first(tmp_path, stem, bug_name, marker, first_line):
    """The release grades a chapter as a whole (no reference to swap in), so an
    exercise runs the student's own functions of the others, through its code or through
    its test; with a mistake in one of them, the other's failure says first which one
    fails its own tests."""
    bug = next(b for b in load_catalogue(stem) if b.name == bug_name)
    nbformat.write(bug.apply(nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4)), tmp_path / f"{stem}.ipynb")
    done = _graded_from_release(stem, tmp_path, "-m", marker)
    assert done.returncode == 1, done.stdout[-3000:]
    assert first_line in done.stdout, done.stdout[-4000:]


def test_recorded_values_keep_dtypes_numpy_lacks():
    """FP8 codes (Exercise 3.7's reference returns them) and bf16 survive a record: a value the
    recorder cannot store is skipped, and the release then has no expected value for it."""
    import torch

    from grading.judge.expected import decode, encode

    arrays = []
    for t in (torch.tensor([1.5, -448.0, 2.0**-9]).to(torch.float8_e4m3fn), torch.tensor([1.25]).bfloat16()):
        back = decode(encode(t, arrays), arrays)
        assert back.dtype == t.dtype and torch.equal(back.float(), t.float())


# A derandomized property test, run in a fresh process with other local modules loaded
# first or not: prints a digest of the examples it drew.
DRAWS = '''
import hashlib, sys
from hypothesis import given, settings, strategies as st
if "more-modules" in sys.argv:
    import grading.classroom.run, grading.judge.replay, modellab.load  # local modules, full of constants
if "same-examples" in sys.argv:
    from grading.determinism import same_property_examples
    same_property_examples()
seen = []
@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, width=32), max_size=6), st.integers(0, 10**6), st.text(max_size=4))
def draw(xs, n, s):
    seen.append((xs, n, s))
draw()
print(hashlib.sha256(repr(seen).encode()).hexdigest())
'''


def test_property_tests_draw_the_same_examples_whatever_else_is_imported():
    """The release replays what its recording drew: a property test must draw the same cases
    when the student grades one chapter or all of them in one run (Hypothesis mixes the
    constants of the local modules loaded into its draws; grading.determinism empties that
    pool, and the plugin does so before every property test)."""
    def digest(*args: str) -> str:
        done = subprocess.run([sys.executable, "-c", DRAWS, *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    assert digest() != digest("more-modules"), "the pool no longer moves the draws: this test proves nothing"
    assert digest("same-examples") == digest("more-modules", "same-examples")
