"""``python -m grading.diagnosis --write [chapters]``: store what each catalogue bug outputs.

Runs ``pytest --prove --diagnosis-write`` on the chapters' graders, which rewrites
``tests/diagnosis/<stem>.json`` (every chapter's, unless chapters are named). What is
stored, and how a student's failures are matched against it, is the judge's
(:mod:`grading.judge.diagnosis`); every later ``pytest --prove`` checks the stored table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from grading.layout import ROOT, discover_chapters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.diagnosis",
                                     description="Rebuild tests/diagnosis/<stem>.json from the catalogue.")
    parser.add_argument("--write", action="store_true", help="run the catalogue and store the table")
    parser.add_argument("chapters", nargs="*", help="stems or numbers (default: every chapter)")
    options = parser.parse_args(argv)
    if not options.write:
        parser.error("say --write (the check runs in `pytest --prove`)")
    files = [str(c.test_file) for c in discover_chapters(options.chapters or None) if c.test_file.exists()]
    return subprocess.call([sys.executable, "-m", "pytest", *files, "--prove", "--diagnosis-write", "-q",
                            "-p", "no:cacheprovider", "-n", "2"], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
