"""What ``bench_engine.py`` is built from: its contenders, the host-read counter, its report.

``contenders`` (the model, the batches, the bare loops and the engines, one ``Contender``
each), ``host_reads`` (a ``TorchFunctionMode`` counting host reads and device syncs on the
training thread) and ``report`` (paired comparisons with their verdicts, the tables, the
projection to an MLP step, the JSON). Measurement itself (rounds, clocks, statistics, tables)
is ``harness``'s; the script runs the suites.
"""
