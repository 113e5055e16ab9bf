"""``{glue:text}`` in a translated paragraph pastes the value of the page it is on.

Sphinx translates a paragraph by parsing its ``msgstr`` (from ``locales/``) as a small
document of its own and putting that in the paragraph's place (``sphinx.transforms.i18n``).
MyST-NB's glue roles read their values from the notebook being parsed, so in that small
document they find nothing: "No key ... found in glue data for this document". The roles
have a second form, ``path::key``, a reference that is resolved after reading from the
values MyST-NB stored for that page; it is what a page uses to paste another page's value.

So inside a translated message, and only there, this extension writes ``key`` as
``/<this page>::key``. A translator keeps the English ``{glue:text}`key:fmt``` exactly
(``tools/i18n.py check`` insists), and the same value, formatted the same way, appears.
"""

from __future__ import annotations

from myst_nb.ext.glue import roles

TRANSLATED_SOURCE = ":<translated>"  # how sphinx.transforms.i18n names a msgstr's source


def _in_translation(role) -> bool:
    return "nb_renderer" not in role.document and str(role.source).endswith(TRANSLATED_SOURCE)


def _this_page(role) -> str:
    env = role.document.settings.env
    return "/" + str(env.doc2path(env.docname, False))


def _refer_to_this_page(run, default_format: str | None):
    def wrapped(self):
        if _in_translation(self) and "::" not in self.text:
            text = self.text
            # {glue:text} splits its format at the last ":", which the page's path now
            # brings; an unformatted key gets the format it had by default ("s").
            if default_format and ":" not in text:
                text += f":{default_format}"
            self.text = f"{_this_page(self)}::{text}"
        return run(self)

    return wrapped


def setup(app):
    roles.PasteTextRole.run = _refer_to_this_page(roles.PasteTextRole.run, "s")
    roles.PasteRoleAny.run = _refer_to_this_page(roles.PasteRoleAny.run, None)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
