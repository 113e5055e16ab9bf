"""The contestant's process: ``python -m grading.contestant.main --zygote --control-fd N``.

The judge (pytest with the graders, :mod:`grading.judge`) never imports a notebook. It
starts one *zygote* per grading process, in the sandbox (:mod:`grading.proc.sandbox`),
with this command. The zygote (:mod:`grading.contestant.zygote`) sets its limits
(:mod:`grading.contestant.limits`), imports torch once and waits; for each notebook and
exercise the judge wants graded it forks a *contestant* (:mod:`grading.contestant.server`),
which loads the notebook, swaps the other exercises' names for their references, and
answers the judge's requests until its socket closes.

Nothing in these processes is trusted by the judge: a submission owns them and may rewrite
any of their code. What matters is what it cannot do: reach the judge's memory (another
process), read the hidden tests or the references of the exercise under test (never
sent, and ``tests/`` is not in the sandbox), or make the judge build an object of its
choosing (the judge decodes plain values only).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.contestant.main")
    parser.add_argument("--zygote", action="store_true")
    parser.add_argument("--control-fd", type=int, required=True)
    options = parser.parse_args(argv)
    control = socket.socket(fileno=options.control_fd)
    limits = json.loads(os.environ.pop("GRADING_LIMITS", "{}") or "{}")
    os.dup2(2, 1)  # what the notebook prints goes to the judge's capped log, never to a channel
    from grading.contestant.zygote import zygote

    return zygote(control, limits)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
