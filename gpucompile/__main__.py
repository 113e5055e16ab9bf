"""``python -m gpucompile SPEC RESULT``: the child process of :func:`gpucompile.compile_many`,
and of the judge's compile check (grading.judge.triton_compile), which starts it in the
contestants' sandbox with their limits (``GRADING_LIMITS``)."""

import json
import os
import sys

if os.environ.get("GRADING_LIMITS"):
    from grading.contestant.limits import apply_limits

    apply_limits(json.loads(os.environ["GRADING_LIMITS"]))

from gpucompile import child_main  # noqa: E402 - after the limits: Triton's import allocates

sys.exit(child_main(sys.argv[1], sys.argv[2]))
