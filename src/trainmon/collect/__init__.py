"""The producers: what measures a training step and hands the numbers to the ``Monitor``.

Timers, device-event spans, memory / loss / gradient-norm probes, throughput and MFU, the
collectives logger, per-layer statistics, and the per-step :mod:`~trainmon.collect.instrument`
component every driver feeds. They emit through ``Monitor.emit_checked`` and never format or
write anything themselves.
"""
