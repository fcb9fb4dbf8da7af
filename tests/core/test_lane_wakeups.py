"""Writes during one drain wake each writer's thread once, after the drain; a flush inside it
still reaches the writer at once (a checkpoint waits on it), and nothing is lost either way."""

from __future__ import annotations

import time

from trainmon.core.events import StepScalars
from trainmon.core.lanes import WriterLanes
from trainmon.testing import MemoryWriter


def _records(first: int, count: int) -> list[StepScalars]:
    return [
        StepScalars(step, time.time(), {"x": float(step)}) for step in range(first, first + count)
    ]


def _settled(writer: MemoryWriter, steps: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if len(writer.records) >= steps:
            return True
        time.sleep(0.005)
    return False


def test_writes_in_a_drain_reach_the_writer_after_it_and_all_of_them() -> None:
    writer = MemoryWriter()
    lanes = WriterLanes([writer], capacity=10_000)
    try:
        with lanes.coalesced_wakeups():
            for first in range(1, 60, 10):
                lanes.write(_records(first, 10))
            time.sleep(0.2)  # the lane's thread sleeps through the drain (its net is 1 s)
            assert writer.records == []
        assert _settled(writer, 60, within_s=0.5)  # woken at the end, not at its 1 s net
        assert [r.step for r in writer.records] == list(range(1, 61))
    finally:
        lanes.close()
        lanes.join(time.monotonic() + 5)


def test_a_flush_inside_a_drain_still_wakes_the_writer_at_once() -> None:
    writer = MemoryWriter()
    lanes = WriterLanes([writer], capacity=10_000)
    try:
        with lanes.coalesced_wakeups():
            lanes.write(_records(1, 5))
            barrier = lanes.barrier()
            lanes.flush(barrier)
            assert barrier.wait(time.monotonic() + 0.5, 0.5)
            assert [r.step for r in writer.flushed] == [1, 2, 3, 4, 5]
    finally:
        lanes.close()
        lanes.join(time.monotonic() + 5)


def test_a_lane_half_full_is_woken_during_the_drain() -> None:
    """A small lane is not left to fill (and drop) while a long drain goes on."""
    writer = MemoryWriter()
    lanes = WriterLanes([writer], capacity=10, when_full="drop")
    try:
        with lanes.coalesced_wakeups():
            lanes.write(_records(1, 4))
            time.sleep(0.2)
            assert writer.records == []  # 4 of 10: it sleeps on
            lanes.write(_records(5, 2))  # 6 of 10: woken now
            assert _settled(writer, 6, within_s=0.5)
        assert lanes.dropped_events == 0
    finally:
        lanes.close()
        lanes.join(time.monotonic() + 5)
