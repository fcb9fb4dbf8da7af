"""Reading a run back with the consumers' own readers, for the framework driver tests."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import trainmon

SCRIPTS = Path(__file__).parent.parent / "scripts"


def journal_steps(folder: Path) -> dict[int, dict[str, Any]]:
    """Every step's values in the JSONL journal (several lines of one step merged)."""
    steps: dict[int, dict[str, Any]] = {}
    for record in trainmon.read_journal(folder):
        if record["kind"] == "scalars":
            steps.setdefault(record["step"], {}).update(record["values"])
    return steps


def tensorboard_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` as TensorBoard's own reader sees it."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {
        tag: {event.step: event.value for event in acc.Scalars(tag)}
        for tag in acc.Tags()["scalars"]
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(script: Path, nproc: int, *args: str, timeout: float = 180) -> str:
    """Run ``script`` under torchrun on loopback; its output (the run must exit with 0)."""
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
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "terminate called" not in output, output
    return output
