"""The contestant: the one process that runs a submission's code, in the sandbox.

- ``main``:      the process (``python -m grading.contestant.main --zygote``).
- ``limits``:    the resource limits it sets on itself before any submission's code runs.
- ``zygote``:    imports torch once, then forks one contestant per exercise and kills or reaps it.
- ``server``:    one contestant: loads the notebook and answers the judge's requests.
- ``swap``:      each exercise graded alone: the other exercises' names bound to references.
- ``isolation``: namespaces of its own inside the sandbox, no keyrings.
- ``watch``, ``services``, ``ranks``: what only this process can do for a grader.
- ``triton_bounds``: every load and store of an interpreted kernel checked.

It imports only the faces (``grading.wire``, ``grading.compare``, ``grading.layout``, ...)
and ``grading.notebook``: never the judge's references or the classroom.
"""
