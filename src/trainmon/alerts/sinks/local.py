"""Sinks on this machine: the console (through the ``trainmon`` logger) and ``alerts.jsonl``."""

from __future__ import annotations

import logging
from pathlib import Path

from trainmon.alerts.delivery import AlertSink
from trainmon.alerts.formatting import (
    alert_title,
    json_bytes,
)
from trainmon.core.alert import Alert
from trainmon.logging import get_logger
from trainmon.writers.files import AppendFile

_console_log = get_logger("alerts")


class ConsoleSink(AlertSink):
    """One line per alert on stderr, through the ``trainmon`` logger (rank-stamped)."""

    kind = "console"

    def __init__(self) -> None:
        self.target = "trainmon logger"

    def deliver(self, alert: Alert) -> None:
        if alert.state == "resolved":
            level = logging.INFO
        else:
            level = logging.ERROR if alert.severity == "critical" else logging.WARNING
        _console_log.log(level, "ALERT %s: %s", alert_title(alert), alert.message)


class FileSink(AlertSink):
    """``alerts.jsonl``: one JSON object per alert (:meth:`Alert.as_dict`), append-only,
    each line handed to the OS whole so a killed process leaves whole lines."""

    kind = "file"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.target = str(path)
        self._file: AppendFile | None = None

    def deliver(self, alert: Alert) -> None:
        if self._file is None:
            self._file = AppendFile(self.path)
            if not self._file.ends_with_newline():
                self._file.write(b"\n")
        self._file.write(json_bytes(alert.as_dict()) + b"\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
