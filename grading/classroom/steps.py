"""The steps of a class run before any grading: read, gather, match, choose, and resolve.

Each is a function of the run's state (:class:`grading.classroom.state.ClassRun`), run in
the order :data:`grading.classroom.run.STEPS` declares: it fills in its own fields and
raises :class:`grading.classroom.state.Stop` (exit 2) on input it cannot use. Every
mistake in the flags, the sheets and the roster stops the run here, before a judge starts
and before anything is written.
"""

from __future__ import annotations

from grading.classroom import gradebook as gb
from grading.classroom import late, lms, policy
from grading.classroom.exports import (
    canvas_columns,
    match_roster,
    read_canvas_assignments,
    read_canvas_map,
    read_roster,
    unmapped_chapters,
)
from grading.classroom.grade import open_submission
from grading.classroom.matching import list_students
from grading.classroom.state import BAD_INPUT, ClassRun, Stop, say
from grading.layout import discover_chapters


def check_inputs(run: ClassRun) -> None:
    """The submissions and the hidden tests are folders."""
    c = run.config
    if not c.submissions.is_dir():
        raise Stop(BAD_INPUT, f"{c.submissions} is not a folder")
    if c.extra_tests is not None and not c.extra_tests.is_dir():
        raise Stop(BAD_INPUT, f"--extra-tests {c.extra_tests} is not a folder")


def read_policy(run: ClassRun) -> None:
    """``run.policy``: the flags given, and with ``--resume`` the recorded values of those
    left out (:func:`grading.classroom.policy.resolve`); the sheets are read here."""
    c = run.config
    try:
        overrides = (c.overrides, gb.read_overrides(c.overrides)) if c.overrides else None
        submitted = (c.submitted, late.read_submitted(c.submitted)) if c.submitted else None
        canvas = read_canvas_map(list(c.canvas_assignments)) if c.canvas_assignments is not None else None
        flags = policy.given(c.due, c.late_penalty, overrides, submitted, canvas, c.chapters)
        run.policy = policy.resolve(flags, policy.load(c.out) if c.resume else None)
    except (OSError, ValueError) as exc:
        raise Stop(BAD_INPUT, f"error: {exc}") from None
    if bool(run.policy.policy.due) != bool(run.policy.policy.late_penalty):
        raise Stop(BAD_INPUT, "error: --due and --late-penalty go together (give both, or neither)")


def find_chapters(run: ClassRun) -> None:
    """``run.chapters``: the chapters the policy's ``--chapters`` allows (every one without it)."""
    only = run.policy.policy.chapters
    run.chapters = discover_chapters(only=only.split(",") if only else None)
    if not run.chapters:
        raise Stop(BAD_INPUT, "no chapters to grade (tests/test_NN_*.py with solutions/NN_*.ipynb)")


def read_class_roster(run: ClassRun) -> None:
    """``run.roster`` and ``run.course`` (Canvas's assignments) from ``--roster``; the policy's
    assignment map is checked against them now, before anything is unpacked."""
    path = run.config.roster
    try:
        run.roster = read_roster(path) if path else []
        run.course = read_canvas_assignments(path) if path else []
        canvas_columns(run.policy.policy.canvas_map(), run.course, [c.stem for c in discover_chapters()], [])
    except (OSError, ValueError) as exc:
        raise Stop(BAD_INPUT, f"error: {exc}") from None


def gather(run: ClassRun) -> None:
    """``run.students``: one entry per student, an LMS's download gathered into folders
    under the scratch folder (:func:`grading.classroom.lms.gather`); ``run.ignored``: the
    entries nobody reads, said now and listed in needs_review.md too (a download's file the
    parser did not read is a student who would otherwise seem not to have handed in)."""
    folder = run.config.submissions
    lms_students, taken = lms.gather(folder, run.scratch)
    students, ignored = list_students(folder, skip=taken)
    run.students = sorted(students + [(x.name, x.folder) for x in lms_students])
    run.lms = {x.name: x for x in lms_students}
    run.ignored = [f"ignored {name}: neither a folder, a .zip, nor a file named as an LMS's download names it "
                   "(Canvas, Moodle, Blackboard); it is not graded" for name in ignored]
    for line in run.ignored:
        say(line)


def match(run: ClassRun) -> None:
    """``run.subs``: each student's notebooks matched to chapters, and ``run.matched``: each
    student's roster entry. Matched against every chapter: a notebook of one that
    ``--chapters`` skips is that chapter's, never "not matched" in the feedback. An LMS's
    names order a student's attempts."""
    every = discover_chapters()
    run.subs = {student: open_submission(student, entry, every, run.scratch, n,
                                         run.lms[student].attempts if student in run.lms else None)
                for n, (student, entry) in enumerate(run.students)}
    if run.roster:
        run.matched, run.roster_problems = match_roster(run.names, run.roster, run.aliases)


def choose_chapters(run: ClassRun) -> None:
    """``run.chapters``: without ``--chapters``, those the submissions hold notebooks of (a
    week-1 class must not be graded, and imported, out of every chapter of the book);
    ``run.chapters_line`` says which and why."""
    if run.policy.policy.chapters:
        why = "chosen with --chapters"
    else:
        handed_in = {stem for sub in run.subs.values() for stem in [*sub.notebooks, *sub.ambiguous]}
        chosen = [c for c in run.chapters if c.stem in handed_in]
        why = "the chapters the submissions hold notebooks of; choose others with --chapters"
        if chosen:
            run.chapters = chosen
        else:
            why = "every chapter: no submission holds a notebook of any"
    run.chapters_line = f"chapters graded: {', '.join(run.stems)} ({why})"


def map_canvas(run: ClassRun) -> None:
    """``run.columns``: the Canvas assignment each graded chapter updates, checked before any
    grading (a mistake here would otherwise surface after the whole class); the chapters
    that go to none of the course's assignments are said now."""
    try:
        run.columns = canvas_columns(run.policy.policy.canvas_map(), run.course,
                                     [c.stem for c in discover_chapters()], run.stems)
    except ValueError as exc:
        raise Stop(BAD_INPUT, f"error: {exc}") from None
    run.unmapped = unmapped_chapters(run.stems, run.columns, run.course)
    for line in run.unmapped:
        say(f"canvas: {line}")


def resolve_overrides(run: ClassRun) -> None:
    """``run.overrides``: the policy's overrides, each naming its submission; a line that
    names no student, or several, stops the run before grading."""
    try:
        run.overrides = overrides_of(run, run.policy.policy)
    except (OSError, ValueError) as exc:
        raise Stop(BAD_INPUT, f"error: {exc}") from None


def overrides_of(run: ClassRun, p: policy.Policy) -> list[gb.Override]:
    """The overrides of policy ``p``, each naming a submission of this run. Raises ValueError
    on a line that names no student or several."""
    return gb.resolve_override_students(list(p.override_entries), run.names, run.matched, run.aliases, run.roster)


def late_work(run: ClassRun) -> None:
    """``run.lateness``: each student's lateness under the policy's due date and penalty,
    from ``--submitted`` (by any of the student's keys), else from the LMS's names; a line
    of the sheet that names no student, or several, stops the run before grading."""
    p = run.policy.policy
    try:
        times = late.resolve_submitted(p.submitted_times(), run.keys(), late.submitted_where(run.config.submitted))
    except (OSError, ValueError) as exc:
        raise Stop(BAD_INPUT, f"error: {exc}") from None
    run.lateness = lateness_of(run, p, times)


def lateness_of(run: ClassRun, p: policy.Policy, submitted: dict) -> dict:
    """{student: grading.classroom.late.Lateness} under the due date and penalty of ``p``:
    the time from ``submitted`` ({submission: time}, or by the roster id), else from the
    LMS's file names (Blackboard's attempt time, Canvas's late mark). Empty without a due date."""
    if not p.due:
        return {}
    due = late.parse_time(p.due, "--due")
    rule = late.LatePolicy.parse(p.late_penalty)
    out = {}
    for s in run.names:
        who = run.matched.get(s)
        when = submitted.get(s) or (submitted.get(who.id) if who else None)
        info = run.lms.get(s)
        if when is None and info is not None and info.attempt is not None:
            when = info.attempt.astimezone()  # Blackboard's attempt time, in this machine's zone
        out[s] = late.lateness(when, due, rule, marked_late=bool(info and info.late))
    return out


def record_policy(run: ClassRun) -> None:
    """Before anything is graded or written: say what a resumed run kept from the recorded
    policy, and what a changed one changes for whom (:func:`grading.classroom.policy.report`,
    kept in ``run.policy_lines`` for needs_review.md). A change that can move a grade stops
    the run (exit 2, nothing written) unless ``--policy-change``; otherwise the policy is
    recorded in the output folder."""
    c, resolved = run.config, run.policy
    if resolved.kept:
        say(f"resume: kept from {policy.FILE}: {'; '.join(resolved.kept)}")
    if c.resume and resolved.recorded is None and (c.out / "gradebook.csv").exists():
        say(f"resume: {c.out.name} has no {policy.FILE} (an older grader's run): the flags given now are "
             "the policy, and are recorded")
    if resolved.changes:
        old = resolved.recorded
        run.policy_lines = policy.report(resolved.changes, _effects(run, old), _effects(run, resolved.policy),
                                         gb.graded_rows(c.out), _moved_columns(run, old))
        for line in run.policy_lines:
            say(line)
    if resolved.blocking() and not c.policy_change:
        raise Stop(BAD_INPUT, f"STOPPED before grading: --resume was given a policy that differs from the one "
                   f"{policy.FILE} records (above). Rerun with --policy-change to apply it, or leave those flags "
                   "out to keep the recorded policy. Nothing was graded or written.")
    policy.save(c.out, resolved.policy)


def _effects(run: ClassRun, p: policy.Policy) -> policy.Effects:
    """What policy ``p`` does to this run's students: resolved as the run resolves its own
    sheets, or compared as written where a recorded line names no one now."""
    try:
        over = overrides_of(run, p)
        times = late.resolve_submitted(p.submitted_times(), run.keys())
    except ValueError:
        over, times = list(p.override_entries), p.submitted_times()
    return policy.Effects(lateness_of(run, p, times), over)


def _moved_columns(run: ClassRun, old: policy.Policy) -> dict[str, tuple[str, str]]:
    """{chapter: (Canvas column before, after)} for the graded chapters whose assignment changes."""
    try:
        before = canvas_columns(old.canvas_map(), run.course, [c.stem for c in discover_chapters()], run.stems)
    except ValueError:  # the recorded map no longer fits the roster: every column is said as it is now
        before = {}
    now = run.columns
    return {s: (before[s].header if s in before else s, now[s].header if s in now else s)
            for s in run.stems if before.get(s) != now.get(s)}
