"""Reading finished or running runs back: summaries, comparisons and the HTML report.

``load_run`` reads trainmon's JSONL journal or TensorBoard event folders (DeepSpeed's own
included); ``summarize`` computes the figures the terminal and the report show; ``write_report``
writes one self-contained HTML file with interactive charts. Nothing here imports torch or
tensorboard.
"""

from trainmon.report.downsample import DEFAULT_BUCKETS, minmax_buckets
from trainmon.report.html import render_report, write_report
from trainmon.report.loading import load_run
from trainmon.report.model import FAMILIES, Run, RunError, Series, family, role
from trainmon.report.summary import KeyRow, MetricSummary, RunSummary, compare, summarize

__all__ = [
    "DEFAULT_BUCKETS",
    "FAMILIES",
    "KeyRow",
    "MetricSummary",
    "Run",
    "RunError",
    "RunSummary",
    "Series",
    "compare",
    "family",
    "load_run",
    "minmax_buckets",
    "render_report",
    "role",
    "summarize",
    "write_report",
]
