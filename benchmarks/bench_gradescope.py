"""``make bench`` records of the memory each chapter needs in Gradescope's container.

- ``gradescope.peak_pss_mib.<NN_topic>``, one record per chapter: the peak proportional
  set size (PSS: a page shared by n processes counts 1/n, so a fork's pages are not counted
  twice) of the whole process tree while ``run_autograder`` grades that chapter's solved
  notebook: the front door, the judge, the sandbox, the zygote, the contestants and their
  children. The tree is sampled from outside (:func:`benchmarks.bench_grading.tree_peaks`), each process's
  ``Pss`` read from ``/proc/<pid>/smaps_rollup``. The run is Gradescope's, as
  ``tests/meta/test_gradescope.py`` stands it in: an ``autograder.zip`` of every chapter,
  unpacked into a temporary ``/autograder``, the model converted beforehand as ``setup.sh``
  does, and ``run_autograder`` with the Python ``setup.sh`` makes (the zip's pins, not this
  checkout: ``tests/meta/isolated_python.py``). Goal: within Gradescope's default container
  of 768 MB (732 MiB).

``make gradescope`` tells the instructor the container each chapter of the zip needs from
the committed measurement, ``benchmarks/results/gradescope_peak_pss.json``
(:data:`RESULTS`, with the date and the machine), as does the table of the instructors'
manual (``docs/instructors.md``, between two markers). Refresh both with

    .venv/bin/python -m benchmarks.bench_gradescope --write [--results]
    .venv/bin/python -m benchmarks.bench_gradescope --docs

(``--results`` also adds the records to a committed run, for docs/benchmarks.md's table.)
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_grading import PEAK_SAMPLE_S as SAMPLE_S
from benchmarks.bench_grading import tree_peaks
from benchmarks.records import Record
from grading.layout import BENCH_RESULTS, BUILD, ROOT

RESULTS = BENCH_RESULTS / "gradescope_peak_pss.json"  # what make gradescope reads
BUILD_RESULTS = BUILD / "bench" / "gradescope_peak_pss.json"  # what make bench writes
GOAL_MIB = 732  # Gradescope's default container: 768 MB
TIMEOUT_S = 1200.0


def _link_model(source: Path) -> None:
    """What ``setup.sh``'s ``python -m grading.gradescope prepare`` leaves in the image:
    the converted model in the zip's ``_build/modellab``, hard-linked from this checkout's
    (the same bytes; converting again would only cost time)."""
    from modellab.load import cache_dir, prepare_cache

    prepare_cache()
    target = source / "_build" / "modellab" / cache_dir().name
    target.mkdir(parents=True)
    for path in cache_dir().iterdir():
        os.link(path, target / path.name)


def measure(base: Path) -> dict:
    """Every chapter's solved notebook graded by run_autograder, as Gradescope runs it."""
    from benchmarks.results import machine
    from grading import gradescope
    from grading.layout import discover_chapters
    from tests.meta.gradescope_harness import autograder_root
    from tests.meta.isolated_python import clean_env, make_isolated_python

    # A chapter's time limit well above the default: a busy machine must not end a chapter
    # before its peak (what is measured is memory, not time).
    zip_path = gradescope.build(base / "build", timeout=TIMEOUT_S)
    root = autograder_root(zip_path, base / "root")
    source = root / "source"
    stems = [c.stem for c in discover_chapters()]
    for stem in stems:
        shutil.copyfile(ROOT / "solutions" / f"{stem}.ipynb", root / "submission" / f"{stem}.ipynb")
    _link_model(source)
    pins = (source / gradescope.GRADER_PINS).read_text() + (source / gradescope.MODEL_PINS).read_text()
    python = make_isolated_python(base / "venv", pins)
    env = clean_env(AUTOGRADER_PYTHON=str(python))
    peaks, log, code = tree_peaks(["bash", str(root / "run_autograder")], root, env)
    results = json.loads((root / "results" / "results.json").read_text())
    if code != 0 or "failure" in results.get("extra_data", {}) or set(peaks) != set(stems):
        raise RuntimeError(f"run_autograder failed: {results.get('output', '')[:300]} {log[-500:]}")
    chapters = {}
    for stem in stems:
        tests = [t for t in results["tests"] if t["name"].endswith(f"({stem})")]
        chapters[stem] = {"peak_pss_mib": round(peaks[stem], 1), "score": sum(t["score"] for t in tests),
                          "max_score": sum(t["max_score"] for t in tests)}
    return {"date": datetime.date.today().isoformat(), "machine": machine(1), "sample_s": SAMPLE_S,
            "load_average": round(os.getloadavg()[0], 1), "chapters": chapters}


def records(measured: dict) -> list[Record]:
    where = f"{measured['machine']['cpu_model']}, {measured['machine']['logical_cores']} cores, {measured['date']}"
    return [Record(f"gradescope.peak_pss_mib.{stem}", c["peak_pss_mib"], "MiB", f"<= {GOAL_MIB}",
                   note=f"run_autograder on solutions/{stem}.ipynb: score {c['score']:g} of {c['max_score']:g}; "
                        f"process tree's PSS every {measured['sample_s']:g} s; {where}")
            for stem, c in measured["chapters"].items()]


DOCS = ROOT / "docs" / "instructors.md"
START = ("<!-- gradescope-table:start (generated by `python -m benchmarks.bench_gradescope --docs` from "
         "benchmarks/results/gradescope_peak_pss.json; do not edit) -->")
END = "<!-- gradescope-table:end -->"


def render_table(measured: dict) -> str:
    """The instructors' manual's table: each chapter's measured peak and the container it
    needs (:func:`grading.gradescope.needed_mib`), with the run it comes from."""
    from grading.gradescope import DEFAULT_CONTAINER_MIB, needed_mib

    m = measured["machine"]
    lines = [START, "", "| chapter | peak memory (PSS, MiB) | container to choose | score of the solution |",
             "| --- | ---: | --- | ---: |"]
    for stem, c in measured["chapters"].items():
        need = needed_mib(c["peak_pss_mib"])
        size = "the default, 768 MB" if need == DEFAULT_CONTAINER_MIB else f"at least {need:,} MiB"
        lines.append(f"| `{stem}` | {c['peak_pss_mib']:,.0f} | {size} | {c['score']:g} / {c['max_score']:g} |")
    lines += ["", f"Measured on {measured['date']} on {m['cpu_model']} ({m['logical_cores']} logical cores, "
                  f"torch {m['torch']}; load average {measured['load_average']:g}), the tree sampled every "
                  f"{measured['sample_s']:g} s.", "", END]
    return "\n".join(lines)


def write_docs() -> None:
    """Rewrite the table of docs/instructors.md from the committed measurement."""
    from tools.markers import between_markers

    table = render_table(json.loads(RESULTS.read_text()))
    DOCS.write_text(between_markers(DOCS.read_text(), START, END, table, "docs/instructors.md"))


def run() -> list[Record]:
    with tempfile.TemporaryDirectory(prefix="bench-gradescope-") as tmp:
        measured = measure(Path(tmp))
    BUILD_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    BUILD_RESULTS.write_text(json.dumps(measured, indent=1) + "\n")
    return records(measured)


if __name__ == "__main__":
    if "--docs" in sys.argv:  # the manual's table, from the committed file
        write_docs()
        sys.exit(0)
    # --write: stored in benchmarks/results/, the file make gradescope reads.
    target = RESULTS if "--write" in sys.argv else BUILD_RESULTS
    with tempfile.TemporaryDirectory(prefix="bench-gradescope-") as tmp:
        measured = measure(Path(tmp))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(measured, indent=1) + "\n")
    for r in records(measured):
        print(f"{r.name}: {r.value:.0f} MiB ({'pass' if r.passed else 'MISS'})")
    print(f"wrote {target.relative_to(ROOT)}")
    if "--results" in sys.argv:  # the same records in a committed run, for docs/benchmarks.md
        from benchmarks.results import write_results

        command = " ".join(["python -m benchmarks.bench_gradescope", *sys.argv[1:]])
        path = write_results([r.to_json() for r in records(measured)], 1, command=command)
        print(f"added to {path.relative_to(ROOT)}")
