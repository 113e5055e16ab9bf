"""Sphinx configuration of the translated editions, made from the same ``_config.yml``.

Jupyter Book 1 builds the English edition from ``_config.yml`` and writes no ``conf.py``.
The translated editions need Sphinx's own i18n builders (``gettext``, and ``html`` with
``-D language=zh_CN``), which read a ``conf.py``. This one asks Jupyter Book for the very
configuration its ``build`` uses (``jupyter_book.config.get_final_config``, the function
behind ``jupyter-book config sphinx .``), so no setting is written twice, and adds only
what translation needs. ``tools/i18n.py`` runs the builds with ``-c book/i18n``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jupyter_book.config import get_final_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tools.i18n_search import write_search_files  # noqa: E402

# The overrides that `jupyter-book build` passes for an HTML build of this book.
_build_overrides = {"external_toc_path": str(ROOT / "_toc.yml"), "latex_individualpages": False}
_config, _ = get_final_config(user_yaml=ROOT / "_config.yml", sourcedir=ROOT, cli_config=_build_overrides)
globals().update(_config)

# Paths that Sphinx resolves against the folder of conf.py (this one), not the book's root.
html_static_path = [str(ROOT / p) for p in _config.get("html_static_path", [])]
bibtex_bibfiles = [str(ROOT / p) for p in _config["bibtex_bibfiles"]]
# One execution cache for every edition: the Chinese build re-executes nothing.
nb_execution_cache_path = str(ROOT / _config["nb_execution_cache_path"])

# One .po file per page (gettext_compact = False), kept in locales/<lang>/LC_MESSAGES/.
locale_dirs = [str(ROOT / "locales")]
gettext_compact = False
# A message whose English changed is marked fuzzy by sphinx-intl; never show it as translated.
gettext_allow_fuzzy_translations = False
# The English edition is the source; `-D language=zh_CN` selects the translation.
language = "en"
# The catalogues carry no source locations (they would name this machine's paths) and no
# per-build ids, so `make i18n-update` on any machine writes the same files.
gettext_location = False
gettext_uuid = False

# Chinese search: jieba cuts the pages into words with a dictionary of the book's terms,
# and book/_ext/zh_search.py indexes the terms with Latin words in them (KV 缓存) whole;
# both lists are written from the catalogues at each build (tools/i18n_search.py), so that
# 多头潜在注意力 or 首 token 延迟 is found as typed. Other languages' search ignores them.
html_search_options = write_search_files(ROOT / "_build" / "i18n")
extensions = [*extensions, "zh_search"]  # noqa: F821 (set from _config.yml above)
# A translated page prints the command that grades, and downloads, the edition's notebooks.
extensions.append("translated_notebooks")
