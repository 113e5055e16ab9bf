"""The Gradescope autograder, proven without Gradescope (issue 15, item 1).

The zip is built (Chapter 1, with one hidden test), unpacked into a temporary folder that
stands in for ``/autograder`` (``source/`` holds the zip's files, ``run_autograder`` is
copied to the root, as Gradescope does), and ``run_autograder`` grades a solved, an
unsolved, a crashing and a mistaken (one catalogue bug) submission. Each ``results.json`` must validate against the
schema written from Gradescope's specification (``tests/gradescope_results.schema.json``)
and give the score the batch grader gives the same notebook.
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
from grading.catalogue import load_catalogue
from grading.layout import EXERCISES, SOLUTIONS, TESTS

STEM = "01_kv_memory"
SCHEMA = json.loads((TESTS / "gradescope_results.schema.json").read_text())
HIDDEN_TEST = '''
import pytest

@pytest.mark.ex1_1
@pytest.mark.points(2)
def test_secret_hidden_case_name(nb):
    assert nb.kv_bytes_per_token(1, 1, 1, "fp16") == 4, "HIDDEN-ASSERTION-DETAIL"
'''
pytestmark = pytest.mark.timeout(900)


def _crashing_notebook():
    nb = nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4)
    nb.cells.insert(2, nbformat.v4.new_code_cell("import os\nos._exit(3)"))
    return nb


def _mistaken_notebook():
    """The solution with one known mistake of the catalogue in Exercise 1.3."""
    bug = next(b for b in load_catalogue(STEM) if b.name == MISTAKE)
    return bug.apply(nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4), f"{STEM}.ipynb")


MISTAKE = "gb_for_gib"
SUBMISSIONS = {
    "solved": lambda: nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4),
    "unsolved": lambda: nbformat.read(EXERCISES / f"{STEM}.ipynb", as_version=4),
    "crashing": _crashing_notebook,
    "mistaken": _mistaken_notebook,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("gradescope")
    hidden = base / "hidden"
    hidden.mkdir()
    (hidden / f"test_{STEM}_hidden.py").write_text(HIDDEN_TEST)
    zip_path = gradescope.build(base / "build", chapters="1", extra_tests=hidden)
    return {"base": base, "zip": zip_path}


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


def run_autograder(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOGRADER_PYTHON": sys.executable}
    env.pop("AUTOGRADER_ROOT", None)
    return subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture(scope="module")
def graded(built):
    """The three submissions, each graded by run_autograder in a root of its own, and the
    same three graded by grading.batch as a class (the score each must equal)."""
    out = {}
    batch_subs = built["base"] / "class"
    for name, make in SUBMISSIONS.items():
        root = autograder_root(built["zip"], built["base"] / f"root-{name}")
        nbformat.write(make(), root / "submission" / f"{STEM}.ipynb")
        (batch_subs / name).mkdir(parents=True)
        nbformat.write(make(), batch_subs / name / f"{STEM}.ipynb")
        done = run_autograder(root)
        out[name] = {"root": root, "proc": done,
                     "results": json.loads((root / "results" / "results.json").read_text())}
    batch_out = built["base"] / "batch-out"
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(batch_subs), "--out", str(batch_out),
                           "--chapters", "1", "--workers", "2", "--quiet",
                           "--extra-tests", str(built["base"] / "hidden")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(batch_out / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for name in SUBMISSIONS:
        out[name]["batch_score"] = sum(float(r["points"]) for r in rows if r["student"] == name and r["exercise"])
    out["mistaken"]["batch_message_1.3"] = next(r["message"] for r in rows
                                                if r["student"] == "mistaken" and r["exercise"] == "1.3")
    return out


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
    assert "tests/test_02_paged_kv_cache.py" not in names  # CHAPTERS=1: only Chapter 1's graders


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
    assert {"1.1", "1.2", "1.3", "1.4", "1.5", "1.6"} <= set(numbers)


def test_solved_gets_full_marks_unsolved_none_crash_is_named(graded):
    solved = graded["solved"]["results"]
    assert solved["score"] == pytest.approx(sum(t["max_score"] for t in solved["tests"]))
    assert all(t["status"] == "passed" for t in solved["tests"])
    unsolved = graded["unsolved"]["results"]
    assert unsolved["score"] == 0
    assert all(t["status"] == "failed" for t in unsolved["tests"])
    assert any("not attempted" in t["output"] for t in unsolved["tests"])
    crashed = graded["crashing"]["results"]
    assert crashed["score"] == 0
    assert all("crashed" in t["output"] for t in crashed["tests"]), crashed["tests"]
    assert any("exited with code 3" in t["output"] for t in crashed["tests"])


def test_a_known_mistake_is_named_as_the_batch_grader_names_it(graded):
    """The zip carries the diagnosis tables (not the catalogue's code): Gradescope's output
    says what the batch grader's feedback says."""
    why = next(b.why for b in load_catalogue(STEM) if b.name == MISTAKE)
    test = next(t for t in graded["mistaken"]["results"]["tests"] if t["number"] == "1.3")
    assert f"This looks like a known mistake: {why}" in test["output"], test
    assert graded["mistaken"]["batch_message_1.3"].startswith(f"This looks like a known mistake: {why}")
    others = [t for t in graded["mistaken"]["results"]["tests"] if t["number"] != "1.3"]
    assert not any("known mistake" in t["output"] for t in others)


def test_hidden_tests_are_after_published_and_never_named(graded):
    for name in SUBMISSIONS:
        results = graded[name]["results"]
        hidden = [t for t in results["tests"] if t["number"].endswith("hidden")]
        assert len(hidden) == 1 and hidden[0]["visibility"] == "after_published"
        assert hidden[0]["max_score"] == 2
        text = json.dumps(results)
        assert "secret_hidden_case_name" not in text and "HIDDEN-ASSERTION-DETAIL" not in text
    assert [t for t in graded["unsolved"]["results"]["tests"] if t["number"].endswith("hidden")][0]["score"] == 0


def test_a_grader_failure_still_writes_valid_results(built, tmp_path):
    """No submission folder at all (a broken platform): a valid results.json that names it."""
    root = autograder_root(built["zip"], tmp_path / "root")
    shutil.rmtree(root / "submission")
    done = run_autograder(root)
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    assert results["score"] == 0 and "no submission folder" in results["output"], done.stdout[-2000:]


def test_a_python_that_cannot_start_still_writes_valid_results(built, tmp_path):
    root = autograder_root(built["zip"], tmp_path / "root")
    env = {**os.environ, "AUTOGRADER_PYTHON": str(tmp_path / "no-such-python")}
    subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, env=env, timeout=60)
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    assert results["score"] == 0 and "could not start" in results["output"]


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
