"""``trainmon.core.place``: rank discovery from launchers' environments, local and logging rank."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trainmon
from trainmon.core.place import (
    ProcessPlace,
    discover,
    local_rank,
    logging_rank,
    writes_on_rank,
)
from trainmon.errors import ConfigError


def test_rank_discovery_order() -> None:
    """Launcher variables are read in the documented order: torchrun, Open MPI, MPICH, Slurm."""
    assert discover({"RANK": "2", "WORLD_SIZE": "8", "SLURM_PROCID": "5"}) == ProcessPlace(2, 8)
    assert discover({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}) == ProcessPlace(
        1, 4
    )
    assert discover({"PMI_RANK": "3", "PMI_SIZE": "4"}) == ProcessPlace(3, 4)
    assert discover({"SLURM_PROCID": "5", "SLURM_NTASKS": "6"}) == ProcessPlace(5, 6)
    assert discover({}) == ProcessPlace(0, 1)


def test_discovery_skips_unusable_values() -> None:
    """A rank that is not a number falls through to the next launcher; a missing size is
    at least rank + 1."""
    assert discover({"RANK": "", "PMI_RANK": "1", "PMI_SIZE": "2"}) == ProcessPlace(1, 2)
    assert discover({"RANK": "x", "SLURM_PROCID": " 3 ", "SLURM_NTASKS": "8"}) == ProcessPlace(3, 8)
    assert discover({"RANK": "3"}) == ProcessPlace(3, 4)
    assert discover({"RANK": "3", "WORLD_SIZE": "many"}) == ProcessPlace(3, 4)


def test_local_rank_from_each_launcher() -> None:
    """The node-local rank of torchrun, Open MPI, MPICH and Slurm, first found wins; 0 unknown."""
    assert local_rank({"LOCAL_RANK": "1", "SLURM_LOCALID": "3"}) == 1
    assert local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "2"}) == 2
    assert local_rank({"MPI_LOCALRANKID": "5"}) == 5
    assert local_rank({"SLURM_LOCALID": "3"}) == 3
    assert local_rank({"LOCAL_RANK": "-1", "SLURM_LOCALID": "4"}) == 4
    assert local_rank({}) == 0


def test_logging_rank_and_who_writes() -> None:
    """ "last" is world_size - 1; a rank outside the job is refused, naming the key and size."""
    assert logging_rank("last", ProcessPlace(0, 4)) == 3
    assert logging_rank("last", ProcessPlace(0, 1)) == 0
    assert logging_rank(2, ProcessPlace(1, 4)) == 2
    with pytest.raises(ConfigError, match=r"'trainmon.log_rank' = 4: .* world size 4"):
        logging_rank(4, ProcessPlace(0, 4))
    assert writes_on_rank(ProcessPlace(3, 4), per_rank_output=False, log_rank=3)
    assert not writes_on_rank(ProcessPlace(0, 4), per_rank_output=False, log_rank=3)
    assert writes_on_rank(ProcessPlace(0, 4), per_rank_output=True, log_rank=3)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(-1, "expected an integer >= 0"), ("first", "expected an integer >= 0 or 'last'")],
)
def test_log_rank_config_is_checked(value: object, expected: str) -> None:
    with pytest.raises(ConfigError, match=rf"'trainmon.log_rank' = .*{expected}"):
        trainmon.load_config({"trainmon": {"log_rank": value}})


def test_monitor_writes_on_the_logging_rank_only(tmp_path: Path) -> None:
    """Only the rank named by trainmon.log_rank gets writers; a rank beyond the job is refused."""
    jsonl = {"enabled": True, "output_path": str(tmp_path), "job_name": "j"}
    config = {"jsonl": jsonl, "console": {"enabled": False}}
    last = {**config, "trainmon": {"log_rank": "last"}}
    with trainmon.Monitor(last, place=ProcessPlace(1, 2)) as monitor:
        assert [w.kind for w in monitor.writers] == ["jsonl"]
    with trainmon.Monitor(last, place=ProcessPlace(0, 2)) as monitor:
        assert monitor.writers == []
    with trainmon.Monitor(config, place=ProcessPlace(1, 2)) as monitor:
        assert monitor.writers == []
    with pytest.raises(ConfigError, match="'trainmon.log_rank' = 2"):
        trainmon.Monitor({**config, "trainmon": {"log_rank": 2}}, place=ProcessPlace(0, 2))


def test_place_is_a_leaf() -> None:
    """place.py imports nothing from trainmon but errors, so everyone may import it."""
    import trainmon.core.place

    tree = ast.parse(Path(trainmon.core.place.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert {m for m in imported if m.startswith("trainmon")} == {"trainmon.errors"}
