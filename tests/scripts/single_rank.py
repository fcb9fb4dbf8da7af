"""The environment of one gloo rank on the CPU, for the DeepSpeed test scripts run alone.

Call :func:`set_env` before importing deepspeed: a script started without a launcher gets
rank 0 of 1 on loopback with a free port; under torchrun the launcher's values win.
"""

from __future__ import annotations

import os
import socket


def set_env() -> None:
    for key, value in (
        ("MASTER_ADDR", "127.0.0.1"),
        ("RANK", "0"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("DS_ACCELERATOR", "cpu"),
    ):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:  # alone: any free port on loopback
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
