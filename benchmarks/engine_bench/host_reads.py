"""Host reads and device synchronisation on the training thread, counted by caller.

Why: a step that reads a tensor on the host waits for the device; the engine promises none on
the training thread. A ``TorchFunctionMode`` filtered by thread id sees every Tensor method
called there (``item``, ``tolist``, ``cpu``, ...), and ``torch.cuda.synchronize`` is wrapped.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from engine_bench.contenders import Contender

#: Tensor methods that copy a value to the host (a device sync on an accelerator).
HOST_READS = frozenset(
    {
        "item",
        "tolist",
        "cpu",
        "numpy",
        "__float__",
        "__int__",
        "__index__",
        "__bool__",
        "__complex__",
        "__format__",
        "__repr__",
        "is_nonzero",
        "_local_scalar_dense",
    }
)
_SKIP_FRAMES = ("torch/overrides.py", "torch/_tensor.py", "torch/utils/_device.py")


def _where(path: str) -> str:
    for marker in ("site-packages/", "/src/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return os.path.basename(path)


class HostReadCounter(TorchFunctionMode):
    """Counts host reads made by one thread, by the function and the code that called it."""

    def __init__(self, thread_id: int) -> None:
        super().__init__()
        self.thread_id = thread_id
        self.calls: Counter[str] = Counter()

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = getattr(func, "__name__", "")
        if name in HOST_READS and threading.get_ident() == self.thread_id:
            self.calls[f"Tensor.{name} from {self._caller()}"] += 1
        return func(*args, **(kwargs or {}))

    @staticmethod
    def _caller() -> str:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.endswith(_SKIP_FRAMES):
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return "?"
        return f"{_where(frame.f_code.co_filename)}:{frame.f_code.co_name}"


@contextlib.contextmanager
def counting_syncs(counter: Counter[str], thread_id: int) -> Iterator[None]:
    """Count ``torch.cuda.synchronize`` calls of one thread (the module attribute is wrapped)."""
    original = torch.cuda.synchronize

    def synchronize(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == thread_id:
            counter["torch.cuda.synchronize"] += 1
        return original(*args, **kwargs)

    torch.cuda.synchronize = synchronize
    try:
        yield
    finally:
        torch.cuda.synchronize = original


def count_host_reads(
    contender: Contender, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], steps: int
) -> dict[str, int]:
    """Host reads and device syncs on the training thread during ``steps`` steps."""
    me = threading.get_ident()
    counter = HostReadCounter(me)
    with counting_syncs(counter.calls, me), counter:
        for i in range(steps):
            x, y = batches[i % len(batches)]
            contender.step(x, y)
    if contender.engine is not None:
        contender.engine.monitor.flush()  # the background thread's reads are not counted
    return dict(sorted(counter.calls.items()))
