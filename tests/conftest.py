"""Shared fixtures: configs pointing every writer into a temporary folder."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def local_config(base: Path, **extra: Any) -> dict[str, Any]:
    """A DeepSpeed-style config with TensorBoard, CSV and JSONL under ``base``, console off."""
    config: dict[str, Any] = {
        "train_batch_size": 64,
        "steps_per_print": 50,
        "tensorboard": {"enabled": True, "output_path": str(base / "tb"), "job_name": "job"},
        "csv_monitor": {"enabled": True, "output_path": str(base / "csv"), "job_name": "job"},
        "jsonl": {"enabled": True, "output_path": str(base), "job_name": "job"},
        "console": {"enabled": False},
    }
    config.update(extra)
    return config


@pytest.fixture(autouse=True)
def run_starts_with_the_test() -> None:
    """A test session hosts many runs in one process: each test's first run starts its
    goodput clock at the test (``trainmon.mark_start``), not at the session's start."""
    import trainmon

    trainmon.mark_start()


@pytest.fixture
def trainmon_logs() -> Iterator[list[logging.LogRecord]]:
    """Records the ``trainmon`` logger emits (it does not propagate to the root logger)."""
    records: list[logging.LogRecord] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = _Keep(level=logging.DEBUG)
    logger = logging.getLogger("trainmon")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


#: What reads a tensor's value on the host (a sync on a GPU): none of it may run on the caller.
HOST_READS = frozenset({"item", "tolist", "cpu", "__float__", "numpy", "to"})


def host_read_spy(extra: frozenset[str] = frozenset()) -> tuple[type, list[str]]:
    """A ``torch.Tensor`` subclass (use ``t.as_subclass(Spy)``) and the list of the value reads
    (:data:`HOST_READS` plus ``extra``) it records when they run on the thread that called this."""
    import threading

    import torch

    caller = threading.get_ident()
    reads = HOST_READS | extra
    seen: list[str] = []

    class Spy(torch.Tensor):
        @classmethod
        def __torch_function__(
            cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            name = getattr(func, "__name__", str(func))
            if name in reads and threading.get_ident() == caller:
                seen.append(name)
            return super().__torch_function__(func, types, args, kwargs or {})

    return Spy, seen


def printed_objects(stdout: str) -> list[Any]:
    """The JSON objects that worker processes printed, one per ``print``: ranks share one pipe,
    so two objects may arrive glued on one line (``{...}{...}``); each is decoded on its own."""
    import json

    decode = json.JSONDecoder().raw_decode
    found: list[Any] = []
    for line in stdout.splitlines():
        at = 0
        while line.startswith("{", at):
            value, at = decode(line, at)
            found.append(value)
            while line.startswith(" ", at):
                at += 1
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(
    script: Path, nproc: int, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` under torchrun with ``nproc`` CPU processes on loopback."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(script),
        *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def load_docs_hooks() -> Any:
    """The MkDocs hook module (scripts/docs_hooks.py) that renders the config reference page."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "scripts" / "docs_hooks.py"
    spec = importlib.util.spec_from_file_location("docs_hooks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
