"""The core: the ``Monitor`` users hold, and the background pipeline behind it.

The training thread reaches only :mod:`~trainmon.monitor` (check, capture, enqueue);
everything else here runs on the pipeline's thread: resolve values, group them into steps,
aggregate windows, merge ranks, fan out to writers and observers.
"""
