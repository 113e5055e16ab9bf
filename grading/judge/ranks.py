"""Chapter 10's gloo ranks, run by the judge: one contestant per rank, called at once."""

from __future__ import annotations

import contextlib
import threading

from grading import ranks
from grading.judge.measure import Tree, peak_memory
from grading.judge.proxy import RemoteNotebook
from grading.judge.session import ContestantCrashed, ContestantTimedOut
from grading.ranks import CallResult, RankResult


def run_ranks(nb: RemoteNotebook, function: str, world_size: int, calls: list[list], *, op_timeout: float = 10.0,
              timeout: float = 90.0, measure: bool = False):
    """``function`` of the notebook on ``world_size`` gloo ranks, each a contestant
    (:mod:`grading.contestant.ranks`) with the exercise's swap, called at once. ``calls[rank]`` is that
    rank's list of ``(args, kwargs)`` (or ``(other_function, args, kwargs)``), all of one
    length. Returns a :class:`grading.ranks.RankResult` per rank: what each call returned,
    rebuilt here, and the bytes it sent; ``timeout`` bounds each call. With ``measure``, each
    call's :class:`~grading.judge.measure.Peak` memory, read by the judge from outside the rank,
    is in its result's ``peak``. Raises ValueError when ``calls`` does not hold one list per
    rank, all of one length, and :class:`~grading.judge.measure.Unmeasurable` (before any
    call) where ``measure`` is asked and the ranks' memory cannot be read here."""
    if len(calls) != world_size or len({len(c) for c in calls}) != 1:
        raise ValueError(f"calls must hold one list per rank ({world_size}), all of one length")
    spec = {"world_size": world_size, "op_timeout": op_timeout}
    proxies: list[RemoteNotebook] = []
    results = [RankResult(rank, "ok") for rank in range(world_size)]
    try:
        for rank in range(world_size):
            rank_spec = {**spec, "rank": rank, "master": rank == 0, "port": proxies[0].session.port if rank else 0}
            proxy = RemoteNotebook(nb.origin, nb.text, nb.stem, nb.display, extra={"rank": rank_spec})
            proxy.use(nb.exercise)
            proxies.append(proxy)
            try:
                proxy._session()
            except Exception as exc:  # noqa: BLE001 - the notebook did not load in this rank
                results[rank] = RankResult(rank, *_rank_failure(exc))
                return results
        if measure:
            for proxy in proxies:
                Tree.of(proxy)  # raises Unmeasurable here, before the ranks join, not in their threads

        def run(rank: int):
            proxy = proxies[rank]
            try:
                proxy._ask("ranks", "joining the gloo group", name="join", timeout=timeout)
                for call in calls[rank]:
                    name, args, kwargs = call if len(call) == 3 else (function, *call)
                    with peak_memory(proxy) if measure else contextlib.nullcontext() as peak:
                        value = getattr(proxy, name)(*args, **kwargs)
                    sent = proxy._ask("ranks", "reading what the rank sent", name="counted")
                    results[rank].calls.append(CallResult(value, int(sent.get("bytes", 0)), int(sent.get("sends", 0)),
                                                          peak=peak))
                proxy._ask("ranks", "leaving the gloo group", name="finish", timeout=op_timeout + 10)
            except Exception as exc:  # noqa: BLE001 - reported per rank, as distlab does
                results[rank] = RankResult(rank, *_rank_failure(exc, op_timeout), calls=results[rank].calls)

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results
    finally:
        for proxy in proxies:
            proxy.close()


def _rank_failure(exc: BaseException, op_timeout: float = 0.0) -> tuple[str, str]:
    """``(status, message)`` of a rank whose call raised ``exc`` (:mod:`grading.ranks` names it)."""
    from grading.outcome import summary

    if isinstance(exc, ContestantTimedOut):
        return ranks.killed(str(exc))
    if isinstance(exc, ContestantCrashed):
        return ranks.crashed(str(exc))
    if isinstance(exc, NotImplementedError):
        return ranks.raised(str(exc), op_timeout, not_implemented=True)
    return ranks.raised(summary(exc, getattr(exc, "grading_where", "")), op_timeout, cause=str(exc))
