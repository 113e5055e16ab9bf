"""``make release``'s records: each chapter's graders run on its solution, references recorded.

:func:`record` runs ``pytest --record-expected`` on a chapter's graders (a pytest of its
own per chapter) and keeps ``EXPECTED/NN_topic.npz`` (:mod:`grading.judge.record_file`)
with a stamp of what it depends on; a record whose stamp is unchanged is kept. The
release ships the records; the judge makes a chapter's record where it is missing or
stale before it answers calls into other exercises (:func:`grading.judge.answers.make_record`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from grading import wire
from grading.judge.record_file import stamp_of
from grading.layout import BUILD, REFERENCES, ROOT, SOLUTIONS, TESTS, discover_chapters

EXPECTED = BUILD / "expected"  # record(): NN_topic.npz and its stamp, NN_topic.stamp


def stamp_for(stem: str) -> str:
    """What a chapter's records depend on: its graders, references, solution, the recorder,
    the codecs it stores values with, and what decides the cases a property test draws."""
    here = Path(__file__).parent
    recorder = [here / "replay.py", here / "record_file.py", here / "expected.py", here / "plugin.py",
                here.parent / "determinism.py", *sorted(Path(wire.__file__).parent.glob("*.py"))]
    return stamp_of([TESTS / f"test_{stem}.py", *sorted(REFERENCES.glob(f"ref_{stem[:2]}_*.py")),
                            SOLUTIONS / f"{stem}.ipynb", *recorder])


def record(only: list[str] | None = None, force: bool = False, jobs: int | None = None) -> list[str]:
    """Run each chapter's graders on its solution with the references recorded, into
    ``EXPECTED/NN_topic.npz``; a chapter whose stamp is unchanged is kept. The chapters
    recorded, in order. Fails if a solution fails its graders (a record of a failing run
    would be wrong). Chapters are independent, so ``jobs`` of them (the CPU count unless
    given) are recorded at once, each in a pytest of its own."""
    EXPECTED.mkdir(parents=True, exist_ok=True)
    todo = []
    for chapter in discover_chapters(only):
        stamp, path = stamp_for(chapter.stem), EXPECTED / f"{chapter.stem}.npz"
        stamp_file = path.with_suffix(".stamp")
        if not force and path.is_file() and stamp_file.is_file() and stamp_file.read_text() == stamp:
            continue
        path.unlink(missing_ok=True)
        stamp_file.unlink(missing_ok=True)
        todo.append((chapter, stamp, path, stamp_file))

    def one(chapter, stamp: str, path: Path, stamp_file: Path) -> str:
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "pytest", str(chapter.test_file.relative_to(ROOT)), "-q", "-n", "0",
                              "-p", "no:cacheprovider", "--record-expected", str(EXPECTED)], cwd=ROOT,
                             capture_output=True, text=True)
        if run.returncode != 0 or not path.is_file():
            raise RuntimeError(f"recording {chapter.stem}: its solution must pass its graders\n"
                               + run.stdout[-4000:] + run.stderr[-2000:])
        stamp_file.write_text(stamp)
        return (f"recorded {path.relative_to(ROOT)} ({path.stat().st_size / 2**10:.0f} KiB, "
                f"{time.monotonic() - start:.0f} s)")

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as pool:
        for line in pool.map(lambda job: one(*job), todo):  # in order; the first failure raises
            print(line, flush=True)
    return [chapter.stem for chapter, *_ in todo]
