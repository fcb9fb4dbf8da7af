"""`trainmon validate` finds every mistake in one run and agrees with ``Monitor``: what one
refuses, the other refuses, on hand-picked configs and on generated ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trainmon
from trainmon.cli import main
from trainmon.cli.validate import refusals


def write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config))
    return path


def monitor_refuses(config: dict[str, Any]) -> bool:
    """Whether Monitor(config) raises ConfigError (a built monitor is closed at once)."""
    try:
        trainmon.Monitor(config).close()
    except trainmon.ConfigError:
        return True
    return False


def test_three_mistakes_in_three_sections_are_reported_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config with a bad top-level value, a bad section and a bad rule: one run, exit 2,
    each mistake with its key path."""
    config = {
        "steps_per_print": "often",
        "tensorboard": {"enabled": True, "output_pth": "x"},
        "alerts": {"rules": [{"name": "r", "metric": "train/loss", "op": ">"}]},
    }
    assert main(["validate", str(write(tmp_path / "c.json", config))]) == 2
    err = capsys.readouterr().err
    assert "refused, 3 mistakes" in err
    for path in ("'steps_per_print'", "'tensorboard.output_pth'", "alerts.rules[0]"):
        assert path in err, path


def test_a_url_given_as_a_section_is_redacted_in_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A section given as a URL string with credentials is quoted with them masked."""
    url = "https://alice:hunter2@example.com/x?access_token=s3cr3t"
    assert main(["validate", str(write(tmp_path / "c.json", {"tensorboard": url}))]) == 2
    err = capsys.readouterr().err
    assert "'tensorboard'" in err
    assert "hunter2" not in err and "s3cr3t" not in err and "alice" not in err
    with pytest.raises(trainmon.ConfigError) as refused:
        trainmon.Monitor({"tensorboard": url})
    assert "hunter2" not in str(refused.value) and "s3cr3t" not in str(refused.value)


WRITER_SPECS = {
    "good": {"class": "trainmon.testing:MemoryWriter"},
    "no module": {"class": "no_such_module_xyz:Writer"},
    "misspelt key": {"class": "trainmon.testing:MemoryWriter", "colour": "red"},
    "not a writer": {"class": "collections:OrderedDict"},
    "a function": {"class": "os.path:curdir"},
    "a function returning no writer": {"class": "json:dumps", "obj": 1},
}


@pytest.mark.parametrize("name", list(WRITER_SPECS))
def test_writer_entries_are_judged_alike(name: str, tmp_path: Path) -> None:
    """Each writers entry is refused by validate exactly when Monitor refuses it."""
    config = {"writers": [WRITER_SPECS[name]]}
    found = refusals(write(tmp_path / "c.json", config))
    assert bool(found) == monitor_refuses(config) == (name != "good"), found
    if found:
        assert all("writers[0]" in problem for problem in found)


def test_a_near_miss_section_is_a_validate_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'tensorbaord' makes validate exit 1 with the suggestion; Monitor only warns."""
    path = write(tmp_path / "c.json", {"tensorbaord": {"enabled": True}})
    assert main(["validate", str(path)]) == 1
    assert "did you mean 'tensorboard'?" in capsys.readouterr().out
    assert not monitor_refuses({"tensorbaord": {"enabled": True}})


values = st.one_of(
    st.integers(-3, 100), st.text(max_size=4), st.none(), st.booleans(), st.floats(-1, 5)
)
sections = st.fixed_dictionaries(
    {},
    optional={
        "enabled": st.booleans(),
        "job_name": st.one_of(st.text(min_size=1, max_size=5), st.integers()),
        "every": values,
        "output_pth": values,
    },
)
configs = st.fixed_dictionaries(
    {},
    optional={
        "steps_per_print": values,
        "csv_monitor": st.one_of(sections, values),
        "jsonl": st.one_of(sections, values),
        "trainmon": st.fixed_dictionaries(
            {}, optional={"queue_size": values, "close_timeout_s": values}
        ),
        "alerts": st.fixed_dictionaries(
            {},
            optional={
                "rules": st.lists(
                    st.fixed_dictionaries(
                        {"name": st.sampled_from(["a", "b"])},
                        optional={
                            "metric": st.sampled_from(["train/loss", ""]),
                            "op": st.sampled_from([">", "=>", None]),
                            "threshold": values,
                            "resolve_after": values,
                        },
                    ),
                    max_size=2,
                ),
                "sinks": st.just([]),
            },
        ),
        "writers": st.lists(st.sampled_from(list(WRITER_SPECS.values())), max_size=2),
    },
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=configs)
def test_validate_and_monitor_agree_on_generated_configs(
    config: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For any generated config, validate refuses it exactly when Monitor refuses it."""
    monkeypatch.chdir(tmp_path)
    for key in ("csv_monitor", "jsonl"):
        if isinstance(config.get(key), dict):
            config[key]["output_path"] = str(tmp_path / "out")
    config.setdefault("console", {"enabled": False})
    found = refusals(write(tmp_path / "c.json", config))
    assert bool(found) == monitor_refuses(config), (config, found)
