"""The environment every child process starts with: one place, for judges and contestants alike.

A child gets a fresh folder of its own (``work``): its home, its temporary files and every
cache a library writes (matplotlib's, Triton's, inductor's), so nothing it writes lands
beside another's. Math libraries get one thread each unless told otherwise, Python's hash
seed is fixed, and nothing may be installed.
"""

from __future__ import annotations

import os
from pathlib import Path

# What a child inherits from the grader's own environment; everything else is set here.
INHERITED = ("PATH", "LANG", "LC_ALL", "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH", "GRADING_DIAGNOSIS")


def work_folders(work: Path) -> dict[str, str]:
    """Home, temporary files and the libraries' caches, all inside ``work``."""
    return {"HOME": str(work), "TMPDIR": str(work), "MPLCONFIGDIR": str(work / ".matplotlib"),
            "TRITON_CACHE_DIR": str(work / ".triton"), "TORCHINDUCTOR_CACHE_DIR": str(work / ".inductor"),
            "XDG_CACHE_HOME": str(work / ".cache")}


def child_env(work: Path, threads: int, cuda_devices: str) -> dict[str, str]:
    """The whole environment of a judge or a zygote working in ``work``."""
    env = {k: os.environ[k] for k in INHERITED if k in os.environ}
    t = str(threads)
    env.update(work_folders(work))
    env.update({
        "MPLBACKEND": "Agg",
        "CUDA_VISIBLE_DEVICES": cuda_devices, "OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t,
        "OPENBLAS_NUM_THREADS": t, "NUMEXPR_NUM_THREADS": t, "VECLIB_MAXIMUM_THREADS": t,
        "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1", "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "TORCHINDUCTOR_COMPILE_THREADS": "1",  # inductor's worker pool would count against the process limit
    })
    return env
