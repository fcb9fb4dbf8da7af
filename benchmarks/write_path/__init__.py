"""What the write-path benchmarks share: the logging workload and its contenders.

``bench_write_path.py`` (trainmon against the libraries users would otherwise log with, side by
side), ``bench_write_breakdown.py`` (where trainmon's time goes), ``bench_write_tensors.py``
(0-d tensors are not read on the calling thread) and ``bench_write_memory.py`` (RSS while the
queue is full) all log the same 8 scalars per step from the same value table, so their figures
can be set side by side. Modules: ``workload`` (the step, the value rows, the per-sample clock),
``contenders`` (every way of logging a step, by key), ``deepspeed_style`` (a copy of DeepSpeed's
synchronous monitor), ``report`` (rows, the table, the targets). Measurement itself (rounds,
workers, statistics, tables) is ``harness``'s.
"""
