"""``make bench`` records of the translated editions (``tools/i18n.py``).

- ``zh.untranslated_messages``: messages of the English pages (and of ``_toc.yml``) with
  no current Chinese translation: empty, fuzzy, or missing from the catalogue. Goal ``== 0``.
- ``zh.placeholder_mismatches``: translations whose inline code, math, roles, link targets
  or format fields differ from the English. Goal ``== 0``.
- ``zh.glossary_misses``: translations that render a glossary term another way. Goal ``== 0``.
- ``zh.build_seconds``: ``make book-zh`` after ``make book``, from the same execution cache
  (nothing re-executes), on this machine. Reported.
"""

from __future__ import annotations

from benchmarks.records import Record
from tools import i18n

LANGUAGE = "zh_CN"


def run() -> list[Record]:
    report = i18n.check(LANGUAGE)
    records = [
        Record("zh.untranslated_messages", report.untranslated + report.fuzzy, "messages", "== 0",
               note=f"of {report.messages} messages"),
        Record("zh.placeholder_mismatches", report.placeholder_mismatches, "messages", "== 0"),
        Record("zh.glossary_misses", report.glossary_misses, "messages", "== 0"),
    ]
    try:
        seconds = i18n.build(LANGUAGE)
        records.append(Record("zh.build_seconds", seconds, "s", note="after make book, same execution cache"))
    except Exception as exc:  # a failed build is a number we could not take, not a crash of make bench
        records.append(Record("zh.build_seconds", float("nan"), "s", note=f"build failed: {exc}"))
    return records
