"""What each rank's calls returned: the records both launchers of ranks hand back.

``distlab.run_on_ranks`` (a reader's notebook, and the checks of the repository) and the
judge's ``grading.judge.run_ranks`` (graders, one contestant per rank) return the same
records, so a grader reads either alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CallResult:
    value: object = None  # what the function returned (tensors, tuples, numbers)
    bytes_sent: int = 0  # bytes of the tensors handed to torch.distributed.isend / send
    sends: int = 0  # how many tensors were sent
    seconds: float = 0.0  # wall time of the call in this rank (meaningless on a loaded 2-core machine)


@dataclass
class RankResult:
    rank: int
    status: str  # "ok", "not implemented", "error", "deadlock", "timeout", "crashed"
    message: str = ""
    calls: list[CallResult] = field(default_factory=list)
