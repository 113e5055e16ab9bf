"""``make bench``: run every ``benchmarks/bench_*.py`` and write ``_build/bench/results.json``.

Each module exposes ``run() -> list[Record]``. Pass names (``python -m benchmarks flash``)
to run only the modules whose name contains one of them. With ``--results`` the records
are also added to ``benchmarks/results/<date>-<cpu>-<threads>-thread(s).json`` with a description of this
machine (``benchmarks.results``), the file the table of docs/benchmarks.md is generated from
(``python -m benchmarks.readme``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback

import torch

from benchmarks.records import Record
from benchmarks.results import write_results
from grading.layout import ROOT

OUT = ROOT / "_build" / "bench" / "results.json"
THREADS = int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1))


def main(argv: list[str]) -> int:
    torch.manual_seed(0)
    save = "--results" in argv
    argv = [a for a in argv if a != "--results"]
    modules = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))
    if argv:
        modules = [m for m in modules if any(a in m for a in argv)]
    records: list[Record] = []
    failed_modules = []
    for name in modules:
        torch.set_num_threads(THREADS)  # whatever the previous module loaded, each starts alike
        start = time.perf_counter()
        print(f"-- {name}", flush=True)
        try:
            new = importlib.import_module(f"benchmarks.{name}").run()
        except Exception:
            traceback.print_exc()
            failed_modules.append(name)
            continue
        for r in new:
            print(f"   {r.name:<44} {r.value:>12.4g} {r.unit:<10} goal {r.goal:<8} {_verdict(r)}", flush=True)
        records += new
        print(f"   ({time.perf_counter() - start:.1f} s)")
    previous = json.loads(OUT.read_text()) if OUT.exists() and argv else []
    merged = {r["name"]: r for r in previous}
    merged.update({r.name: r.to_json() for r in records})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(list(merged.values()), indent=2) + "\n")
    print(f"\n{'name':<44} {'value':>12} {'unit':<10} {'goal':<9} result")
    for r in records:
        print(f"{r.name:<44} {r.value:>12.4g} {r.unit:<10} {r.goal:<9} {_verdict(r)}")
    print(f"\nwrote {OUT.relative_to(ROOT)} ({len(merged)} records); torch threads: {THREADS}")
    if save:
        path = write_results([r.to_json() for r in records], THREADS,
                             command=" ".join(["python -m benchmarks", *argv, "--results"]))
        print(f"added {len(records)} records to {path.relative_to(ROOT)}")
    if failed_modules:
        print("benchmark modules that crashed: " + ", ".join(failed_modules))
    return 1 if failed_modules else 0


def _verdict(r: Record) -> str:
    return "report" if r.passed is None else ("pass" if r.passed else "MISS")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
