"""Wrong readings of a statement, and the kind of mistake each names.

A check that fails knows *that* an answer is wrong. An *alternative* is what the
expected value would be under one wrong reading of the statement (query head ``h``
reading KV head ``h % H_kv`` where it should read ``h // G``); a wrong answer that equals
one is that kind of mistake, and the student reads the hint of its kind
(:data:`KINDS`). :func:`grading.compare.assert_close` takes alternatives; the diagnosis
(``grading.diagnosis``) reports the kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

# Set by the release's recording (``grading.judge.replay.start_recording``): every
# alternative is then computed on the solution too, so that the student edition holds its
# value and recognises the same mistakes from expected values alone.
RECORDING = False

KINDS = {
    "heads_grouped_modulo": (
        "Your query heads are grouped as h % H_kv: your result equals the expected one computed with "
        "query head h reading KV head h % H_kv, which is what `repeat` gives (or a reshape of the H heads "
        "as (G, H_kv)). Query head h reads KV head h // G: the G = H // H_kv consecutive query heads "
        "h = j*G .. j*G + G - 1 share KV head j, as `repeat_interleave` (or a reshape as (H_kv, G)) gives."),
    "percentile_interpolated": (
        "Your percentile is interpolated between the two values around it, as NumPy's default "
        "(`np.percentile`, `torch.quantile`) does: your result equals the expected one computed that way. "
        "The statement asks for the nearest rank: the k-th smallest value itself, k = ceil(p * n / 100)."),
    "eviction_tie_first_block": (
        "Among cached pages released at the same event, you evict the first block of a sequence before its "
        "last: your outcomes equal the expected ones with that tie broken the other way. The page holding "
        "the later block goes first (then the lower page id), so a prefix's shared head stays cached longest."),
}


@dataclass(frozen=True)
class Alternative:
    """What a check's expected value would be under one wrong reading of the statement,
    computed when the check fails (and when the release records its expected values):
    the mistake of kind ``kind`` is recognised when the wrong output equals it."""
    kind: str  # a key of KINDS
    compute: Callable[[], Any] = field(compare=False)
    key: Any = None  # the inputs' identity, to compute each alternative once per run

    def value(self):
        if self.key is None:
            return self.compute()
        if self.key not in _ALTERNATIVES:
            _ALTERNATIVES[self.key] = self.compute()
        return _ALTERNATIVES[self.key]


_ALTERNATIVES: dict = {}  # the proof fails one case with many bugs: each alternative once


def recognise(got, alternatives, agrees: Callable[[Any, Any], bool]) -> str | None:
    """The kind of the first alternative that ``got`` agrees with (the check's own
    comparison), or ``None``. An alternative that cannot be computed (the release holds
    no value for it; a reference that rejects the rearranged input) says nothing."""
    for alternative in alternatives:
        if alternative is None:
            continue
        try:
            expected = alternative.value()
            if agrees(got, expected):
                return alternative.kind
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # noqa: BLE001 - NotRecorded, pytest's skip of a replayed call
            continue
    return None


def record_alternatives(alternatives) -> None:
    """Under ``--record-expected`` (``make release``): compute every alternative now, on the
    solution, which fails no check, so that the release holds the reference's value for
    each and recognises the same kinds of mistake from expected values alone."""
    if not RECORDING:
        return
    for alternative in alternatives:
        if alternative is not None:
            alternative.value()


def group_modulo_order(H: int, H_kv: int) -> list[int]:
    """The order of the query heads under which the statement's grouping (query head
    ``h'`` reads KV head ``h' // G``) reads what ``h % H_kv`` reads: position
    ``j*G + i`` holds head ``i*H_kv + j``, whose ``h % H_kv`` is ``j``."""
    G = H // H_kv
    return [i * H_kv + j for j in range(H_kv) for i in range(G)]


def heads_grouped_modulo(reference: Callable, args: tuple, H: int, H_kv: int, heads: dict[int, int],
                         out_axis: int | None, key: Any = None) -> Alternative | None:
    """The alternative "query head h reads KV head h % H_kv" of a GQA exercise:
    ``reference(*args)`` with the query heads of each argument ``args[i]`` (its axis
    ``heads[i]``: q, and anything else given per query head) reordered by
    :func:`group_modulo_order`. An output per query head (on ``out_axis``) is put back in
    the heads' order; an output per KV head (``out_axis=None``, a group's joint choice)
    is already each group's under ``h % H_kv``. ``None`` where the two groupings are one
    (one KV head, or one query head per KV head)."""
    if H_kv <= 1 or H_kv >= H or H % H_kv:
        return None

    def compute():
        import torch

        order = torch.tensor(group_modulo_order(H, H_kv))
        moved = list(args)
        for i, axis in heads.items():
            moved[i] = args[i].index_select(axis, order)
        out = reference(*moved)
        return out if out_axis is None else out.index_select(out_axis, torch.argsort(order))

    return Alternative("heads_grouped_modulo", compute, None if key is None else ("heads_grouped_modulo", key))
