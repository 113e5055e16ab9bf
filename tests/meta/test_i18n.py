"""The translated editions' tools (tools/i18n.py): the checks can fail, and the exercises match.

``make i18n-check`` (in ``make test``) runs the check on the real catalogues; these tests
show that it catches each kind of mistake it claims to, on small catalogues made here.
"""

from __future__ import annotations

import json
import re

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import write_po

from grading.layout import EXERCISES, ROOT
from tools import i18n, i18n_search, i18n_terms

GLUE = "{glue:text}`example_gib_32768:.0f`"
ENGLISH = (f"A 32K-token context needs {GLUE} GiB of KV cache per sequence; see {{cite:p}}`kwon2023vllm` "
           "and $N \\cdot c$.")
GOOD = f"32K token 的上下文，每条序列需要 {GLUE} GiB 的 KV 缓存；参见 {{cite:p}}`kwon2023vllm` 与 $N \\cdot c$。"


def _catalogue(path, entries, fuzzy=()):
    catalog = Catalog(locale="zh_CN")
    for msgid, msgstr in entries.items():
        catalog.add(msgid, msgstr, flags=("fuzzy",) if msgid in fuzzy else ())
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        write_po(f, catalog, width=0)


@pytest.fixture
def books(tmp_path, monkeypatch):
    """A template folder and a locale folder of one page, ``chapters/99_x``, to fill."""
    monkeypatch.setattr(i18n, "POT_DIR", tmp_path / "pot")
    monkeypatch.setattr(i18n, "LOCALES", tmp_path / "locales")

    def make(translations, fuzzy=()):
        _catalogue(tmp_path / "pot" / "chapters" / "99_x.pot", {k: "" for k in translations})
        _catalogue(tmp_path / "locales" / "zh_CN" / "LC_MESSAGES" / "chapters" / "99_x.po", translations, fuzzy)
        return i18n.check("zh_CN", fresh=False)

    return make


def test_a_faithful_translation_passes(books):
    report = books({ENGLISH: GOOD})
    assert report.problems == [] and report.messages == 1


@pytest.mark.parametrize("wrong, kind", [
    ("", "untranslated"),
    (GOOD.replace(":.0f", ":.1f"), "placeholder"),  # the glued number formatted otherwise
    (GOOD.replace(GLUE, "8"), "placeholder"),  # a glued number typed in by hand
    (GOOD.replace("{cite:p}`kwon2023vllm`", "[Kwon 2023]"), "placeholder"),
    (GOOD.replace("$N \\cdot c$", "N·c"), "placeholder"),  # math written out
    (GOOD.replace("KV 缓存", "键值缓存"), "glossary"),  # another word for a glossary term
])
def test_each_kind_of_mistake_is_caught(books, wrong, kind):
    report = books({ENGLISH: wrong})
    assert [p.kind for p in report.problems] == [kind], report.problems


def test_a_fuzzy_translation_fails(books):
    assert [p.kind for p in books({ENGLISH: GOOD}, fuzzy={ENGLISH}).problems] == ["fuzzy"]


def test_link_targets_and_code_must_survive():
    english = "Run `make test` and read [the grader](../book/exercises_and_grading.md)."
    assert i18n.placeholders(english) == i18n.placeholders("运行 `make test`，再读"
                                                           "[评分器](../book/exercises_and_grading.md)。")
    assert i18n.placeholders(english) != i18n.placeholders("运行 `make test`，再读[评分器](exercises_and_grading.md)。")
    assert i18n.placeholders(english) != i18n.placeholders("运行 make test，再读"
                                                           "[评分器](../book/exercises_and_grading.md)。")


def test_the_glossary_is_read_from_the_notation_page():
    terms = dict(i18n.glossary())
    assert terms["KV cache"] == "KV 缓存" and terms["attention sink"] == "注意力汇聚点"
    assert len(terms) >= 30


def test_a_glossary_term_is_found_in_its_plural_and_hyphenated():
    assert i18n._term_pattern("KV cache").search("two KV-caches")
    assert i18n._term_pattern("inter-token latency").search("the inter-token latencies of all requests")
    assert not i18n._term_pattern("prefill").search("a prefilled cache")


def test_markdown_cells_are_cut_as_sphinx_cuts_them():
    text = ("## Exercise 1.1\n\nThe cache holds\ntwo tensors per layer.\n\n- one key\n- one value,\n  per token\n\n"
            "$$c = 2 n d$$\n\n| a | b |\n| --- | --- |\n| left | right |\n")
    messages = {"Exercise 1.1": "练习 1.1", "The cache holds two tensors per layer.": "缓存每层保存两个张量。",
                "one key": "一个键", "one value, per token": "每个 token 一个值", "left": "左", "right": "右",
                "a": "a", "b": "b"}
    out, missing = i18n.translate_markdown(text, messages)
    assert missing == []
    assert out == ("## 练习 1.1\n\n缓存每层保存两个张量。\n\n- 一个键\n- 每个 token 一个值\n\n$$c = 2 n d$$\n\n"
                   "| a | b |\n| --- | --- |\n| 左 | 右 |\n")


@pytest.mark.parametrize("language", i18n.LANGUAGES)
def test_translated_exercises_have_the_same_code(language):
    """The graders treat both notebooks alike because their code cells are the same."""
    for english in sorted(EXERCISES.glob("*.ipynb")):
        translated = EXERCISES / language / english.name
        assert translated.exists(), f"{translated.relative_to(ROOT)} is missing: run `make exercises`"
        a, b = (json.loads(p.read_text()) for p in (english, translated))
        assert [c["cell_type"] for c in a["cells"]] == [c["cell_type"] for c in b["cells"]]
        for cell_a, cell_b in zip(a["cells"], b["cells"]):
            if cell_a["cell_type"] == "code":
                assert cell_a == cell_b, f"{translated.name}: a code cell differs from the English one"


@pytest.mark.parametrize("language", i18n.LANGUAGES)
def test_catalogues_name_no_machine(language):
    """No source location (a path of the machine that ran `update`) in a committed catalogue."""
    for path in i18n.catalogues(language).values():
        text = path.read_text(encoding="utf-8")
        assert "\n#: " not in text and "/work/" not in text and "/home/" not in text, path


def test_a_chinese_notebook_is_graded_like_the_english_one(tmp_path):
    """Chapter 1's solution with its statements in Chinese earns what the English one earns."""
    import subprocess
    import sys

    import nbformat

    from grading.layout import SOLUTIONS

    solution = nbformat.read(SOLUTIONS / "01_kv_memory.ipynb", as_version=4)
    translated = i18n.translate_notebook(solution, "zh_CN", "exercises/01_kv_memory")
    changed = sum(a.source != b.source for a, b in zip(solution.cells, translated.cells))
    assert changed > 0, "no markdown cell of Chapter 1 was translated: is exercises/01_kv_memory.po empty?"
    nbformat.write(translated, tmp_path / "01_kv_memory.ipynb")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "tests/test_01_kv_memory.py",
                          "--notebooks", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout.splitlines()[-1], run.stdout[-2000:]


def test_a_titled_reference_keeps_its_target_and_translates_its_title():
    english = "The terms are on the {ref}`notation page <glossary>`."
    assert i18n.placeholders(english) == i18n.placeholders("术语见{ref}`符号页 <glossary>`。")
    assert i18n.placeholders(english) != i18n.placeholders("术语见{ref}`符号页 <notation>`。")
    assert i18n.placeholders(english) != i18n.placeholders("术语见{doc}`符号页 <glossary>`。")


# Terms a Chinese-speaking reader searched for and did not find, or found on the wrong pages.
SEARCHED_TERMS = ("多头潜在注意力", "张量并行", "基数树", "投机解码", "潜在向量", "调度器", "权重吸收",
                  "解码上下文并行")


def _chinese_search(tmp_path):
    """Sphinx's Chinese splitter as the book's build sets it up (book/_ext/zh_search.py)."""
    pytest.importorskip("jieba")
    import sys

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from zh_search import ChineseTerms

    return ChineseTerms(i18n_search.write_search_files(tmp_path))


def test_chinese_search_indexes_each_term_whole(tmp_path):
    """Sphinx's Chinese splitter, with the build's dictionary, keeps every term of the
    catalogues as one word: the glossary's, the term table's, the headings' and the bold ones.

    The browser looks up what the reader types (预填充) as one word of the index; without the
    dictionary jieba cuts it into 预 and 填充, and the one-character piece is dropped.
    """
    language = _chinese_search(tmp_path)
    words = i18n_search.search_words()
    assert set(SEARCHED_TERMS) | {"预填充", "稀疏注意力", "上下文并行", "环形注意力", "闪电索引器"} <= set(words)
    for term in words:
        indexed = {w for w in language.split(f"。{term}，") if language.word_filter(w)}
        assert term in indexed, f"search would not find {term!r}: it is cut into {sorted(indexed)}"


def test_no_search_word_is_a_piece_of_a_compound():
    """The Chinese run of "token 间延迟" is no word (间延迟): a compound is indexed whole instead."""
    words = set(i18n_search.search_words())
    assert "间延迟" not in words
    assert {"KV 缓存", "首 token 延迟", "token 间延迟"} <= set(i18n_search.search_compounds())
    assert not any(re.match(r"(?:的|以及)", w) for w in words), "a search word is the tail of a phrase"


@pytest.mark.parametrize("text, key", [("首 token 延迟", "首token延迟"), ("首token延迟", "首token延迟"),
                                       ("KV 缓存", "kv缓存"), ("KV缓存", "kv缓存"), ("分页 KV 缓存", "分页kv缓存")])
def test_a_compound_is_indexed_whole_with_or_without_spaces(tmp_path, text, key):
    """首 alone is never indexed (one character), so 首 token 延迟 is indexed as one word."""
    language = _chinese_search(tmp_path)
    assert key in language.split(f"这一章的{text}很长")


def test_a_term_of_the_term_table_is_checked_on_its_pages(books):
    english = "Each chunk of the prompt runs in one step."
    assert "chunk" not in dict(i18n_terms.page_terms("chapters/99_x"))
    assert ("chunk", "分块") in i18n_terms.page_terms("chapters/12_serving")
    assert books({english: "提示词的每个块在一步中运行。"}).problems == []  # another chapter's chunk


RATIO = "{glue:text}`mha_over_mla`"


@pytest.mark.parametrize("wrong", [f"缓存少 {RATIO} 倍", f"快了 {RATIO} 倍", f"首 token 时间为 {RATIO} 秒",
                                   f"用时间模型计价，得 {RATIO}", f"第 1 章的内存算术给出 {RATIO}",
                                   f"{RATIO} 很便宜"])
def test_a_phrasing_that_reads_as_translated_english_is_caught(books, wrong):
    report = books({f"The ratio is {RATIO}.": f"{wrong}。"})
    assert [p.kind for p in report.problems] == ["style"], report.problems


def test_an_attention_score_is_fenshu_on_chapter_pages():
    assert i18n_terms.style_problems("chapters/13_mla", "得分除以 $\\sqrt{d}$")
    assert not i18n_terms.style_problems("book/exercises_and_grading", "这项测试才能得分")


def test_words_in_a_formula_translate_and_its_identifiers_stay():
    english = r"The cache is $\text{bytes per token} \times \text{num_layers}$ and $0 \text{ or } 1$."
    assert i18n.placeholders(english) == i18n.placeholders(r"缓存为 $\text{每 token 字节数} \times "
                                                           r"\text{num_layers}$，取 $0 \text{ 或 } 1$。")
    assert i18n.placeholders(english) != i18n.placeholders(r"缓存为 $\text{每 token 字节数} \times "
                                                           r"\text{层数}$，取 $0 \text{ 或 } 1$。")
    assert i18n.placeholders(english) != i18n.placeholders(r"缓存为 $\text{每 token 字节数} \times "
                                                           r"\text{num_layers}$，取 $0 \text{ 或 } 2$。")


def test_a_link_title_left_in_english_is_caught(books):
    english = "The results are in {ref}`Chapter 9's section on the real model <ch9-real-model>`."
    assert books({english: "结果见{ref}`第 9 章讲真实模型的一节 <ch9-real-model>`。"}).problems == []
    report = books({english: "结果见{ref}`Chapter 9's section on the real model <ch9-real-model>`。"})
    assert [p.kind for p in report.problems] == ["untranslated"] and "link title" in report.problems[0].detail
    # A short title is often a name that stays English in both editions.
    assert books({"Read [Flash attention](a.md).": "读 [Flash attention](a.md)。"}).problems == []


def test_code_toggles_read_in_chinese():
    """MyST-NB fills a toggle's {type} in English ("source"); the Chinese edition translates it."""
    import sys
    from types import SimpleNamespace

    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document
    from myst_nb.sphinx_ import HideCodeCellNode

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import editions

    env = SimpleNamespace(book_messages=editions.book_messages("zh_CN"))
    document = new_document("page", get_default_settings(Parser))
    show = env.book_messages["Show code cell {type}"]
    for word in ("source", "outputs", "output", "content"):  # as MyST-NB's HideInputCells fills them
        document += HideCodeCellNode(prompt_show=show.replace("{type}", word), prompt_hide="")
    class Toggles(editions.ToggleWords):  # the transform without a Sphinx build around it
        def __init__(self, document):
            self.document = document

        env = property(lambda self: SimpleNamespace(book_messages=messages))

    messages = env.book_messages
    Toggles(document).run()
    shown = [node["prompt_show"] for node in document.findall(HideCodeCellNode)]
    assert not any(re.search("[A-Za-z]", text) for text in shown), shown


def test_a_heading_defines_the_longest_term_it_names():
    """The search ranks first the pages that define a term; 解码上下文并行 defines no 上下文并行."""
    keys = {"上下文并行", "解码上下文并行", "张量并行", "kv缓存", "首token延迟"}
    assert i18n_search.defined_terms("13.6 解码上下文并行", keys) == {"解码上下文并行"}
    assert i18n_search.defined_terms("跨越单个设备：上下文并行与环形注意力", keys) == {"上下文并行"}
    assert i18n_search.defined_terms("**KV 缓存**与首 token 延迟", keys) == {"kv缓存", "首token延迟"}
