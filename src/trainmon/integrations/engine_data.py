"""The engine's data side: a DataLoader whose waits are timed as ``perf/data_ms`` (the only
data wait the engine reports: the gap after ``step()`` is ``perf/between_steps_ms``)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, Protocol

from trainmon.collect.instrument import StepInstrument


class TimedSource(Protocol):
    """What a timed loader needs of the engine it feeds."""

    instrument: StepInstrument

    def note_loader_timed(self) -> None:
        """The engine's own loader times the waits: log them as ``perf/data_ms``."""


class _TimedIterator:
    """Wraps a DataLoader iterator: the wait for each batch is added to the engine's data time."""

    __slots__ = ("_engine", "_iterator")

    def __init__(self, iterator: Iterator[Any], engine: TimedSource) -> None:
        self._iterator = iterator
        self._engine = engine

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        engine = self._engine
        engine.note_loader_timed()
        instrument = engine.instrument
        instrument.data_begin()
        try:
            return next(self._iterator)
        finally:
            instrument.data_end()

    def __len__(self) -> int:
        return len(self._iterator)  # type: ignore[arg-type]


@functools.cache
def timed_loader_class() -> type:
    """The DataLoader subclass, defined on first use so ``import trainmon`` needs no torch."""
    from torch.utils.data import DataLoader

    class TimedDataLoader(DataLoader):  # type: ignore[type-arg]
        """A DataLoader whose iterators report the wait for each batch to the engine."""

        def __init__(self, *args: Any, trainmon_engine: TimedSource, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.trainmon_engine = trainmon_engine

        def __iter__(self) -> Any:
            return _TimedIterator(super().__iter__(), self.trainmon_engine)

    return TimedDataLoader


def is_data_parallel(module: Any) -> bool:
    """True for modules that average gradients themselves (DDP, FSDP)."""
    names = {cls.__name__ for cls in type(module).__mro__}
    return bool(names & {"DistributedDataParallel", "FullyShardedDataParallel"})
