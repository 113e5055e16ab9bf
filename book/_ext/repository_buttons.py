"""Repository, issues, Binder and Colab buttons only when the book knows its repository.

A publisher sets one thing: ``repository.url`` in ``_config.yml`` (``docs/publishing.md``).
Until it is set, every one of these buttons would send a reader to a repository that
does not exist, so the build leaves them out. Once it is set, this extension turns the
repository and issues buttons on and keeps the launch buttons that ``_config.yml`` lists.
Jupyter Book's own default URL counts as unset.
"""

UNSET = ("", "https://github.com/executablebooks/jupyter-book")  # JB's default is not ours
LAUNCH_URLS = ("binderhub_url", "colab_url", "jupyterhub_url", "deepnote_url")


def repository_url(theme_options) -> str:
    return (theme_options.get("repository_url") or "").strip().rstrip("/")


def configure_buttons(app, config):
    options = dict(config.html_theme_options or {})
    launch = dict(options.get("launch_buttons") or {})
    if repository_url(options) in UNSET:
        options["repository_url"] = ""
        for button in ("use_repository_button", "use_issues_button", "use_edit_page_button",
                       "use_source_button"):
            options[button] = False
        for key in LAUNCH_URLS:
            launch[key] = ""
        launch["thebe"] = False
    else:
        options["use_repository_button"] = True
        options["use_issues_button"] = True
    options["launch_buttons"] = launch
    config.html_theme_options = options


def setup(app):
    app.connect("config-inited", configure_buttons)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
