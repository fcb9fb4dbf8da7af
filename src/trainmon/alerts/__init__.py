"""Alerts: rules evaluated on the aggregated stream, a stall watchdog, and delivery sinks."""

from trainmon.alerts.model import Alert

__all__ = ["Alert"]
