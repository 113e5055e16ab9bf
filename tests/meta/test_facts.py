"""Facts the chapters must keep, checked in their source.

The numbers themselves are computed by the chapters' cells, several of which assert
what they rely on (Chapter 1: the HBM labels match the reported totals in GiB, and no
capacity plan goes past a model's trained context; Chapter 6: the formulas' scale is
the code's). These checks hold the rest: how devices are sized, how math is written,
how wide code may be, and that no solution notebook states a speed it did not measure.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from grading.layout import ROOT

CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
CODE_LINE_LIMIT = 88  # what fits the book's content column (_static/book.css)
# nvidia-smi's totals (MiB), cited in Chapter 1: the capacity a plan may use.
REPORTED_MIB = {"H100": "81_559", "H200": "143_771"}


def code_blocks(path: Path):
    """(first line number, lines) of every fenced block: code cells and ```bash alike."""
    block, start = None, 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if block is None and line.startswith("```"):
            block, start = [], number + 1
        elif block is not None and line.rstrip() == "```":
            yield start, block
            block = None
        elif block is not None:
            block.append(line)


def code_lines(path: Path):
    for start, block in code_blocks(path):
        for offset, line in enumerate(block):
            if not line.startswith(":tags:"):
                yield start + offset, line


def test_chapters_exist():
    assert len(CHAPTERS) >= 8, [p.name for p in CHAPTERS]


def test_device_capacity_is_what_the_device_reports():
    """HBM labels are binary in practice: a plan never sizes an H100 or H200 as 80e9 or 141e9."""
    decimal = re.compile(r"\b(80|141)(\.0)?\s*(e9|\*\s*10\s*\*\*\s*9|\*\s*1e9|\*\s*1_000_000_000)\b")
    found = [f"{p.name}:{n}: {line.strip()}" for p in CHAPTERS for n, line in code_lines(p) if decimal.search(line)]
    assert not found, f"device capacity as a decimal label; use the reported MiB totals of Chapter 1: {found}"
    chapter_1 = (ROOT / "chapters" / "01_kv_memory.md").read_text()
    for device, mib in REPORTED_MIB.items():
        assert mib in chapter_1, f"Chapter 1 must size the {device} as {mib} MiB (nvidia-smi's total)"


def test_math_text_has_no_escaped_underscores():
    r"""MathJax draws `\_` inside \text{} as a backslash and an underscore: write \text{num_layers}."""
    escaped = re.compile(r"\\(text|texttt|textrm|mathrm)\{[^}]*\\_")
    found = [f"{p.name}:{n}" for p in CHAPTERS for n, line in enumerate(p.read_text().splitlines(), 1)
             if escaped.search(line)]
    assert not found, f"\\text{{..\\_..}} renders a literal backslash: {found}"


def test_chapter_code_fits_the_column():
    """A code line longer than this hides behind a horizontal scrollbar in the built book."""
    long = [f"{p.name}:{n} ({len(line)} characters)" for p in CHAPTERS for n, line in code_lines(p)
            if len(line) > CODE_LINE_LIMIT]
    assert not long, f"chapter code lines over {CODE_LINE_LIMIT} characters: {long}"


def test_solution_prose_states_no_unmeasured_speed():
    """A speed-up in a solution's markdown is written by hand and true on one CPU only.
    Say where it is measured (the chapter glues it) instead."""
    claim = re.compile(r"(twice|half|\d+(\.\d+)?\s*(x|×|times))\s+(as\s+)?(fast|faster|slower)|(faster|slower) than",
                       re.I)
    found = []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown" and claim.search(text):
                found.append(f"{path.name} cell {index}: {claim.search(text).group(0)!r}")
    assert not found, f"hand-written speed claims in solution markdown: {found}"


def test_flash_attention_3_figure_matches_the_cited_version():
    """The bibliography cites the NeurIPS version: 840 TFLOP/s in BF16, not arXiv v1's 740 in FP16."""
    chapter = (ROOT / "chapters" / "07_triton_kernels.md").read_text()
    sentence = chapter[chapter.index("FlashAttention-3 reached"):][:300]
    assert "840 TFLOP/s" in sentence and "shah2024flashattention3" in sentence, sentence


def test_gated_deltanet_hybrids_are_described_as_published():
    """arXiv 2412.06464, §3.3: H1 = Gated DeltaNet + SWA, H2 = Mamba2 + Gated DeltaNet + SWA."""
    chapter = (ROOT / "chapters" / "06_delta_rule.md").read_text()
    assert "with sliding-window and full\nattention" not in chapter
    assert "sliding-window and full attention" not in chapter
    assert "H1" in chapter and "H2" in chapter and "qwen3next2025" in chapter
