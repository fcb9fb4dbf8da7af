"""Alerts: rules evaluated on the aggregated stream, a stall watchdog, and delivery sinks.

Rules are declared in the config's ``alerts`` section; :mod:`trainmon.alerts.rules` documents
the schema and each kind, :mod:`trainmon.alerts.engine` where rules are evaluated and where
alerts go, :mod:`trainmon.alerts.watchdog` the stall watchdog and its stack files.
"""

from trainmon.alerts.engine import AlertEngine, AlertSystem, build_alerts
from trainmon.alerts.watchdog import StallWatchdog
from trainmon.core.alert import Alert

__all__ = ["Alert", "AlertEngine", "AlertSystem", "StallWatchdog", "build_alerts"]
