# nbgrader's configuration on the students' side, for the Validate button (docs/instructors.md,
# "Grading under nbgrader"). Validate runs the notebook as autograde does, and the first
# autograder cell grades the whole chapter: nbgrader's default of 30 s per cell fails a
# correct notebook. Put this file where the students' Jupyter reads nbgrader's
# configuration: ~/.jupyter/nbgrader_config.py for one student, or a folder of
# `jupyter --paths` (config), such as /etc/jupyter/nbgrader_config.py, on a JupyterHub.
c = get_config()  # noqa: F821 - nbgrader defines it when it loads this file
c.Execute.timeout = 900
