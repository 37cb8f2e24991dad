"""keval report: KernelBench-style results as one self-contained HTML page (and PNGs).

    python -m keval.report RESULTS... [-o report.html] [--png-dir DIR] [--title T]
        [--label NAME ...] [--samples best|first]

RESULTS are ``eval_results.json`` files (KernelBench's shape, with or without keval's fields)
or the directories holding them; several are compared side by side. The page embeds its plots
as data: URIs and refers to no other host, so it opens offline as one file. matplotlib draws
the plots and is optional (``pip install 'keval[report]'``); everything else is the standard
library. docs/report.md describes the sections and the metrics.
"""

from __future__ import annotations

from .load import ResultsError, Run, Sample, load_run, load_runs
from .metrics import RunMetrics, compute, fast_p, geometric_mean
from .report import Report, build_report

__all__ = ["Report", "ResultsError", "Run", "RunMetrics", "Sample", "build_report", "compute",
           "fast_p", "geometric_mean", "load_run", "load_runs"]
