"""What ``bench_deepspeed.py`` and ``bench_attach.py`` are built from.

``contenders``: the issue-25 harness's shape (the model, its batches, DeepSpeed's config and
the ``attach`` config of every contender) and :func:`~deepspeed_bench.contenders.one_rank_engine`
(one gloo rank and its engine). Measurement itself (rounds, clocks, statistics, tables) is
``harness``'s; the scripts run it.
"""
