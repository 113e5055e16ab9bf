"""The Chinese edition's words beyond the glossary: the terms a page must use, and the phrasings none may.

The glossary (``book/notation.md``, "Terms in both editions") holds the terms of the whole
book, one translation each. Some English words need one translation within a chapter only
(Chapter 12's *chunk* of a prompt is 分块, its *block* of cache is 块: one word each, where
the reader must tell them apart), and some terms the search must know whole though no
paragraph's English names them alike (投机解码). :data:`TERMS` lists them; ``tools/i18n.py
check`` reads them as it reads the glossary, on the pages each names.

:data:`STYLE` lists phrasings that read as translated English, each with what to write
instead; the check reports a translation that uses one. Both are read by ``make i18n-check``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """An English term and its one Chinese translation, on the pages whose names start with ``pages``.

    ``pages=()`` means every page. ``english=""`` is a term the check cannot see in the
    English (it names no one word there) but the search must index whole.
    """

    english: str
    chinese: str
    pages: tuple[str, ...] = ()

    def applies_to(self, page: str) -> bool:
        return not self.pages or page.startswith(self.pages)


_CH12 = ("chapters/12_serving",)
# Chapter 14 and its exercise and solution notebooks, whose statements use its words.
_CH14 = tuple(f"{part}/14_speculative_decoding" for part in ("chapters", "exercises", "solutions"))

TERMS: tuple[Term, ...] = (
    # A prompt's chunk and the cache's block are different things in Chapter 12.
    Term("chunk", "分块", _CH12),
    Term("block", "块", _CH12),
    Term("multi-head latent attention", "多头潜在注意力"),
    Term("tensor parallelism", "张量并行"),
    Term("radix tree", "基数树"),
    Term("scheduler", "调度器"),
    Term("weight absorption", "权重吸收"),
    Term("decode context parallelism", "解码上下文并行"),
    # Chapter 14 says "the residual" for the residual distribution, and "the correction" for
    # the target's own token at the first rejection: one name each, as the exercises use them.
    Term("residual", "残差分布", _CH14),
    Term("correction", "修正 token", _CH14),
    Term("tree draft", "树状草稿", _CH14),
    Term("", "投机解码"),  # "speculative decoding": every use names it, but one is "speculative decodes"
    Term("", "潜在向量"),  # MLA's "latent": English says "the latent", an adjective made a noun
)


@dataclass(frozen=True)
class Avoid:
    """A phrasing that reads as translated English: its pattern in a translation, why, and where.

    ``pages=()`` means every page.
    """

    pattern: re.Pattern
    why: str
    pages: tuple[str, ...] = ()


STYLE: tuple[Avoid, ...] = (
    Avoid(re.compile(r"首 ?token 时间"), "TTFT is 首 token 延迟, as engineers say it (book/notation.md)"),
    Avoid(re.compile(r"少(?:了)? ?(?:\d[\d.,]*|\{glue:text\}`[^`]+`|[A-Za-z$][^ ]*) ?倍"),
          "\"N times fewer\" is not 少 N 倍 (which reads as a subtraction): write 减为 1/N or 只有 1/N"),
    Avoid(re.compile(r"快了 ?(?:\d[\d.]*|\{glue:text\}`[^`]+`) ?倍"),
          "\"1.36x as fast\" is not 快了 1.36 倍 (which reads as 2.36x): write 快到 1.36 倍 or 提速 36%"),
    Avoid(re.compile(r"计价"), "\"costed\" is not 计价 (pricing): write 估算代价 or 计算代价"),
    Avoid(re.compile(r"内存算术"), "Chapter 1's arithmetic is 显存算术, as its title says"),
    Avoid(re.compile(r"很便宜|更便宜|最便宜"), "\"cheap\" is not 便宜 (a price): write 代价很小, 开销更小"),
    # A chapter's "score" is attention's (notation page: 分数); 得分 is what a grader gives.
    Avoid(re.compile(r"得分"), "an attention score is 分数, as on the notation page; 得分 is a grade",
          ("chapters/",)),
)


def style_problems(page: str, translation: str) -> list[str]:
    """What each rule of :data:`STYLE` finds in one translated message of ``page``: the text, and why."""
    rules = [rule for rule in STYLE if not rule.pages or page.startswith(rule.pages)]
    return [f"{m.group(0)!r}: {rule.why}" for rule in rules for m in rule.pattern.finditer(translation)]


def page_terms(page: str) -> list[tuple[str, str]]:
    """(English, Chinese) of :data:`TERMS` that the check applies to one page (``chapters/12_serving``)."""
    return [(t.english, t.chinese) for t in TERMS if t.english and t.applies_to(page)]
