"""Checks on the repository itself: stubs in sync, notebooks clean, pins agree."""

from __future__ import annotations

import json
import re

import yaml

from grading.layout import ROOT
from grading.stubs import expected_stubs

PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;#]+)")


def pins(lines) -> dict[str, str]:
    out = {}
    for line in lines:
        m = PIN.match(line.strip())
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def test_exercises_match_the_generator():
    expected = expected_stubs(ROOT / "solutions")
    actual = {p.name: p.read_text() for p in (ROOT / "exercises").glob("*.ipynb")}
    assert sorted(actual) == sorted(expected), \
        "exercises/ and solutions/ hold different notebooks (run `make exercises`)"
    stale = [name for name in expected if actual[name] != expected[name]]
    assert not stale, f"exercises/ is not what `make exercises` generates for: {stale}"


def test_exercise_notebooks_have_no_outputs():
    for path in sorted((ROOT / "exercises").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        with_outputs = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and c.get("outputs")]
        assert not with_outputs, f"{path.name}: cells {with_outputs} have outputs"


def test_solution_notebooks_have_outputs():
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        assert any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), \
            f"{path.name} has no outputs for nbval"


def test_every_chapter_has_all_its_parts():
    stems = sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))
    assert stems, "no solution notebooks"
    for stem in stems:
        for part in (f"chapters/{stem}.md", f"tests/test_{stem}.py", f"tests/references/ref_{stem}.py",
                     f"tests/catalogue/{stem}.py"):
            assert (ROOT / part).exists(), f"chapter {stem} lacks {part}"


def test_every_exercise_has_a_core_test():
    """The partial-credit policy (docs/instructors.md, "Points and partial credit"): each exercise's
    central cases are a test marked ``core`` (all or nothing); the rest share by case."""
    import ast

    for path in sorted((ROOT / "tests").glob("test_[0-9][0-9]_*.py")):
        marks: dict[str, set[bool]] = {}
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
                continue
            names = [ast.unparse(d) for d in node.decorator_list]
            for exercise in (n.removeprefix("pytest.mark.") for n in names if re.match(r"pytest\.mark\.ex\d+_\d+$", n)):
                marks.setdefault(exercise, set()).add("pytest.mark.core" in names)
        assert marks, f"{path.name}: no graded tests"
        lacking = sorted(e for e, core in marks.items() if True not in core)
        assert not lacking, f"{path.name}: {', '.join(lacking)} have no test marked @pytest.mark.core"


def test_environment_yml_pins_match_requirements():
    required = pins((ROOT / "requirements.txt").read_text().splitlines())
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = pins(pip_section)
    assert "python=3.11" in env["dependencies"], "environment.yml must pin python=3.11"
    only_req = sorted(set(required) - set(listed))
    only_env = sorted(set(listed) - set(required))
    differ = sorted(k for k in set(required) & set(listed) if required[k] != listed[k])
    assert not (only_req or only_env or differ), (
        f"requirements.txt and environment.yml disagree: only in requirements {only_req}, "
        f"only in environment.yml {only_env}, different versions {differ}"
    )


def test_key_pins():
    required = pins((ROOT / "requirements.txt").read_text().splitlines())
    assert required["torch"] == "2.13.0" and required["triton"] == "3.7.1"
    assert required["jupyter-book"].startswith("1."), "Jupyter Book 2 does not read _config.yml/_toc.yml"


def test_chapter_headings_carry_no_hand_written_numbers():
    """_toc.yml numbers the chapters and their sections; "## 2.1 ..." would show as "2.1. 2.1 ..."."""
    numbered = re.compile(r"^#{1,3} \d+(\.\d+)*\.? ")
    for path in sorted((ROOT / "chapters").glob("*.md")):
        in_code = False
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("```"):
                in_code = not in_code
            assert in_code or not numbered.match(line), f"{path.name}:{lineno}: {line!r}"


# The stored-output policy (CONTRIBUTING.md, "Stored outputs"): nbval compares every
# solution's outputs on every reader's CPU, so none may hold what varies by machine.
IGNORE_OUTPUT = "NBVAL_IGNORE_OUTPUT"
# A float printed in scientific notation below 1e-12 is rounding noise: its digits depend
# on which BLAS kernels the CPU gets (an Intel and an AMD machine print different ones).
ROUNDING_NOISE = re.compile(r"(?<![\w.])\d(?:\.\d+)?e-(?:1[3-9]|[2-9]\d|\d{3})\b")
# Absolute paths name the machine the notebook ran on.
ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:home|root|tmp|work|Users|usr|opt|var)/")


def compared_outputs():
    """``(notebook, cell index, output)`` for every output that nbval compares."""
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] != "code" or IGNORE_OUTPUT in "".join(cell["source"]):
                continue
            for output in cell.get("outputs", []):
                yield path.name, i, output


def output_text(output) -> str:
    return "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))


def test_stored_outputs_print_no_rounding_noise():
    bad = [f"{name} cell {i}: {m.group(0)}" for name, i, out in compared_outputs()
           if (m := ROUNDING_NOISE.search(output_text(out)))]
    assert not bad, ("solution cells print rounding noise, which differs from CPU to CPU; print the claim "
                     f"(`error < 1e-12`) instead: {bad}")


def test_stored_outputs_hold_no_stderr_and_no_paths():
    """stderr carries warnings and progress bars that depend on the machine's state (a cache
    that exists or not, a library version's deprecation notice)."""
    stderr = sorted({f"{name} cell {i}" for name, i, out in compared_outputs() if out.get("name") == "stderr"})
    assert not stderr, f"solution cells store stderr output (warnings, progress bars): {stderr}"
    paths = [f"{name} cell {i}: {m.group(0)}" for name, i, out in compared_outputs()
             if (m := ABSOLUTE_PATH.search(output_text(out)))]
    assert not paths, f"solution cells print absolute paths: {paths}"


def test_stored_outputs_hold_no_errors():
    errors = [f"{name} cell {i}" for name, i, out in compared_outputs() if out.get("output_type") == "error"]
    assert not errors, f"solution cells store an error: {errors}"


def test_bibliography_parses_with_unique_keys():
    """A merge can drop a closing brace or repeat an entry; the book build then fails late."""
    from pybtex.database import parse_file

    keys = re.findall(r"^@\w+\{([^,\s]+),", (ROOT / "references.bib").read_text(), re.M)
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    assert not repeated, f"references.bib repeats {repeated}"
    assert len(parse_file(str(ROOT / "references.bib")).entries) == len(keys)


def test_chapters_do_not_link_to_solution_notebooks():
    """The student edition builds the chapters without solutions/; a link there breaks its build."""
    linked = [f"{p.name}:{n}" for p in sorted((ROOT / "chapters").glob("*.md"))
              for n, line in enumerate(p.read_text().splitlines(), 1) if "](../solutions/" in line]
    assert not linked, f"chapter lines linking into solutions/: {linked}"


def test_grader_pins_are_the_authors_at_the_same_versions():
    """requirements-grader.txt (the student edition's and Gradescope's) is a part of
    requirements.txt, every version the same: one set of versions, tested by make test."""
    from grading.pins import AUTHOR_REQUIREMENTS, GRADER_REQUIREMENTS
    from grading.pins import pins as grader_pins

    author, grader = grader_pins(AUTHOR_REQUIREMENTS.read_text()), grader_pins(GRADER_REQUIREMENTS.read_text())
    assert grader and not sorted(set(grader) - set(author)), \
        f"only in requirements-grader.txt: {set(grader) - set(author)}"
    differ = {name: (version, author[name]) for name, version in grader.items() if author[name] != version}
    assert not differ, f"requirements-grader.txt vs requirements.txt: {differ}"


def test_grader_pins_hold_their_own_dependencies_section_by_section():
    """Each dependency of a pinned distribution (as installed in this .venv, for this Python)
    is pinned too: the common lines' in the common lines, a section's in the common lines
    or that section, so that a Gradescope zip without Chapter 8 still installs whole."""
    from importlib import metadata

    from packaging.requirements import Requirement

    from grading.gradescope import CHAPTER_PACKAGES
    from grading.pins import GRADER_REQUIREMENTS, canonical, sections

    parts = {key: {canonical(line.split("==")[0]) for line in lines}
             for key, lines in sections(GRADER_REQUIREMENTS.read_text()).items()}
    assert set(parts) - {None} <= set(CHAPTER_PACKAGES), f"sections for packages that are no chapter's: {parts}"
    missing = []
    for key, names in parts.items():
        allowed = parts[None] | names
        for name in sorted(names):
            for line in metadata.distribution(name).requires or []:
                req = Requirement(line)
                if (not req.marker or req.marker.evaluate({"extra": ""})) and canonical(req.name) not in allowed:
                    missing.append(f"{name} (section {key or 'common'}) needs {req.name}")
    assert not missing, missing


def test_versions_the_student_readme_names_are_the_pinned_ones():
    from grading.pins import AUTHOR_REQUIREMENTS
    from grading.pins import pins as grader_pins

    author = grader_pins(AUTHOR_REQUIREMENTS.read_text())
    named = {m.group(1): m.group(2) for m in re.finditer(r"\b([A-Za-z][\w.\-]*)==([\w.]+)",
                                                          (ROOT / "tools" / "release" / "README.md").read_text())}
    differ = {name: (version, author.get(name.lower())) for name, version in named.items()
              if author.get(name.lower()) != version}
    assert not differ, f"tools/release/README.md vs requirements.txt: {differ}"


CLOCKS = re.compile(r"\b(?:perf_counter|monotonic|process_time|timeit)\b|\btime\.time\(")


def test_every_page_that_times_its_code_executes_alone():
    """tools.execute_pages runs the book's pages side by side, except those whose front matter
    says ``timed: true``, which run alone: a page that reads a clock prints what it measured,
    and a page beside it on the machine would move those numbers."""
    from tools.execute_pages import is_timed, notebook_pages

    pages = notebook_pages()
    assert len(pages) >= 15, pages
    code = {page: "\n".join(re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", page.read_text(encoding="utf-8"),
                                       re.S | re.M)) for page in pages}
    unmarked = [page.relative_to(ROOT).as_posix() for page in pages if CLOCKS.search(code[page]) and not is_timed(page)]
    assert not unmarked, f"pages that read a clock without `timed: true` in their front matter: {unmarked}"
    needless = [page.relative_to(ROOT).as_posix() for page in pages if is_timed(page) and not CLOCKS.search(code[page])]
    assert not needless, f"pages marked `timed: true` that read no clock (they could run side by side): {needless}"
