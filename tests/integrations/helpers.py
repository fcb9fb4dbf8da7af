"""Reading a run back with the consumers' own readers, for the framework driver tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata

import trainmon
from conftest import torchrun as run_torchrun

SCRIPTS = Path(__file__).parent.parent / "scripts"


def deepspeed_env() -> dict[str, str]:
    """The environment of a DeepSpeed script run in a subprocess: this interpreter's path, the
    CPU accelerator, and DeepSpeed's JIT ops cached where set-up built them."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), DS_ACCELERATOR="cpu")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
    return env


#: The step-time parts the drivers log, which must add up to no more than the step.
PARTS = (
    "perf/data_ms",
    "perf/forward_ms",
    "perf/backward_inner_ms",
    "perf/optimizer_ms",
    "perf/comm_ms",
)


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


def recorded_hparams(journal: Path, board: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The hyper-parameters as the journal holds them (its ``hparams`` records merged) and as
    TensorBoard's HParams dashboard reads them (the session-start plugin data)."""
    from_journal: dict[str, Any] = {}
    for record in trainmon.read_journal(journal):
        if record["kind"] == "hparams":
            from_journal.update(record["hparams"])
    acc = EventAccumulator(str(board))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")
    start = hparams_metadata.parse_session_start_info_plugin_data(
        content[hparams_metadata.SESSION_START_INFO_TAG]
    )
    from_board = {k: getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
    return from_journal, from_board


def torchrun(script: Path, nproc: int, *args: str, timeout: float = 180) -> str:
    """Run ``script`` under torchrun on loopback; its output (the run must exit with 0 and
    without the "terminate called" abort a leftover process group can cause at exit)."""
    result = run_torchrun(script, nproc, *args, timeout=timeout)
    output = result.stdout + result.stderr
    assert "terminate called" not in output, output
    return output
