"""The judge: one student's chapter graded in a process that never runs the notebook.

``python -m grading.judge.main --results-fd N`` is started by :mod:`grading.proc.judges` in a
temporary directory under a wall-clock timeout. It reads its spec as one JSON object on
stdin, runs pytest on the chapter's graders (and the hidden tests) with ``--notebooks
<the student's notebook folder>``, where the ``nb`` fixture is a proxy whose calls a
sandboxed contestant answers (:mod:`grading.judge`), and writes what happened, one JSON
object per line, to file descriptor N (a pipe the parent made; no path leads to it):

    plan           every test: exercise, points, hidden or not   (grading.wire.records.Plan)
    collect_error  a test file that did not import               (CollectError)
    setup          seconds spent loading a model                 (SetupRecord)
    test           one per test, as soon as it has run           (grading.outcome.TestOutcome)
    load           what the loader noticed in the notebook       (LoadSummary)
    diagnosis      known mistakes behind failures                (Diagnoses)
    tamper         what voids the chapter                        (Tamper)
    exit           the last line: how it ended                   (ExitRecord)

each as ``{"kind": ..., **record.to_json()}`` (grading.wire.records.line); its parent reads
them back strictly into one grading.wire.report.JudgeReport.

A judge that dies leaves the lines it wrote and no exit record; its parent
(grading.proc.judges) writes that record for it, from how the process ended.
``collect_only`` writes only the plan (no notebook is loaded). Hidden tests
arrive as copies in the work folder, which no contestant's sandbox shows, and are
deleted as soon as pytest has imported them; they exist in this process only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from grading import wire
from grading.layout import ROOT, exercise_of


def _skipped_here(item) -> bool:
    """Would this test be skipped in this environment (a GPU test without a GPU)?"""
    if item.get_closest_marker("gpu") is not None:
        try:
            import torch

            return not torch.cuda.is_available()
        except Exception:
            return True
    for mark in item.iter_markers("skipif"):
        if mark.args and isinstance(mark.args[0], bool) and mark.args[0]:
            return True
    return bool(list(item.iter_markers("skip")))


class Collector:
    """A pytest plugin that writes the plan and each outcome as JSON lines."""

    def __init__(self, out, hidden_dirs: list[Path], chapter: str = ""):
        self.out = out
        self.chapter = chapter
        self.collect_summaries: dict[str, str] = {}  # collector nodeid -> its exception, summarised
        self.hidden_dirs = [str(p.resolve()) for p in hidden_dirs if str(p)]
        # Hidden tests run from a temporary copy; their ids must not name it, so that the
        # plan (one child) and the outcomes (another) agree: "hidden/test_01_x.py::test_y".
        self.hidden_names = {f.name for d in hidden_dirs if str(d) and Path(d).is_dir() for f in Path(d).iterdir()}
        self.outcomes: dict[str, dict] = {}

    def stable(self, nodeid: str) -> str:
        file, sep, rest = nodeid.partition("::")
        if Path(file).name in self.hidden_names and not file.startswith("tests/"):
            return f"hidden/{Path(file).name}{sep}{rest}"
        return nodeid

    def emit(self, record):
        """One record of grading.wire.records (or a TestOutcome), as one line."""
        self.out.write(json.dumps(wire.records.line(record), sort_keys=True) + "\n")
        self.out.flush()

    def _hidden(self, path) -> bool:
        return any(str(Path(str(path)).resolve()).startswith(d + os.sep) for d in self.hidden_dirs)

    def _test(self, item) -> wire.records.PlannedTest:
        function = item.originalname if hasattr(item, "originalname") else item.name.split("[")[0]
        points = item.get_closest_marker("points")
        hidden = self._hidden(item.path)
        path = f"hidden/{Path(str(item.path)).name}" if hidden else str(Path(str(item.path)).resolve())
        return wire.records.PlannedTest(self.stable(item.nodeid), path, function, exercise_of(item),
                                        points.args[0] if points else 1, item.get_closest_marker("core") is not None,
                                        hidden, _skipped_here(item))

    def pytest_collection_finish(self, session):
        self.emit(wire.records.Plan(tuple(self._test(i) for i in session.items),
                                    tuple(str(r.longrepr)[:2000] for r in getattr(session, "_collect_errors", []))))
        if session.config.getoption("collectonly"):
            return
        for folder in self.hidden_dirs:
            shutil.rmtree(folder, ignore_errors=True)  # imported already; no copy is left on disk

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        """Before the first test: the seconds spent loading the model (grading.judge.preload),
        which the parent adds to this chapter's time limit."""
        from grading.judge.preload import seconds_spent

        seconds = seconds_spent(session.config)
        if seconds > 0:
            self.emit(wire.SetupRecord("model", round(seconds, 3)))

    def pytest_collectreport(self, report):
        if report.failed:
            self.emit(wire.records.CollectError(str(report.longrepr)[-4000:],
                                                self.collect_summaries.pop(report.nodeid, "")[:4000]))

    def pytest_exception_interact(self, node, call, report):
        """A collection error's exception, summarised while it is at hand (the collect
        report that follows carries only pytest's text)."""
        from grading.outcome import summary

        if isinstance(report, pytest.CollectReport) and call.excinfo is not None:
            self.collect_summaries[report.nodeid] = summary(call.excinfo.value)

    def pytest_runtest_makereport(self, item, call):
        if call.excinfo is None:
            return
        entry = self.outcomes.setdefault(self.stable(item.nodeid), {"outcome": "passed", "message": "", "exc_type": ""})
        if call.when == "call":
            entry["exc_type"] = call.excinfo.typename
        if "fallback" not in entry:
            # From the exception itself, for a failure the grading plugin did not summarise
            # (a fixture's or a hidden test's): the parent never reads pytest's text back.
            from grading.judge.messages import raised_where
            from grading.outcome import classify, summary

            exc = call.excinfo.value
            entry["fallback"] = {"summary": summary(exc, raised_where(exc)), "status": classify(exc).value}

    def pytest_runtest_logreport(self, report):
        nodeid = self.stable(report.nodeid)
        entry = self.outcomes.setdefault(nodeid, {"outcome": "passed", "message": "", "exc_type": ""})
        if report.skipped and report.when in ("setup", "call"):
            entry["outcome"] = "skipped"
        elif report.failed and entry["outcome"] != "failed":
            entry["outcome"] = "failed"
            entry["message"] = str(report.longrepr)[:4000]
            entry["when"] = report.when
            # Decided by the plugin from the exception; a fixture or setup error is an error.
            properties = dict(report.user_properties)
            fallback = entry.get("fallback", {})
            entry["status"] = properties.get("status", fallback.get("status", "error"))
            if "summary" in properties or "summary" in fallback:
                entry["summary"] = properties.get("summary", fallback.get("summary"))
        if report.when == "teardown":
            from grading.outcome import TestOutcome

            outcome = TestOutcome(nodeid, entry["outcome"], status=entry.get("status", ""),
                                  summary=entry.get("summary") or "", message=entry.get("message", ""),
                                  exc_type=entry.get("exc_type", ""), when=entry.get("when", ""))
            self.emit(outcome)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session):
        # Before pytest's own unconfigure hooks, which legitimately undo patches of theirs.
        if not session.config.getoption("collectonly"):
            self.finish(session.config)

    def finish(self, config):
        state = getattr(config, "_grading", None)
        problems, borrowed, output_chars = [], [], 0
        if state is not None:
            from grading.judge.loading import Unloadable
            from grading.judge.proxy import RemoteNotebook
            from grading.notebook import review as tamper

            # The chapter's own load (a hidden-test copy of the notebook would repeat its notes).
            main = [v for (_, stem), v in state.cache.items() if stem == self.chapter] or list(state.cache.values())[:1]
            for loaded in main:
                if isinstance(loaded, RemoteNotebook):
                    problems += [wire.CellProblem.of(p.cell, p.kind, p.message, p.memory) for p in loaded.problems]
                    borrowed += loaded.report.borrowed + tamper.library_answers(loaded.text)
                    output_chars = max(output_chars, loaded.report.output_chars)
                elif isinstance(loaded, Unloadable):
                    problems.append(wire.CellProblem.of(-1, "unreadable", loaded.message))
            state.close()
        self.emit(wire.records.LoadSummary(tuple(problems), output_chars))
        if state is not None:
            self.emit(wire.records.Diagnoses(tuple(wire.records.Found(d.exercise, d.bug, d.hint, d.section, d.message())
                                                   for d in state.diagnoses())))
        # The judge runs no submission code, so nothing in this process can be tampered with;
        # what is left to report is what the load saw (a graded function that calls a
        # library's implementation of itself, grading.notebook.review.borrowed_names and library_answers).
        self.emit(wire.records.Tamper(tuple(v[:4000] for v in borrowed)))




def peak_rss_kb() -> dict:
    """The peak resident memory of this process and of the largest process it waited for
    (Chapter 7's kernel checks run in subprocesses), in KiB (Linux's ``ru_maxrss`` unit):
    what a container the size of Gradescope's must hold for this chapter."""
    import resource

    return {"max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "children_max_rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
            "data_kb": _data_kb()}


def _data_kb() -> int | None:
    """This process's data segment now (``VmData``, what ``RLIMIT_DATA`` counts), in KiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def limit_memory(spec: dict) -> None:
    """This judge's own memory limit (``judge_memory_mb``, grading.proc.judges.judge_memory_mb),
    as ``RLIMIT_DATA`` like its contestants' (grading.contestant.limits.apply_limits): what it
    allocates, not the address space torch's libraries reserve. The soft limit only: the
    contestants' zygote is a child of this process and sets its own limit, which may be
    above this one (setrlimit may raise a soft limit up to the hard one, never the hard
    one). The judge runs no notebook code, so nothing here raises it again. An answer that
    does not fit is a MemoryError in the decoder, which grading.judge turns into the
    test's "memory limit" status; one elsewhere ends this process, and the front door
    writes the chapter's rows from what it reported (grading.classroom.grade.Grader.rows_from)."""
    import resource

    mb = int(spec.get("judge_memory_mb", 0) or 0)
    if mb <= 0:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    value = mb * 2**20
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    if soft == resource.RLIM_INFINITY or value < soft:
        resource.setrlimit(resource.RLIMIT_DATA, (value, hard))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.judge.main")
    parser.add_argument("--results-fd", type=int, required=True, help="where the outcome lines go")
    options = parser.parse_args(argv)
    out = os.fdopen(options.results_fd, "w", encoding="utf-8")  # before any student code runs
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    limit_memory(spec)  # before torch, the graders and the first contestant's answer
    collect_only = spec.get("collect_only", False)
    os.chdir(spec["work_dir"])
    import torch

    from grading.proc import zygote

    torch.manual_seed(0)
    torch.set_num_threads(int(spec.get("threads", 1)))
    # This process is the judge: it runs no submission code. Every contestant it starts
    # runs in the sandbox with these limits.
    zygote.configure(zygote.Limits(memory_mb=int(spec.get("memory_mb", 0)), threads=int(spec.get("threads", 1)),
                                   cuda_devices=spec.get("cuda_devices", ""), uid=spec.get("sandbox_uid"),
                                   hide=list(spec.get("hide", [])), cpu_seconds=int(spec.get("cpu_seconds", 0)),
                                   file_size_cap=int(spec.get("file_size_cap", 0))))
    hidden = [Path(spec["hidden_dir"])] if spec.get("hidden_dir") else []
    collector = Collector(out, hidden, spec.get("chapter", ""))
    args = [*spec["test_files"], "--notebooks", spec["notebooks"], "--rootdir", str(ROOT),
            "-c", str(ROOT / "pytest.ini"), "-q", "--no-header", "-o", "timeout=0",
            "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:nbval", "-p", "no:anyio",
            # The grading plugin by module name, not by the entry point that `pip install -e .`
            # registers: the Gradescope image has no such install. Blocking the entry
            # point's name keeps a development checkout from registering the module twice.
            "-p", "no:grading", "-p", "grading.judge.plugin",
            "--tb=no", "-rN"]  # the parent formats the messages; pytest need not
    if collect_only:
        args.append("--collect-only")
    try:
        code = pytest.main(args, plugins=[collector])
    except (MemoryError, RuntimeError) as exc:  # the judge's own memory, outside any test
        from grading.outcome import out_of_memory

        if not out_of_memory(exc):
            raise
        collector.emit(wire.ExitRecord("memory", **peak_rss_kb()))
        return 3
    collector.emit(wire.ExitRecord("finished", pytest_exit=int(code), **peak_rss_kb()))
    out.close()
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
