"""Processes: how every child is started, contained and ended.

- ``sandbox``: the bubblewrap command line (namespaces, read-only files, a uid of its own).
- ``zygote``:  the one launcher of processes that run a submission's code: the contestants'
               zygote, their limits, and the children that load a notebook themselves.
- ``judges``:  one judge per student and chapter, in a fresh folder, under a timeout.
- ``env``:     the environment every child starts with.
"""
