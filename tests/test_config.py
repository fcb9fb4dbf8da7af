"""Config loading: DeepSpeed configs accepted as-is, trainmon's sections checked strictly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trainmon
from conftest import load_docs_hooks
from trainmon.config import TrainmonConfig, load_config, reference_rows

DEEPSPEED_CONFIG = {
    "train_batch_size": 64,
    "steps_per_print": 50,
    "wall_clock_breakdown": True,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
    "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
    "fp16": {"enabled": True},
    "tensorboard": {"enabled": True, "output_path": "./logs/tb", "job_name": "ds-monitor-demo"},
    "wandb": {"enabled": True, "project": "llm-training", "group": "zero3"},
    "csv_monitor": {"enabled": True, "output_path": "./logs/csv", "job_name": "ds-monitor-demo"},
}


def test_full_deepspeed_config_is_accepted_and_unknown_keys_kept() -> None:
    """Keys trainmon does not own are kept in ``raw`` and do not cause errors."""
    config = load_config(DEEPSPEED_CONFIG)
    assert config.steps_per_print == 50
    assert config.wall_clock_breakdown is True
    assert config.tensorboard.job_dir() == Path("./logs/tb/ds-monitor-demo")
    assert config.wandb.group == "zero3"
    assert config.raw["zero_optimization"]["stage"] == 3


def test_deepspeed_defaults() -> None:
    """Defaults match DeepSpeed: job name, empty output path meaning the current folder."""
    config = load_config({"tensorboard": {"enabled": True}})
    assert config.tensorboard.job_name == "DeepSpeedJobName"
    assert config.tensorboard.output_path == ""
    assert config.tensorboard.job_dir() == Path("DeepSpeedJobName")
    assert config.steps_per_print == 10
    assert config.jsonl.enabled is False


def test_unknown_key_names_path_and_suggests() -> None:
    """A typo inside an owned section names the full path and the closest valid key."""
    with pytest.raises(trainmon.ConfigError) as err:
        load_config({"tensorboard": {"enabled": True, "output_pth": "x"}})
    message = str(err.value)
    assert "'tensorboard.output_pth'" in message
    assert "did you mean 'output_path'?" in message


def test_wrong_type_names_value_and_expected_type() -> None:
    """A wrong type names the key path, the bad value and the expected type."""
    with pytest.raises(trainmon.ConfigError) as err:
        load_config({"csv_monitor": {"enabled": "yes"}})
    assert "'csv_monitor.enabled' = 'yes': expected a boolean" in str(err.value)
    with pytest.raises(
        trainmon.ConfigError, match=r"'steps_per_print' = '50': expected an integer"
    ):
        load_config({"steps_per_print": "50"})
    with pytest.raises(trainmon.ConfigError, match="expected an integer >= 1"):
        load_config({"steps_per_print": 0})


def test_grad_norm_every_defaults_to_every_step_and_refuses_bad_values() -> None:
    """``trainmon.grad_norm_every``: 1 by default, 0 turns it off, a bad value names the key."""
    assert load_config({}).trainmon.grad_norm_every == 1
    assert load_config({"trainmon": {"grad_norm_every": 0}}).trainmon.grad_norm_every == 0
    for bad in (-1, 2.5, "10", True):
        with pytest.raises(trainmon.ConfigError) as err:
            load_config({"trainmon": {"grad_norm_every": bad}})
        assert f"'trainmon.grad_norm_every' = {bad!r}: expected an integer >= 0" in str(err.value)


def test_section_must_be_a_mapping() -> None:
    """A section given as a scalar is refused with the keys it should hold."""
    with pytest.raises(trainmon.ConfigError, match="'jsonl' = True: expected a mapping"):
        load_config({"jsonl": True})


def test_choice_suggests_the_closest_option() -> None:
    """A misspelt choice lists the options and suggests one."""
    with pytest.raises(trainmon.ConfigError, match="did you mean 'drop'"):
        load_config({"trainmon": {"when_full": "dorp"}})


@pytest.mark.parametrize("job_name", ["../escape", "/abs", "a/../../b", "a\x00b", ""])
def test_job_name_cannot_escape_output_path(job_name: str) -> None:
    """A job name that could place files outside output_path is refused, naming the key."""
    with pytest.raises(trainmon.ConfigError, match="'tensorboard.job_name'"):
        load_config({"tensorboard": {"job_name": job_name}})


def test_json_and_yaml_files(tmp_path: Path) -> None:
    """A config file path works for JSON and YAML and gives the same config."""
    json_path = tmp_path / "ds.json"
    json_path.write_text(json.dumps(DEEPSPEED_CONFIG))
    yaml_path = tmp_path / "ds.yaml"
    yaml_path.write_text(
        "train_batch_size: 64\nsteps_per_print: 50\nwall_clock_breakdown: true\n"
        "tensorboard: {enabled: true, output_path: ./logs/tb, job_name: ds-monitor-demo}\n"
        "wandb: {enabled: true, project: llm-training, group: zero3}\n"
        "csv_monitor: {enabled: true, output_path: ./logs/csv, job_name: ds-monitor-demo}\n"
    )
    from_json, from_yaml = load_config(json_path), load_config(str(yaml_path))
    assert from_json == from_yaml
    assert from_yaml.csv_monitor.enabled is True


def test_bad_files_are_clear_errors(tmp_path: Path) -> None:
    """Missing, unparsable and non-mapping files each give a ConfigError naming the file."""
    with pytest.raises(trainmon.ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(trainmon.ConfigError, match="could not be parsed"):
        load_config(broken)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(trainmon.ConfigError, match="mapping at the top level"):
        load_config(listing)


def test_config_object_passes_through() -> None:
    """A TrainmonConfig is used as it is; anything else is a clear error."""
    config = TrainmonConfig()
    assert load_config(config) is config
    with pytest.raises(trainmon.ConfigError, match="got int"):
        load_config(3)  # type: ignore[arg-type]


def test_numbers_accept_ints_where_floats_expected() -> None:
    """An integer is a valid number of seconds; a negative interval is refused."""
    assert load_config({"trainmon": {"flush_interval_s": 2}}).trainmon.flush_interval_s == 2.0
    with pytest.raises(trainmon.ConfigError, match="'trainmon.flush_interval_s'"):
        load_config({"trainmon": {"flush_interval_s": -1}})


def test_reference_rows_cover_every_section() -> None:
    """The config reference table lists every key of every section with a description."""
    keys = {row[0] for row in reference_rows()}
    assert {"steps_per_print", "tensorboard.output_path", "jsonl.job_name"} <= keys
    assert all(row[3] for row in reference_rows())


def test_config_page_table_matches_the_config() -> None:
    """The docs' config page renders exactly the table generated from the config dataclasses."""
    page = (Path(__file__).parent.parent / "docs" / "config.md").read_text()
    table = load_docs_hooks().on_page_markdown(page, page=None)
    for key, kind, default, doc in reference_rows():
        assert f"| `{key}` | {kind} | `{default}` | {doc} |" in table
