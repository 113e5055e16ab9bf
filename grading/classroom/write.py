"""The last step of a class run: every file an instructor reads, written from the final rows.

``gradebook.csv`` (its overrides and late penalties applied), each student's feedback,
``gradebook_wide.csv``, the Canvas files and ``needs_review.md``: what was said before
grading (entries nobody reads, Canvas's unmapped chapters, a policy change) is listed
there again, beside what only the grades show (chapters partly handed in, overrides that
fit no row, roster problems).
"""

from __future__ import annotations

from grading.classroom import gradebook as gb
from grading.classroom.exports import write_canvas, write_wide
from grading.classroom.rows import partial_chapters
from grading.classroom.state import GRADER_CHANGED, ClassRun, say
from grading.outcome import FOR_REVIEW
from grading.proc import sandbox


def write(run: ClassRun) -> None:
    """Write the run's files (``run.final``: the rows written); ``run.code`` becomes 3 when
    the grader's own files changed while grading (every grade is then in doubt)."""
    c, book = run.config, run.book
    book.finish()
    for student in run.names:
        gb.write_feedback(c.out, student, book.student_rows(student))
    run.final = book.final_rows()
    wide = write_wide(c.out, run.final, run.roster, run.matched)
    _, canvas_problems = write_canvas(c.out, run.final, run.roster, run.matched, run.columns)
    found = _found_in_grading(run, canvas_problems)
    for line in found:
        if line.removeprefix("canvas: ") not in run.unmapped:  # said before grading
            say(line)
    review = gb.write_review_list(c.out, run.final, sandbox.status().line,
                                  run.ignored + found + run.policy_lines, run.chapters_line)
    flagged = sum(r.status in FOR_REVIEW for r in run.final)
    if not c.quiet:
        say(f"wrote {book.path}, {wide.name}, {len(run.students)} feedback files in {c.out / 'feedback'} and "
             f"{review} ({flagged} rows need a look)")
    if run.grader.compromised:
        say(f"\nSTOPPED: the grader's files or installed packages changed during grading "
             f"({run.grader.compromised}). Restore them (git checkout / reinstall the venv), then rerun with "
             "--resume.")
        run.code = GRADER_CHANGED


def _found_in_grading(run: ClassRun, canvas_problems: list[str]) -> list[str]:
    """needs_review.md's lines about the class as a whole, beyond the rows' own: chapters
    partly handed in, overrides, the roster, and (with a roster) the Canvas files."""
    lines = [f"partly handed in: {p}" for p in partial_chapters(run.final)]
    lines += [f"overrides: {p}" for p in run.book.override_problems()]
    lines += [f"roster: {p}" for p in run.roster_problems]
    lines += [f"canvas: {p}" for p in run.unmapped + canvas_problems] if run.roster else []
    return lines
