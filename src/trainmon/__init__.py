"""trainmon: observable deep-learning training that never slows the training loop.

``import trainmon`` imports none of torch, tensorboard, wandb or prometheus_client; each backend
imports its SDK only when it is enabled.
"""

from trainmon.aggregate import MetricStats, WindowStats
from trainmon.alerts.model import Alert
from trainmon.callbacks import Callback
from trainmon.config import TrainmonConfig, load_config
from trainmon.engine import TrainmonEngine, initialize
from trainmon.errors import ConfigError, MissingExtraError, TrainingStopped, TrainmonError
from trainmon.events import StepScalars
from trainmon.integrations.deepspeed import attach
from trainmon.journal import read_journal
from trainmon.monitor import Monitor
from trainmon.version import __version__
from trainmon.writers.base import NullWriter, Writer

__all__ = [
    "Alert",
    "Callback",
    "ConfigError",
    "MetricStats",
    "MissingExtraError",
    "Monitor",
    "NullWriter",
    "StepScalars",
    "TrainingStopped",
    "TrainmonConfig",
    "TrainmonEngine",
    "TrainmonError",
    "WindowStats",
    "Writer",
    "__version__",
    "attach",
    "initialize",
    "load_config",
    "read_journal",
]
