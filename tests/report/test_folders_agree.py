"""Every reader tells the same truth: one run written to the journal, TensorBoard and CSV
reads back with the same step count, range, alert count and hyper-parameters from each folder
(DeepSpeed's CSV layout has no place for hyper-parameters: a CSV folder has none)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.cli import main

STEPS = 40
HOT = range(10, 16)  # train/loss above the threshold: one firing at 10, one resolve at 16
#: every kind of value log_hparams stores: float, int, bool, string, None, nested
HPARAMS = {"optimizer": {"lr": 3e-4, "name": "adamw"}, "batch": 32, "amp": True, "seed": None}
#: as every reader shows them (flat keys; None stored as "None"); TensorBoard's 32.0 is 32
SHOWN = {
    "amp": "True",
    "batch": "32",
    "optimizer.lr": "0.0003",
    "optimizer.name": "adamw",
    "seed": "None",
}


@pytest.fixture(scope="module")
def three_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One run with TensorBoard, CSV and the journal, and a rule that fires and resolves."""
    out = tmp_path_factory.mktemp("agree")
    config = {
        "steps_per_print": 10,
        "console": {"enabled": False},
        "tensorboard": {"enabled": True, "output_path": str(out / "tb"), "job_name": "job"},
        "csv_monitor": {"enabled": True, "output_path": str(out / "csv"), "job_name": "job"},
        "jsonl": {"enabled": True, "output_path": str(out), "job_name": "job"},
        "alerts": {
            "rules": [
                {
                    "name": "hot",
                    "metric": "train/loss",
                    "op": ">",
                    "threshold": 1.0,
                    "resolve_after": 1,
                }
            ],
            "sinks": [{"type": "file"}],
        },
    }
    with trainmon.Monitor(config) as monitor:
        monitor.log_hparams(HPARAMS)
        for step in range(1, STEPS + 1):
            loss = 2.0 if step in HOT else 0.5
            monitor.log({"train/loss": loss, "perf/samples_per_sec": 100.0}, step=step)
    return {"journal": out / "job", "tensorboard": out / "tb" / "job", "csv": out / "csv" / "job"}


def summary(folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["summary", str(folder), "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize("kind", ["journal", "tensorboard", "csv"])
def test_summary_gives_the_same_figures_from_every_folder(
    three_folders: dict[str, Path], kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Steps, range and alerts fired are the journal's, whichever folder is read: the alert
    is derived from the alerts/hot series where the folder has no alerts.jsonl."""
    got = summary(three_folders[kind], capsys)
    assert (got["steps"], got["first_step"], got["last_step"]) == (STEPS, 1, STEPS)
    assert got["alerts"]["fired"] == 1, got["alerts"]
    assert got["alerts"]["resolved"] == 1


def test_compare_on_two_tensorboard_folders_counts_the_alert(
    three_folders: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """compare on TensorBoard folders shows the alert that fired (not 0)."""
    folder = three_folders["tensorboard"]
    assert main(["compare", str(folder), str(folder)]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "alerts fired" in ln]
    assert line.split()[2:4] == ["1", "1"], line


def test_a_samples_axis_does_not_stretch_the_step_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder holding trainmon's step-axis metrics and DeepSpeed's Train/Samples/* (x =
    samples) counts and ranges steps from the step axis only."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step in range(1, 11):
        writer.add_scalar("train/loss", 1.0 / step, step)
        writer.add_scalar("Train/Samples/lr", 0.1, step * 64)
    writer.close()
    got = summary(tmp_path, capsys)
    assert (got["steps"], got["first_step"], got["last_step"]) == (10, 1, 10)


def hparams_table(out: str) -> dict[str, tuple[str, str]]:
    """The rows of compare's "hyper-parameters that differ" table: key -> (A, B)."""
    lines = out.splitlines()
    if not any(line.startswith("hyper-parameters that differ") for line in lines):
        return {}
    start = next(i for i, line in enumerate(lines) if line.startswith("hyper-parameter "))
    rows = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        key, a, b = line.split()
        rows[key] = (a, b)
    return rows


def other_run(tmp_path: Path) -> Path:
    """A journal whose hyper-parameters are all different keys from the fixture's."""
    config = {
        "console": {"enabled": False},
        "jsonl": {"enabled": True, "output_path": str(tmp_path), "job_name": "other"},
    }
    with trainmon.Monitor(config) as monitor:
        monitor.log_hparams({"other": 1})
        monitor.log({"train/loss": 1.0}, step=1)
    return tmp_path / "other"


@pytest.mark.parametrize("kind", ["journal", "tensorboard"])
def test_compare_shows_the_logged_hyper_parameters_from_the_folder(
    three_folders: dict[str, Path], kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Compared with a run of other hyper-parameters, a journal or TensorBoard folder shows
    every value log_hparams was given (TensorBoard's from its HParams plugin summaries), not
    "-"."""
    assert main(["compare", str(three_folders[kind]), str(other_run(tmp_path))]) == 0
    rows = hparams_table(capsys.readouterr().out)
    mine = {key: a.removesuffix(".0") for key, (a, b) in rows.items() if b == "-"}
    assert mine == SHOWN
    assert rows["other"] == ("-", "1")


@pytest.mark.parametrize(("a", "b"), [("journal", "tensorboard"), ("tensorboard", "journal")])
def test_journal_and_tensorboard_folders_have_the_same_hyper_parameters(
    three_folders: dict[str, Path], a: str, b: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """compare of a run's journal with its TensorBoard folder finds no hyper-parameter that
    differs (32 in the journal is 32.0 in TensorBoard: the same number), in text and JSON."""
    args = ["compare", str(three_folders[a]), str(three_folders[b])]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "hyper-parameters that differ" not in out, out
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hparams"] == []


def test_a_csv_folder_has_no_hyper_parameters(
    three_folders: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """DeepSpeed's csv_monitor layout (one step,value file per metric) holds no
    hyper-parameters: compare with the journal lists each as logged there and "-" here."""
    assert main(["compare", str(three_folders["journal"]), str(three_folders["csv"])]) == 0
    rows = hparams_table(capsys.readouterr().out)
    assert {key: b for key, (_, b) in rows.items()} == dict.fromkeys(SHOWN, "-")
    assert not any(p.name.startswith("hparams") for p in three_folders["csv"].iterdir())


def test_the_report_of_a_tensorboard_folder_lists_the_hyper_parameters(
    three_folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """trainmon report on the TensorBoard folder has the hyper-parameters table."""
    page = tmp_path / "report.html"
    assert main(["report", str(three_folders["tensorboard"]), "-o", str(page)]) == 0
    html = page.read_text()
    section = html[html.index('<section id="hparams">') :]
    section = section[: section.index("</section>")]
    assert "Hyper-parameters (5)" in section
    for key in SHOWN:
        assert f"<td>{key}</td>" in section


def test_hparams_of_torch_add_hparams_are_read_with_and_without_protobuf(tmp_path: Path) -> None:
    """torch's SummaryWriter.add_hparams (another writer of the HParams plugin) reads back too,
    and trainmon's hand decoder gives what TensorBoard's own protos give."""
    from tensorboard.plugins.hparams import plugin_data_pb2
    from torch.utils.tensorboard import SummaryWriter

    from trainmon.report.hparams import decode_by_hand, read_hparams
    from trainmon.report.loading import load_run
    from trainmon.report.tfevents import EventFileReader, is_event_file

    writer = SummaryWriter(str(tmp_path))
    writer.add_hparams({"lr": 0.1, "bsize": 8, "opt": "sgd", "amp": False}, {"hp/acc": 0.9})
    writer.close()
    run = load_run(tmp_path)
    assert run.hparams == {"lr": 0.1, "bsize": 8.0, "opt": "sgd", "amp": False}
    reader = EventFileReader()
    for path in sorted(tmp_path.rglob("*")):
        if is_event_file(path):
            reader.read(path)
    contents = reader.result.hparams_data
    assert len(contents) == 3  # experiment, session_start_info, session_end_info
    assert [decode_by_hand(c) for c in contents] == [{}, run.hparams, {}]
    protos = plugin_data_pb2.HParamsPluginData.FromString(contents[1]).session_start_info
    by_protos = {
        key: getattr(value, value.WhichOneof("kind")) for key, value in protos.hparams.items()
    }
    assert by_protos == run.hparams
    notes: list[str] = []
    assert read_hparams([b"\x1a\xff", *contents], notes) == run.hparams
    assert notes == ["skipped 1 unreadable TensorBoard hparams summary(ies)"]


def test_an_int_and_the_same_float_are_the_same_hyper_parameter() -> None:
    """TensorBoard holds numbers as doubles: 32 and 32.0 do not differ; a bool, a string or
    another number still does."""
    from trainmon.core.records import hparam_differences

    journal = {"batch": 32, "amp": True, "name": "3", "lr": 1}
    board = {"batch": 32.0, "amp": 1.0, "name": 3.0, "lr": 1.5}
    assert hparam_differences([journal, board]) == ["amp", "lr", "name"]
