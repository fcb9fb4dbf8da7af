"""trainmon: observable deep-learning training that never slows the training loop.

``import trainmon`` imports none of torch, tensorboard, wandb or prometheus_client; each backend
imports its SDK only when it is enabled.
"""

from trainmon.collect.instrument import StepInstrument
from trainmon.config import TrainmonConfig, load_config
from trainmon.core.aggregate import MetricStats, WindowStats
from trainmon.core.alert import Alert
from trainmon.core.callbacks import Callback
from trainmon.core.events import AttemptEnd, Histogram, Hparams, Progress, Span, StepScalars, Text
from trainmon.core.process import mark_start
from trainmon.core.writer import NullWriter, Writer
from trainmon.errors import ConfigError, MissingExtraError, TrainingStopped, TrainmonError
from trainmon.integrations.deepspeed import attach
from trainmon.integrations.engine import TrainmonEngine
from trainmon.integrations.initialize import initialize
from trainmon.journal import read_journal
from trainmon.monitor import Monitor
from trainmon.version import __version__

__all__ = [
    "Alert",
    "AttemptEnd",
    "Callback",
    "ConfigError",
    "Histogram",
    "Hparams",
    "MetricStats",
    "MissingExtraError",
    "Monitor",
    "NullWriter",
    "Progress",
    "Span",
    "StepInstrument",
    "StepScalars",
    "Text",
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
    "mark_start",
    "read_journal",
]
