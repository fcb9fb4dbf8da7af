"""Copies of tensor values captured at the call, kept for the background thread in few objects.

Why: a call's copy (one small tensor) waits in the queue until the next drain, which in a
fast loop is tens of milliseconds, hundreds of calls. Tensors are objects the garbage
collector tracks; ones that outlive two young collections are promoted to the old generation,
and each full collection that follows scans every object of the process (torch alone holds
~170,000: ~0.1 s, on whichever thread allocates). A loop of 16 captured tensors a call set
one off every ~12,000 calls. Here a call's copy joins a short list that the caller folds into
one block tensor every :data:`FOLD_AT` calls, so that only a block per that many calls lives
long enough to be promoted; the queue entry holds the names and a key (plain strings and
numbers, which the collector stops tracking at its first look).

The background thread takes values in the order the calls were queued: a call puts its copy
here before its entry goes into the queue, so the copies of the entries a drain holds are
always here, at the head, in order.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from trainmon.core.events import Number

#: Calls whose copies are folded into one block (one ``torch.cat`` on the caller's thread).
FOLD_AT = 32


class _Stream:
    """One (dtype, number of dimensions)'s copies, in call order; changed under the store's
    lock only."""

    __slots__ = ("blocks", "dims", "loose", "read", "read_at")

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.loose: list[Any] = []  # the newest calls' copies, not folded yet
        self.blocks: deque[Any] = deque()  # folded copies (flat), oldest first
        self.read: list[Number] = []  # values taken out of blocks, not handed out yet
        self.read_at = 0


class CaptureStore:
    """Per-call copies of one dtype each, folded into blocks; read in call order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_kind: dict[tuple[Any, int], tuple[str, _Stream]] = {}  # (dtype, dims) ->
        self._streams: dict[str, _Stream] = {}  # key -> (the background reads by key)
        self._torch: Any = None

    def put(self, copy: Any, queue: deque[Any], entry: tuple[Any, ...]) -> None:
        """Keep a call's copy (a CPU tensor of the call's values, in order) and append
        ``(*entry, key)`` to ``queue``, the two under one lock: calls from several threads
        then keep one order in the store and in the queue (a call's values can never land in
        another call's entry)."""
        found = self._by_kind.get((copy.dtype, copy.dim()))
        key, stream = found if found is not None else self._add_stream(copy)
        lock = self._lock
        lock.acquire()
        try:
            loose = stream.loose
            loose.append(copy)
            queue.append((*entry, key))
            if len(loose) >= FOLD_AT:
                stream.blocks.append(self._joined(loose[:], stream.dims))
                loose.clear()
        finally:
            lock.release()

    def _add_stream(self, copy: Any) -> tuple[str, _Stream]:
        import torch

        self._torch = torch
        with self._lock:
            key = f"captured:{copy.dtype}:{copy.dim()}"
            stream = self._streams.setdefault(key, _Stream(copy.dim()))
            self._by_kind[(copy.dtype, copy.dim())] = (key, stream)
        return key, stream

    def _joined(self, copies: list[Any], dims: int) -> Any:
        torch = self._torch
        joined = torch.stack(copies) if dims == 0 else torch.cat(copies)
        return joined.reshape(-1)

    def take(self, key: str, count: int) -> list[Number]:
        """The next ``count`` values of ``key``'s stream, in call order (the background thread,
        the only reader): the blocks and copies needed are taken out under the lock, then
        joined and read in one ``tolist`` outside it (a caller never waits for that read)."""
        stream = self._streams[key]
        left = stream.read[stream.read_at :]
        have = len(left)
        taken: list[Any] = []
        with self._lock:
            kept = have + sum(block.numel() for block in stream.blocks)
            kept += sum(copy.numel() for copy in stream.loose)
            if kept < count:  # nothing taken: the values of later calls stay in their place
                raise LookupError(f"{key}: {count} values asked, {kept} captured")
            while have < count:
                if stream.blocks:
                    block = stream.blocks.popleft()
                    taken.append(block)
                    have += block.numel()
                else:
                    copies = stream.loose[:]
                    stream.loose.clear()
                    taken.append(copies)
                    have += sum(copy.numel() for copy in copies)
        if taken:
            parts = [p if type(p) is not list else self._joined(p, stream.dims) for p in taken]
            left.extend(_numbers(parts[0] if len(parts) == 1 else self._torch.cat(parts)))
        stream.read, stream.read_at = (left, count) if have > count else ([], 0)
        return left[:count] if have > count else left


def _numbers(block: Any) -> list[Number]:
    numbers: list[Any] = block.tolist()
    if numbers and type(numbers[0]) is bool:
        return [int(number) for number in numbers]
    return numbers
