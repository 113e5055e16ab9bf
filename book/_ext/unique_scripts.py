"""Drop repeated <script> entries from every page.

sphinx-thebe and sphinx-togglebutton register inline scripts (``const THEBE_JS_URL = ...``)
after the HTML builder starts. Sphinx 7 then holds each of them twice: once as added
(file name ``None``) and once re-added from the registry (file name ``""``), so every
page declared the same ``const`` twice and the browser logged a SyntaxError. We keep the
first copy of each identical script on each page; nothing else changes.
"""


def _key(script):
    return getattr(script, "filename", None) or "", tuple(sorted(getattr(script, "attributes", {}).items()))


def unique_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return None
    seen, kept = set(), []
    for script in scripts:
        if _key(script) not in seen:
            seen.add(_key(script))
            kept.append(script)
    scripts[:] = kept  # in place: the same list is what Sphinx renders
    return None


def setup(app):
    # Early: html-page-context stops at the first handler that returns a template name.
    app.connect("html-page-context", unique_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
