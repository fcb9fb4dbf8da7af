"""Per-layer health: per-group norms measured at window ends by optimizer hooks, read back from
the journal and checked against norms the test computes itself; an injected blow-up in one
layer is named by the alert it causes."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import trainmon
from trainmon.collect.layer_stats import group_of


class Net(nn.Module):
    """Four blocks in a ModuleList and a head: groups blocks.0 .. blocks.3 and head."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x)


def _config(tmp_path: Path, rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "steps_per_print": 5,
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "alerts": {"rules": rules or [], "sinks": [{"type": "file"}]},
    }


def _journal(tmp_path: Path) -> dict[str, dict[int, float]]:
    values: dict[str, dict[int, float]] = {}
    for record in trainmon.read_journal(tmp_path / "job"):
        if record["kind"] == "scalars":
            for name, value in record["values"].items():
                values.setdefault(name, {})[record["step"]] = value
    return values


def _group_norm(tensors: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.detach().double().norm()) ** 2 for t in tensors))


def test_group_names_are_top_level_blocks_or_a_given_depth() -> None:
    """Container children keep their index (blocks.11), others their first name part."""
    assert group_of("blocks.11.attn.q.weight", None) == "blocks.11"
    assert group_of("fc1.weight", None) == "fc1"
    assert group_of("embed.weight", None) == "embed"
    assert group_of("blocks.11.attn.q.weight", 3) == "blocks.11.attn"


def test_norms_at_window_ends_match_the_tests_own_and_nothing_is_read_on_the_caller(
    tmp_path: Path,
) -> None:
    """At steps 5 and 10 (window ends) each group's grad norm (before the step), weight norm
    (after) and update ratio read back equal to the norms the test computes from the model; no
    other step has them; the calling thread reads no tensor value (.item/.tolist/.cpu)."""
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    groups = {f"blocks.{i}": list(model.blocks[i].parameters()) for i in range(4)}
    groups["head"] = list(model.head.parameters())
    expected: dict[int, dict[str, tuple[float, float, float]]] = {}
    caller = threading.get_ident()
    reads: list[str] = []
    original_item = torch.Tensor.item

    with trainmon.Monitor(_config(tmp_path)) as monitor:
        watcher = monitor.watch_layers(model, optimizer)
        assert watcher.groups == ["blocks.0", "blocks.1", "blocks.2", "blocks.3", "head"]
        x, y = torch.randn(32, 8), torch.randn(32, 1)
        for step in range(1, 11):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            grads = {g: _group_norm([p.grad for p in ps]) for g, ps in groups.items()}
            before = {g: [p.detach().clone() for p in ps] for g, ps in groups.items()}

            def spy(self: torch.Tensor) -> Any:
                if threading.get_ident() == caller:
                    reads.append("item")
                return original_item(self)

            torch.Tensor.item = spy  # type: ignore[method-assign]
            try:
                optimizer.step()
            finally:
                torch.Tensor.item = original_item  # type: ignore[method-assign]
            expected[step] = {
                g: (
                    grads[g],
                    _group_norm(list(ps)),
                    _group_norm([p - b for p, b in zip(ps, before[g], strict=True)])
                    / _group_norm(before[g]),
                )
                for g, ps in groups.items()
            }
            monitor.step = step
    assert reads == []
    journal = _journal(tmp_path)
    for group in groups:
        for suffix, index in (("grad_norm", 0), ("weight_norm", 1), ("update_ratio", 2)):
            got = journal[f"layers/{group}/{suffix}"]
            assert sorted(got) == [5, 10], (group, suffix, got)
            for step in (5, 10):
                assert got[step] == pytest.approx(expected[step][group][index], rel=1e-5)


def test_a_blow_up_in_one_layer_is_named_by_the_alert(tmp_path: Path) -> None:
    """At step 10 one layer's gradient is multiplied by 1000 (a blow-up in blocks.2 alone): the
    spike rule on train/grad_norm fires, and the alert (the file sink's line, as the report
    lists it) names blocks.2 first with its factor, against the measurement at step 5."""
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    blow_up = {"on": False}
    model.blocks[2].weight.register_hook(lambda g: g * 1000 if blow_up["on"] else g)
    rule = {
        "name": "grad-spike",
        "kind": "spike",
        "metric": "train/grad_norm",
        "factor": 5,
        "min_samples": 5,
    }
    received: list[Any] = []

    class Keep:
        def on_alert(self, alert: Any) -> None:
            received.append(alert)

    with trainmon.Monitor(_config(tmp_path, [rule])) as monitor:
        monitor.add_callback(Keep())
        monitor.watch_layers(model, optimizer)
        x, y = torch.randn(32, 8), torch.randn(32, 1)
        for step in range(1, 13):
            blow_up["on"] = step == 10
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), math.inf)
            optimizer.step()
            monitor.log({"train/loss": loss.detach(), "train/grad_norm": norm}, step=step)
            monitor.step = step
    firing = [a for a in received if a.state == "firing"]
    assert [a.step for a in firing] == [10]
    message = firing[0].message
    assert "grad norm led by blocks.2 (×" in message, message
    assert "(layers at step 10 vs 5)" in message
    layers = firing[0].details["layers"]
    assert layers[0]["group"] == "blocks.2" and layers[0]["grad_norm_factor"] > 100
    assert all(entry["grad_norm_factor"] < 100 for entry in layers[1:])
    lines = [
        json.loads(line) for line in (tmp_path / "job" / "alerts.jsonl").read_text().splitlines()
    ]
    filed = [line for line in lines if line["state"] == "firing"]
    assert filed[0]["message"] == message


def test_layer_stats_config_turns_it_on_in_trainmon_initialize(tmp_path: Path) -> None:
    """``"trainmon": {"layer_stats": true}`` makes trainmon.initialize's engine log the
    per-group metrics at window ends, at the engine's own steps."""
    torch.manual_seed(0)
    model = Net()
    config = {
        "train_batch_size": 8,
        "steps_per_print": 4,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "job"},
        "trainmon": {"layer_stats": True},
    }
    engine, *_ = trainmon.initialize(model=model, config=config)
    x, y = torch.randn(8, 8), torch.randn(8, 1)
    for _ in range(8):
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
    engine.monitor.close()
    journal = _journal(tmp_path)
    assert sorted(journal["layers/head/grad_norm"]) == [4, 8]
    assert sorted(journal["layers/blocks.0/update_ratio"]) == [4, 8]
    assert sorted(journal["train/loss"])[-1] == 8
