"""What this process is doing in collectives, recorded cheaply for the hang diagnosis.

The comms instrumentation (:mod:`trainmon.collect.comms`) calls :meth:`CollectiveActivity.enter`
before each wrapped ``torch.distributed`` collective and :meth:`~CollectiveActivity.leave` when
the call returns; the stall watchdog reads :meth:`~CollectiveActivity.snapshot` from its own
thread when a rank stops stepping, and writes it with the stacks. A few attribute stores per
collective, no lock: a reader may see a half-updated entry for one call, which a snapshot
taken seconds into a hang never does.

Sequence numbers count this process's collectives per process group, from 1, so ranks that ran
the same collectives on a group agree on them: "ranks 0, 2 wait in all_reduce #1043".
For a CUDA collective, "left" means the call returned (the work is queued on the stream).
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["COLLECTIVES", "CollectiveActivity"]


class CollectiveActivity:
    """The last collective this process entered, per-group sequence numbers, and whether the
    call has returned."""

    __slots__ = ("_counts", "group", "inside", "left_at", "op", "seq", "since")

    def __init__(self) -> None:
        self.op: str | None = None
        self.seq = 0
        self.group = ""
        self.inside = False
        self.since = 0.0
        self.left_at = 0.0
        self._counts: dict[str, int] = {}

    def enter(self, op: str, group: str) -> None:
        """A collective ``op`` on ``group`` (a label such as ``"world"``) is being called."""
        seq = self._counts.get(group, 0) + 1
        self._counts[group] = seq
        self.inside = False
        self.op = op
        self.group = group
        self.seq = seq
        self.since = time.time()
        self.inside = True

    def leave(self) -> None:
        """The call of the last :meth:`enter` returned."""
        self.inside = False
        self.left_at = time.time()

    def snapshot(self) -> dict[str, Any] | None:
        """The last collective as a JSON-ready mapping, or None when none was recorded."""
        if self.op is None:
            return None
        return {
            "op": self.op,
            "seq": self.seq,
            "group": self.group,
            "inside": self.inside,
            "entered_at": self.since,
            "left_at": None if self.inside else self.left_at,
        }

    def reset(self) -> None:
        """Forget everything (tests; a new process group after a restart)."""
        self.__init__()  # type: ignore[misc]


#: This process's record, written by the comms wrappers and read by the stall watchdog.
COLLECTIVES = CollectiveActivity()
