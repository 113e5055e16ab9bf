"""Solution pages that read as solutions, and links to them that the student edition survives.

``exercises/`` is generated from ``solutions/`` (``make exercises``), so both notebooks open
with the same cell: "Exercises for Chapter N: ...", then "Replace every ``raise
NotImplementedError``...". That is right for the exercise page and wrong for the solutions
appendix, whose title and browser tab would say "Exercises". On the pages under
``solutions/`` this transform renames the title to "Solutions for Chapter N: ..." and
replaces the instruction with a sentence that says what the page is. The notebooks are not
changed, so the stubs, nbval and the graders see exactly what they saw.

The role ``{solution}`02_paged_kv_cache``` writes ``solutions/02_paged_kv_cache.ipynb`` as
a link to that appendix page when the page is in the build, and as plain code text when it
is not: the student edition (``make release``) builds the chapters without ``solutions/``,
where a link would be a missing reference and fail its ``-W`` build.
"""

from __future__ import annotations

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms import SphinxTransform

EXERCISE_TITLE = "Exercises for Chapter"
INSTRUCTION = "Replace every"


class SolutionPages(SphinxTransform):
    # Before Sphinx's Locale transform (priority 20): the new title and sentence are then
    # messages of the solution pages like any other, cut by `gettext` and translated.
    default_priority = 15

    def apply(self):
        docname = self.env.docname
        if not docname.startswith("solutions/"):
            return
        stem = docname.split("/", 1)[1]
        for title in self.document.findall(nodes.title):
            source = title.rawsource or title.astext()
            if source.startswith(EXERCISE_TITLE):
                renamed = "Solutions for" + source[len("Exercises for"):]
                title.rawsource = renamed
                title.children = []
                title += nodes.Text(renamed)
            break
        for para in self.document.findall(nodes.paragraph):
            if para.astext().startswith(INSTRUCTION):
                exercise = f"exercises/{stem}.ipynb"
                text = (f"These are the book's worked solutions, executed, with their outputs. The exercise notebook "
                        f"`{exercise}` has the same cells, each solution replaced by `raise NotImplementedError(...)`; "
                        "the graders check either folder from the repository root:")
                new = nodes.paragraph(text)  # rawsource: the MyST source a translation replaces
                new += nodes.Text("These are the book's worked solutions, executed, with their outputs. The exercise "
                                  "notebook ")
                new += nodes.literal(text=exercise)
                new += nodes.Text(" has the same cells, each solution replaced by ")
                new += nodes.literal(text="raise NotImplementedError(...)")
                new += nodes.Text("; the graders check either folder from the repository root:")
                new.source, new.line = para.source, para.line
                para.replace_self(new)
                break


def solution_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{solution}`NN_topic```: a link to the appendix page when it is built, else code text."""
    stem = text.strip()
    label = nodes.literal(text=f"solutions/{stem}.ipynb")
    env = inliner.document.settings.env
    docname = f"solutions/{stem}"
    if docname not in env.found_docs:
        return [label], []
    ref = addnodes.pending_xref("", refdomain="std", reftype="doc", reftarget=f"/{docname}",
                                refexplicit=True, refwarn=True)
    ref += label
    return [ref], []


def setup(app):
    app.add_transform(SolutionPages)
    app.add_role("solution", solution_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
