"""Loading, scoring, drawing and writing in one call, shared by the CLI and the tests."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from .load import load_runs
from .metrics import RunMetrics, compute
from .page import render
from .plots import PLOT_NAMES, draw_all, load_matplotlib


@dataclass
class Report:
    """What build_report wrote, so callers can say it and tests can check it."""

    html_path: str
    metrics: List[RunMetrics]
    plots: bool  # False: matplotlib was unavailable and the page says so
    png_paths: List[str] = field(default_factory=list)


def _write_atomically(path: str, data: bytes) -> None:
    """Write beside the target and rename, so a reader never sees half a page.

    The temporary file is created with open(), not mkstemp, so it gets the umask's usual
    permissions (a report is meant to be shared, not 0600).
    """
    directory = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def build_report(results: Sequence[str], output: str = "report.html",
                 png_dir: Optional[str] = None, title: Optional[str] = None,
                 labels: Optional[Sequence[str]] = None, policy: str = "best") -> Report:
    """Read every results file, compute its metrics, draw the plots and write the page.

    Raises ResultsError for unreadable input. When matplotlib cannot be imported the page is
    still written (tables and numbers) and ``Report.plots`` is False; --png-dir then writes
    nothing. The caller reports that on stderr.
    """
    runs = load_runs(results, labels)
    metrics = [compute(run, policy) for run in runs]
    mpl = load_matplotlib()
    images: Optional[Dict[str, bytes]] = draw_all(mpl, metrics) if mpl is not None else None
    if title is None:
        title = ("KernelBench report: " + " vs ".join(m.run.label for m in metrics))
    page = render(metrics, output, title, images)
    _write_atomically(output, page.encode("utf-8"))
    report = Report(html_path=os.path.abspath(output), metrics=metrics, plots=images is not None)
    if png_dir is not None and images is not None:
        for name in PLOT_NAMES:
            path = os.path.join(png_dir, f"{name}.png")
            _write_atomically(path, images[name])
            report.png_paths.append(os.path.abspath(path))
    return report
