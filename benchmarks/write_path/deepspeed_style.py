"""A copy of DeepSpeed's monitor (``deepspeed/monitor``), as ``MonitorMaster`` runs it.

Why a copy: the write-path table compares trainmon with what a DeepSpeed user gets without it
(TensorBoard and CSV written synchronously on the training thread), and importing DeepSpeed
for it would start its accelerator and distributed set-up. The logic is kept as DeepSpeed has
it (an ``add_scalar`` per event and a flush per call; the CSV file opened per event).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path


class DeepSpeedStyleTensorBoard:
    """DeepSpeed's ``TensorBoardMonitor``: add_scalar per event, then flush per call."""

    def __init__(self, log_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        os.makedirs(log_dir, exist_ok=True)
        self.summary_writer = SummaryWriter(log_dir=log_dir)

    def write_events(
        self, event_list: Sequence[tuple[str, float, int]], flush: bool = True
    ) -> None:
        for event in event_list:
            self.summary_writer.add_scalar(*event)
        if flush:
            self.summary_writer.flush()


class DeepSpeedStyleCsv:
    """DeepSpeed's ``csvMonitor``: the file is opened with ``'a+'`` for every single event."""

    def __init__(self, log_dir: str) -> None:
        self.filenames: list[str] = []
        self.log_dir = log_dir
        os.makedirs(log_dir, exist_ok=True)

    def write_events(self, event_list: Sequence[tuple[str, float, int]]) -> None:
        for event in event_list:
            log_name = event[0]
            value = event[1]
            step = event[2]
            if "/" in log_name:
                record_splits = log_name.split("/")
                header = record_splits[len(record_splits) - 1]
            else:
                header = log_name
            filename = log_name.replace("/", "_").replace(" ", "_")
            fname = self.log_dir + "/" + filename + ".csv"
            with open(fname, "a+") as csv_monitor_file:
                csv_monitor_writer = csv.writer(csv_monitor_file)
                if filename not in self.filenames:
                    self.filenames.append(filename)
                    csv_monitor_writer.writerow(["step", header])
                csv_monitor_writer.writerow([step, value])


class DeepSpeedStyleMonitor:
    """DeepSpeed's ``MonitorMaster`` with tensorboard and csv_monitor enabled."""

    def __init__(self, folder: Path) -> None:
        self.tb_monitor = DeepSpeedStyleTensorBoard(str(folder / "ds_tb" / "bench"))
        self.csv_monitor = DeepSpeedStyleCsv(str(folder / "ds_csv" / "bench"))

    def write_events(self, event_list: Sequence[tuple[str, float, int]]) -> None:
        self.tb_monitor.write_events(event_list)
        self.csv_monitor.write_events(event_list)

    def close(self) -> None:
        self.tb_monitor.summary_writer.close()
