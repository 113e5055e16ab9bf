"""Run a notebook's function on real ``torch.distributed`` ranks (gloo, CPU, loopback).

Chapter 10's graders, its benchmark and the chapter itself use this to run the *same*
``ring_attention`` a student wrote on 2 or 4 processes of one machine:

    from distlab import run_on_ranks
    results = run_on_ranks("solutions/10_context_parallel.ipynb", "ring_attention", world_size=4,
                           calls=[[((q0, k0, v0), {"layout": "zigzag"}), ...], ...])  # one list per rank
    results[rank].calls[0].value       # what rank's call returned
    results[rank].calls[0].bytes_sent  # bytes of every tensor it handed to a send

See :mod:`distlab.launch` for how the processes are started, watched and stopped.
"""

from distlab.launch import CallResult, RankResult, RanksFailed, run_on_ranks

__all__ = ["CallResult", "RankResult", "RanksFailed", "run_on_ranks"]
