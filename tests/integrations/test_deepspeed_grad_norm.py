"""``trainmon.grad_norm_every`` under ``trainmon.attach`` on real DeepSpeed engines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from integrations.helpers import SCRIPTS, deepspeed_env, journal_steps

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of the grad-norm script; its output folder."""
    out = tmp_path_factory.mktemp("grad-norm")
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "deepspeed_grad_norm.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=deepspeed_env(),
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return out


def norm_steps(out: Path, case: str) -> list[int]:
    steps = journal_steps(out / case)
    assert sorted(s for s in steps if "train/loss" in steps[s]) == [1, 2, 3, 4, 5, 6, 7]
    return sorted(s for s, values in steps.items() if "train/grad_norm" in values)


@pytest.mark.parametrize(
    ("case", "steps", "computed"),
    [
        ("noclip_every1", [1, 2, 3, 4, 5, 6, 7], 7),
        ("noclip_every3", [3, 6], 2),  # trainmon's own norm: computed on those steps only
        ("noclip_never", [], 0),
        ("clip_every3", [3, 6], 0),  # DeepSpeed's clipping norm is kept, never recomputed
        ("zero1_every3", [3, 6], 0),  # the optimizer's norm
    ],
)
def test_grad_norm_every_logs_and_computes_only_the_steps_asked_for(
    run: Path, case: str, steps: list[int], computed: int
) -> None:
    assert norm_steps(run, case) == steps
    assert json.loads((run / "computed.json").read_text())[case] == computed
