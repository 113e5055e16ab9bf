"""``pytest --prove``: what the run proved about the graders, and the section that says so.

Every grader runs on the stubs (it must fail) and on every catalogue bug (some test must
reject each). Each chapter's diagnosis table is checked against what the bugs output
(grading.diagnosis), and each chapter's rule table against its statements: every graded
rule a statement lists names the catalogue bugs that break it (grading.notebook.rules).
The run fails when a stub passes, a bug escapes, a diagnosis is wrong or stale, or a
stated rule has no bug.
"""

from __future__ import annotations

import json
from collections import defaultdict

from grading.judge import diagnosis
from grading.layout import ROOT
from grading.notebook import rules
from grading.notebook.catalogue import load_catalogue


class Proof:
    def __init__(self, config):
        self.config = config
        self.stub_escapes: list[str] = []
        self.stub_checked = 0
        self.bug_runs: dict[str, list[str]] = {}  # "stem/bug" -> tests that rejected it
        self.bug_why: dict[str, str] = {}
        self.chapters: set[str] = set()  # the chapters whose graders this run proved
        # For grading.diagnosis: what each bug produced in each case, as an observation or "passed".
        self.bug_cases = defaultdict(lambda: defaultdict(dict))  # stem -> bug -> case -> obs
        self.case_exercise = defaultdict(dict)  # stem -> case -> exercise
        self._diagnosis: dict | None = None
        self._rules: dict[str, list[str]] | None = None

    def record(self, stem: str, variant: str, report, props: dict) -> None:
        """One report of a test on the stubs or on a bug (``variant``: the variant's id)."""
        self.chapters.add(stem)
        if variant == "stub" and report.when == "call" and not report.skipped:
            self.stub_checked += 1
            if props.get("stub_escaped"):
                self.stub_escapes.append(report.nodeid)
        elif variant.startswith("bug-") and report.when == "call":
            key = f"{stem}/{variant[4:]}"
            self.bug_why[key] = props.get("why", "")
            rejected = self.bug_runs.setdefault(key, [])
            if props.get("bug_rejected"):
                rejected.append(report.nodeid.split("::")[-1])

    def escaped_bugs(self) -> list[str]:
        return sorted(k for k, v in self.bug_runs.items() if not v)

    def rule_problems(self) -> dict[str, list[str]]:
        """Chapter -> why its rule table does not prove its statements (grading.notebook.rules)."""
        if self._rules is None:
            self._rules = {stem: found for stem in sorted(self.chapters) if (found := rules.chapter_problems(stem))}
        return self._rules

    def of_diagnosis(self) -> dict:
        """Each chapter's diagnosis table checked against this run (or written, with
        ``--diagnosis-write``), and how well it diagnoses the catalogue."""
        if self._diagnosis is None:
            self._diagnosis = {}
            write = self.config.getoption("diagnosis_write")
            for stem in sorted(self.bug_cases):
                fresh = diagnosis.build(stem, load_catalogue(stem), self.bug_cases[stem], self.case_exercise[stem],
                                        write=write)
                if write:
                    diagnosis.write_table(stem, fresh)
                table = diagnosis.load_table(stem)
                result = diagnosis.proof(table, fresh)
                result["stale"] = sorted(set(table) ^ set(fresh))  # names only: a -k run still knows them all
                self._diagnosis[stem] = result
            if self._diagnosis:
                self._write_totals()
        return self._diagnosis

    def _write_totals(self) -> None:
        proof = self._diagnosis
        totals = {"bugs": sum(p["bugs"] for p in proof.values()),
                  "recalled": sum(p["recalled"] for p in proof.values()),
                  "false_diagnoses": sum(len(p["false_diagnoses"]) for p in proof.values())}
        totals["recall"] = totals["recalled"] / totals["bugs"] if totals["bugs"] else 1.0
        out = ROOT / "_build" / "diagnosis"
        out.mkdir(parents=True, exist_ok=True)
        (out / "proof.json").write_text(json.dumps({"totals": totals, "chapters": proof}, indent=1, sort_keys=True))

    def failed(self) -> bool:
        """Whether the proof failed beyond the tests' own outcomes."""
        broken = any(p["false_diagnoses"] or p["stale"] or p.get("unrecognised") for p in self.of_diagnosis().values())
        return bool(self.escaped_bugs() or broken or self.rule_problems())

    def summarise(self, tr) -> None:
        """The ``grader proof`` sections of the terminal summary (``tr``: pytest's reporter)."""
        tr.section("grader proof")
        tr.write_line(f"stubs: {self.stub_checked} grader tests ran on exercises/, "
                      f"{len(self.stub_escapes)} passed a stub")
        for nodeid in self.stub_escapes:
            tr.write_line(f"  PASSED A STUB (asserts nothing): {nodeid}")
        for key in sorted(self.bug_runs):
            tests = self.bug_runs[key]
            if tests:
                more = f" and {len(tests) - 1} more" if len(tests) > 1 else ""
                tr.write_line(f"  rejected  {key:<48} by {tests[0]}{more}")
            else:
                tr.write_line(f"  ESCAPED   {key:<48} no grader rejects it: {self.bug_why[key]}")
        tr.write_line(f"catalogue: {len(self.bug_runs)} wrong implementations, {len(self.escaped_bugs())} escaped")
        self._summarise_rules(tr)
        self._summarise_diagnosis(tr)

    def _summarise_rules(self, tr) -> None:
        found = self.rule_problems()
        declared = [s for s in sorted(self.chapters) if s not in found and rules.load_rules(s) is not None]
        if not found and not declared:
            return
        tr.section("graded rules")
        for stem in declared:
            tr.write_line(f"{stem:<28} every stated rule names the catalogue bugs that break it")
        for stem, lines in found.items():
            for line in lines:
                tr.write_line(f"  RULE NOT PROVEN  {stem}: {line}")

    def _summarise_diagnosis(self, tr) -> None:
        proof = self.of_diagnosis()
        if not proof:
            return
        tr.section("diagnosis from the catalogue")
        for stem, p in proof.items():
            if p["bugs"] or p["stale"]:
                _diagnosis_lines(tr, stem, p)
        bugs = sum(p["bugs"] for p in proof.values())
        recalled = sum(p["recalled"] for p in proof.values())
        false = sum(len(p["false_diagnoses"]) for p in proof.values())
        tr.write_line(f"diagnosis: {recalled} of {bugs} catalogue bugs diagnosed as themselves "
                      f"(recall {recalled / bugs if bugs else 1.0:.3f}), {false} false diagnoses")


def _diagnosis_lines(tr, stem: str, p: dict) -> None:
    tr.write_line(f"{stem:<28} {p['recalled']:>3} / {p['bugs']:<3} bugs diagnosed as themselves, "
                  f"{len(p['false_diagnoses'])} false")
    for name, why in sorted(p["missed"].items()):
        tr.write_line(f"  not diagnosed  {name}: {why}")
    for line in p["false_diagnoses"]:
        tr.write_line(f"  FALSE DIAGNOSIS  {line}")
    if p.get("kinds_recognised"):
        tr.write_line(f"  recognised by kind: {', '.join(p['kinds_recognised'])}")
    for line in p.get("unrecognised", []):
        tr.write_line(f"  UNRECOGNISED  {line}")
    if p["stale"]:
        tr.write_line(f"  STALE TABLE  {diagnosis.table_path(stem).name} and the catalogue differ on: "
                      f"{', '.join(p['stale'])}; run python -m grading.diagnosis --write {stem}")
