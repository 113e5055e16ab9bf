"""How a grader in this folder runs (the wiring lives in ``grading/``, loaded as a pytest plugin).

- ``nb``, the fixture every grader takes, is the chapter's notebook as the *judge* sees it:
  a :class:`grading.judge.RemoteNotebook`. ``nb.f(x)`` sends the call to a *contestant*, a
  sandboxed process that loaded the notebook (:mod:`grading.contestant.main`), and returns what
  came back, rebuilt from bytes as plain values (:mod:`grading.wire`). This process, which
  holds the graders, the references and any hidden tests, never runs the notebook's code.
- ``--notebooks DIR`` grades the notebooks in DIR (default ``solutions/``); ``--prove``
  grades the solution, the stub and every bug of ``tests/catalogue/`` instead
  (:mod:`grading.judge.plugin`).
- Each exercise is graded alone (:mod:`grading.judge.substitute`): the contestant of a test of
  exercise N has the references of the other exercises in place of the notebook's, and
  never the reference of N.
- Rules about *how* a notebook computes (no NaN on the way, no big intermediate, writes in
  place) are watched where the code runs: :func:`grading.judge.watching`,
  :func:`grading.judge.data_ptr`.
"""
