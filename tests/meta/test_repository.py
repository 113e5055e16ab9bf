"""Checks on the repository itself: stubs in sync, notebooks clean, pins agree."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from grading.stubs import expected_stubs

ROOT = Path(__file__).resolve().parents[2]
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
    assert sorted(actual) == sorted(expected), "exercises/ and solutions/ hold different notebooks (run `make exercises`)"
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
        assert any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), f"{path.name} has no outputs for nbval"


def test_every_chapter_has_all_its_parts():
    stems = sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))
    assert stems, "no solution notebooks"
    for stem in stems:
        for part in (f"chapters/{stem}.md", f"tests/test_{stem}.py", f"tests/references/ref_{stem}.py", f"tests/catalogue/{stem}.py"):
            assert (ROOT / part).exists(), f"chapter {stem} lacks {part}"


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
