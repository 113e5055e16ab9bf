"""Chapter 10's gloo ranks as contestants: each rank a fork of the zygote, in one sandbox.

A ring attention is only graded for real on several processes that talk to each other.
Every rank is a contestant (:mod:`grading.contestant.main`) spawned with a ``rank`` spec; they
are forks of the same zygote, so they share its network namespace and reach each other,
and nothing else, over loopback. The judge (:func:`grading.judge.run_ranks`) spawns rank 0
first, which opens the rendezvous store and reports its port, then the others; then it
asks every rank at once to join the gloo group, and makes each rank's calls at once.

What a rank sends (bytes and tensors handed to ``torch.distributed.isend``, which ``send``
and ``batch_isend_irecv`` call) is counted here, in the contestant, and read back after
each call: like :mod:`grading.contestant.watch`, a count the submission's process could
change, so it is worth one point. Every byte the ranks send, collectives included, is
also counted where they cannot reach: on the loopback of their network namespace, by the
judge (:func:`grading.judge.measure.loopback_bytes`).
"""

from __future__ import annotations

import datetime
import functools

RENDEZVOUS_TIMEOUT_S = 120  # how long a rank waits for the others to join
_state: dict = {}


def prepare(rank: dict) -> dict:
    """Before the notebook loads: rank 0 opens the store. What the judge is told."""
    import torch.distributed as dist

    _state.update(rank=rank, counter={"bytes": 0, "sends": 0})
    if rank.get("master"):
        _state["store"] = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                        timeout=datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S))
        return {"port": _state["store"].port}
    return {}


def join() -> None:
    import torch.distributed as dist

    rank = _state["rank"]
    store = _state.get("store") or dist.TCPStore("127.0.0.1", int(rank["port"]), is_master=False,
                                                 timeout=datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S))
    _state["store"] = store
    count_sends(_state["counter"])
    dist.init_process_group("gloo", store=store, rank=int(rank["rank"]), world_size=int(rank["world_size"]),
                            timeout=datetime.timedelta(seconds=float(rank["op_timeout"])))


def counted() -> dict:
    """What this rank sent since the last time it was asked; the count starts again."""
    counter = _state["counter"]
    out = {"bytes": counter["bytes"], "sends": counter["sends"]}
    counter["bytes"] = counter["sends"] = 0
    return out


def finish() -> None:
    import torch.distributed as dist

    try:
        dist.barrier()  # no rank leaves while a neighbour still reads from it
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the results are in the judge already
        pass


def count_sends(counter: dict) -> None:
    """Wrap torch.distributed.isend (which send and batch_isend_irecv call) to count what is
    sent into ``counter`` ("bytes", "sends"); the book's distlab counts its ranks with it too."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    original = c10d.isend

    @functools.wraps(original)
    def isend(tensor, *args, **kwargs):
        counter["bytes"] += tensor.numel() * tensor.element_size()
        counter["sends"] += 1
        return original(tensor, *args, **kwargs)

    c10d.isend = isend  # batch_isend_irecv checks `op is isend` against this module's name
    dist.isend = isend
