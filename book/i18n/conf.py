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
from tools.i18n import write_search_dictionary  # noqa: E402

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

# Chinese search: jieba cuts the pages into words with this dictionary of the glossary's
# terms (written from book/notation.md at each build), so that 预填充 or 稀疏注意力 is
# indexed whole and found as typed. Other languages' search ignores the option.
html_search_options = {"dict": str(write_search_dictionary(ROOT / "_build" / "i18n" / "search_dictionary.txt"))}
