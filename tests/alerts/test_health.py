"""A NaN is never silent: built-in checks warn with no rule, and a stop rule on a float loss
lands at the step that logged it."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import torch

import trainmon
from conftest import local_config


def nan_run(tmp_path: Path, **extra: object) -> None:
    """20 steps; train/loss is NaN from step 5 on, train/grad_norm infinite from step 7 on."""
    with trainmon.Monitor(local_config(tmp_path, **extra)) as monitor:
        for step in range(1, 21):
            loss = math.nan if step >= 5 else 1.0 / step
            norm = math.inf if step >= 7 else 2.0
            monitor.log({"train/loss": loss, "train/grad_norm": norm}, step=step)


def warnings_about(records: list[logging.LogRecord], metric: str) -> list[str]:
    """The trainmon warnings that name ``metric``."""
    return [
        r.getMessage()
        for r in records
        if r.levelno == logging.WARNING and r.getMessage().startswith(metric + " ")
    ]


def test_non_finite_loss_and_grad_norm_warn_once_with_no_rule(
    tmp_path: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """With no alert rule at all, one warning each names train/loss at its first NaN step and
    train/grad_norm at its first infinite step."""
    nan_run(tmp_path)
    (loss,) = warnings_about(trainmon_logs, "train/loss")
    (norm,) = warnings_about(trainmon_logs, "train/grad_norm")
    assert loss.startswith("train/loss is nan at step 5 ")
    assert norm.startswith("train/grad_norm is inf at step 7 ")


def test_health_checks_can_be_switched_off(
    tmp_path: Path, trainmon_logs: list[logging.LogRecord]
) -> None:
    """alerts.health_checks: false silences the built-in warnings."""
    nan_run(tmp_path, alerts={"health_checks": False})
    assert warnings_about(trainmon_logs, "train/loss") == []
    assert warnings_about(trainmon_logs, "train/grad_norm") == []


def stop_config(tmp_path: Path) -> dict[str, object]:
    rule = {"name": "nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}
    return local_config(tmp_path, alerts={"rules": [rule], "sinks": []})


def test_a_stop_on_a_float_loss_lands_at_the_step_that_logged_it(tmp_path: Path) -> None:
    """A non_finite stop rule judges a plain float at the call: a fast loop stops at the very
    step whose loss was NaN, not ~100 steps later when the background gets to it."""
    stopped_at = None
    with trainmon.Monitor(stop_config(tmp_path)) as monitor:
        for step in range(1, 2001):
            monitor.log({"train/loss": math.nan if step >= 50 else 1.0}, step=step)
            try:
                monitor.raise_if_stopped()
            except trainmon.TrainingStopped as stop:
                stopped_at = step
                assert "'nan': train/loss = NaN at step 50, not a finite number" in str(stop)
                break
    assert stopped_at == 50


def test_a_tensor_loss_still_stops_in_the_background(tmp_path: Path) -> None:
    """A tensor loss is judged in the background (no read on the training thread): the stop
    still comes, within a few steps of the NaN when steps take a moment."""
    import time

    stopped_at = None
    with trainmon.Monitor(stop_config(tmp_path)) as monitor:
        for step in range(1, 400):
            value = torch.tensor(math.nan if step >= 20 else 1.0)
            monitor.log({"train/loss": value}, step=step)
            time.sleep(0.005)
            if monitor.stop_reason is not None:
                stopped_at = step
                break
    assert stopped_at is not None and 20 <= stopped_at <= 60


@pytest.mark.parametrize("for_steps", [2])
def test_a_rule_that_needs_several_values_is_left_to_the_background(
    tmp_path: Path, for_steps: int
) -> None:
    """for_steps > 1 is judged in the background (it needs consecutive values): one NaN
    does not stop at the call."""
    rule = {"name": "nan", "metric": "train/loss", "kind": "non_finite", "action": "stop"}
    rule["for_steps"] = for_steps
    config = local_config(tmp_path, alerts={"rules": [rule], "sinks": []})
    with trainmon.Monitor(config) as monitor:
        monitor.log({"train/loss": math.nan}, step=1)
        assert monitor.stop_reason is None
