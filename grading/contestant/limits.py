"""The limits a contestant's zygote (and every contained child of the judge) sets on itself.

The judge passes them as ``GRADING_LIMITS`` (:meth:`grading.proc.zygote.Limits.rlimits`),
and the child sets them before any submission's code runs: its forks inherit them, and a
limit only goes down.
"""

from __future__ import annotations


def apply_limits(spec: dict):
    """Memory (``RLIMIT_DATA``: what a process allocates, heap and private mappings, not the
    address space its libraries reserve; a CUDA build of torch maps gigabytes of libraries
    on import even on a machine without a GPU, which ``RLIMIT_AS`` would count), file size,
    CPU seconds, processes (threads count too; the kernel applies it to any user but root,
    which is why a root-run grader drops to an unprivileged uid in the sandbox), open
    files, no core dumps. Limits only go down: a limit already set lower is kept."""
    import resource

    def lower(which, value):
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, which in (("cpu_seconds", resource.RLIMIT_CPU), ("max_processes", resource.RLIMIT_NPROC),
                       ("max_open_files", resource.RLIMIT_NOFILE)):
        if int(spec.get(key, 0)) > 0:
            lower(which, int(spec[key]))
    cap = int(spec.get("file_size_cap", 0))
    if cap > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    memory_mb = int(spec.get("memory_mb", 0))
    if memory_mb > 0:
        resource.setrlimit(resource.RLIMIT_DATA, (memory_mb * 2**20, memory_mb * 2**20))
