"""Results files: one committed JSON file per run, machine and thread count,
``benchmarks/results/<date>-<cpu>-<threads>-thread(s).json`` (older files lack the thread part).

A file holds ``{"date", "written", "machine", "source", "records"}``: ``written`` is the UTC
time of its last write (it orders two files of one day; older files lack it and count as
written first), ``machine`` says what ran the
benchmarks (CPU model and vendor; family, model number, stepping and the flags of
``CPU_FLAGS``; cores, torch's threads, BLAS, torch version; files written before those
CPU fields were recorded lack them),
``source`` how the file came to be (each command that added to it, in order), and ``records`` is the list of
``Record.to_json()``. ``python -m benchmarks --results MODULES`` writes today's file for
this CPU, adding to it when it exists (the records of a module run again replace the
old ones); ``python -m benchmarks.readme`` builds the table of docs/benchmarks.md from these files.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
from pathlib import Path

import torch

from grading.layout import BENCH_RESULTS as RESULTS_DIR


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says."""
    return _cpuinfo().get("model name") or platform.processor() or platform.machine() or "unknown CPU"


def blas_build() -> str:
    """The BLAS torch was built with, from ``torch.__config__.show()`` (e.g. "Intel(R) oneAPI
    Math Kernel Library Version 2024.2", "OpenBLAS"), and its CPU capability (AVX2, AVX512)."""
    config = torch.__config__.show()
    mkl = re.search(r"Intel\(R\) (?:oneAPI )?Math Kernel Library Version [\d.]+", config)
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    name = mkl.group(0) if mkl else (blas.group(1) if blas else "unknown BLAS")
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{name}, {capability}"


# The CPU flags that decide which kernels the BLAS and SDPA run: AVX2 and AVX-512 (with
# its BF16 and VNNI extensions) and AMX. Two CPUs of one brand name ("AMD EPYC") can
# differ in every one of them.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def machine(threads: int) -> dict[str, object]:
    """What ran the benchmarks: CPU model and vendor, its family, model number and stepping
    (which tell two CPUs of one brand name apart: family 25 model 17 is a Zen 4 EPYC), the
    flags of :data:`CPU_FLAGS` it has, logical cores, torch threads, BLAS."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    return {
        "cpu_model": cpu_model(),
        "cpu_vendor": info.get("vendor_id", "unknown vendor"),
        "cpu_family": _int_or_none(info.get("cpu family")),
        "cpu_model_number": _int_or_none(info.get("model")),
        "cpu_stepping": _int_or_none(info.get("stepping")),
        "cpu_flags": [flag for flag in CPU_FLAGS if flag in flags],
        "logical_cores": os.cpu_count(),
        "torch_threads": threads,
        "blas": blas_build(),
        "torch": torch.__version__,
        "virtual_machine": "hypervisor" in info.get("flags", "").split(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def slug(text: str) -> str:
    """'AMD EPYC 7763 64-Core Processor' -> 'amd-epyc-7763-64-core-processor'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "cpu"


def results_path(date: str, cpu_model: str, threads: int) -> Path:
    """A run on one thread and a run on all cores of the same day and CPU are two files:
    their numbers answer different questions and must not replace each other."""
    return RESULTS_DIR / f"{date}-{slug(cpu_model)}-{threads}-thread{'s' if threads != 1 else ''}.json"


def write_results(records: list[dict], threads: int, date: str | None = None,
                  command: str = "python -m benchmarks --results") -> Path:
    """Add ``records`` (``Record.to_json()`` dicts) to today's results file for this CPU
    and thread count; a record of the same name replaces the old one, and ``command`` (what
    made them) is added to the file's ``source``. Returns the path."""
    date = date or datetime.date.today().isoformat()
    here = machine(threads)
    path = results_path(date, str(here["cpu_model"]), threads)
    old = json.loads(path.read_text()) if path.exists() else None
    # A file written before a machine field existed is this machine's if the fields it has agree.
    if old is not None and any(old["machine"].get(key, here[key]) != here[key] for key in here):
        raise RuntimeError(f"{path.name} was written by another machine or thread count "
                           f"({old['machine']}); this one is {here}. Move it aside first.")
    merged = {r["name"]: r for r in (old["records"] if old else [])}
    merged.update({r["name"]: r for r in records})
    written = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    # A footnote of docs/benchmarks.md quotes the source: it names every run the file holds.
    source = f"{old['source']}, then {command}" if old and old.get("source") else command
    data = {"date": date, "written": written, "machine": here, "source": source,
            "records": sorted(merged.values(), key=lambda r: r["name"])}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def load_all() -> list[dict]:
    """Every committed results file, oldest first (by date, then time written, then name)."""
    files = sorted(RESULTS_DIR.glob("*.json"))
    runs = [dict(json.loads(p.read_text()), file=p.name) for p in files]
    # Other data beside the runs (Chapter 9's perplexity curves) carry no records.
    runs = [r for r in runs if "records" in r]
    return sorted(runs, key=lambda r: (r["date"], r.get("written", ""), r["file"]))


def newest_with(name: str) -> tuple[dict, dict[str, dict]] | None:
    """The newest committed run that measured ``name``, as ``(run, records by name)``;
    ``run`` holds ``date``, ``machine`` and ``file``. None when no run measured it, so a
    chapter that quotes a benchmark can say so instead of failing."""
    for run in reversed(load_all()):
        found = {r["name"]: r for r in run["records"]}
        if name in found:
            return run, found
    return None
