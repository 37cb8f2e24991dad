"""The report's plots, drawn with matplotlib's Agg canvas into PNG bytes.

matplotlib is optional (``pip install 'keval[report]'``): without it the page keeps every table
and number and says, where each plot would be, how to get the plots. Figures are made with
``matplotlib.figure.Figure`` and the Agg canvas directly, never pyplot, so no GUI backend, global
state or display is involved and the PNGs are the same on a headless machine.
"""

from __future__ import annotations

import io
import math
from typing import Any, Dict, List, Optional, Sequence

from .metrics import CORRECT, RunMetrics, verdict_order


def _plain_log_ticks(ax: Any) -> None:
    """Speedups read as 0.5, 1, 2, not 5x10^-1: plain numbers on the major ticks, and no labels
    on the minor ones (over a narrow range matplotlib labels those too, and they overlap)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())

NO_MATPLOTLIB = "plots need matplotlib: pip install 'keval[report]'"

#: Colour-blind-safe palette (Okabe-Ito) for runs; verdicts get their own fixed colours.
RUN_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000",
               "#F0E442")
VERDICT_COLOURS = {
    CORRECT: "#2e9e44",
    "correctness": "#e8a33d",
    "compile": "#d64541",
    "runtime": "#9b59b6",
    "timeout": "#3b7dd8",
    "infrastructure": "#7f8c8d",
    "bad_request": "#34495e",
    "missing_generation": "#c8c8c8",
    "missing_from_results": "#e0e0e0",
}
OTHER_COLOURS = ("#8c564b", "#bcbd22", "#17becf", "#f7b6d2", "#c49c94")

PLOT_NAMES = ("fast_p", "speedup_histogram", "verdicts_by_level")


def load_matplotlib() -> Optional[Any]:
    """matplotlib's Figure and Agg canvas classes, or None when matplotlib cannot be imported."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return (Figure, FigureCanvasAgg)


def run_colour(index: int) -> str:
    return RUN_COLOURS[index % len(RUN_COLOURS)]


def verdict_colour(name: str, extra_index: int = 0) -> str:
    return VERDICT_COLOURS.get(name, OTHER_COLOURS[extra_index % len(OTHER_COLOURS)])


def _png(mpl: Any, fig: Any) -> bytes:
    _, canvas_class = mpl
    canvas_class(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def _figure(mpl: Any, width: float = 6.0, height: float = 3.8) -> Any:
    figure_class, _ = mpl
    fig = figure_class(figsize=(width, height), layout="constrained")
    return fig


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


def fast_p_plot(mpl: Any, metrics: Sequence[RunMetrics]) -> bytes:
    """fast_p against p, one step line per run, log p axis; p = 1 marked."""
    fig = _figure(mpl)
    ax = fig.add_subplot()
    with_speedups = [(i, m) for i, m in enumerate(metrics) if m.has_speedups]
    if not with_speedups:
        _empty(ax, "no speedups in these results")
        return _png(mpl, fig)
    every = [s for _, m in with_speedups for s in m.speedups]
    low = min(0.1, min(every) / 1.5)
    high = max(4.0, max(every) * 1.5)
    for i, m in with_speedups:
        xs, ys = m.curve()
        xs = [low] + xs[1:] + [high]
        ys = ys + [0.0]
        ax.step(xs, ys, where="post", color=run_colour(i), linewidth=2,
                label=f"{m.run.label} (fast_1 = {m.fast(1.0):.2f})")
    ax.axvline(1.0, color="#444444", linestyle="--", linewidth=1)
    ax.text(1.0, 1.02, "p = 1", transform=ax.get_xaxis_transform(), ha="center", va="bottom",
            fontsize=8, color="#444444")
    ax.set_xscale("log")
    _plain_log_ticks(ax)
    ax.set_xlim(low, high)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("speedup threshold p (reference time / kernel time)")
    ax.set_ylabel("fast_p (fraction of all problems)")
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    return _png(mpl, fig)


def speedup_histogram(mpl: Any, metrics: Sequence[RunMetrics]) -> bytes:
    """Speedups of correct kernels, log-spaced bins, runs overlaid as outlined bars."""
    fig = _figure(mpl)
    ax = fig.add_subplot()
    with_speedups = [(i, m) for i, m in enumerate(metrics) if m.has_speedups]
    if not with_speedups:
        _empty(ax, "no speedups in these results")
        return _png(mpl, fig)
    every = [s for _, m in with_speedups for s in m.speedups]
    lo = math.floor(math.log10(min(every)) * 4) / 4
    hi = math.ceil(math.log10(max(every)) * 4) / 4
    if hi <= lo:
        hi = lo + 0.25
    steps = max(1, int(round((hi - lo) / 0.125)))
    edges = [10 ** (lo + (hi - lo) * k / steps) for k in range(steps + 1)]
    for i, m in with_speedups:
        colour = run_colour(i)
        ax.hist(m.speedups, bins=edges, color=colour, alpha=0.35, edgecolor=colour,
                linewidth=1.2, label=f"{m.run.label} ({len(m.speedups)} correct)")
    ax.axvline(1.0, color="#444444", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    _plain_log_ticks(ax)
    ax.set_xlabel("speedup of correct kernels (log bins)")
    ax.set_ylabel("problems")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, axis="y", color="#dddddd", linewidth=0.6)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    return _png(mpl, fig)


def verdicts_by_level(mpl: Any, metrics: Sequence[RunMetrics]) -> bytes:
    """One stacked bar per (run, level): correct, then each failure class, as fractions."""
    order = verdict_order(metrics)
    bars: List[str] = []
    stacks: List[Dict[str, float]] = []
    for m in metrics:
        for level in sorted(m.levels, key=lambda lv: (lv is None, lv or 0)):
            counts = m.levels[level]
            name = f"L{level}" if level is not None else "L?"
            bars.append(f"{m.run.label} {name}" if len(metrics) > 1 else name)
            stacks.append({v: c / counts.problems for v, c in counts.verdicts.items()})
    fig = _figure(mpl, width=max(6.0, 1.0 + 0.9 * len(bars)))
    ax = fig.add_subplot()
    if not bars:
        _empty(ax, "no problems in these results")
        return _png(mpl, fig)
    positions = list(range(len(bars)))
    bottoms = [0.0] * len(bars)
    extras = 0
    for v in order:
        heights = [stack.get(v, 0.0) for stack in stacks]
        if not any(heights):
            continue
        colour = VERDICT_COLOURS.get(v)
        if colour is None:
            colour = OTHER_COLOURS[extras % len(OTHER_COLOURS)]
            extras += 1
        ax.bar(positions, heights, bottom=bottoms, color=colour, label=v, width=0.7,
               edgecolor="white", linewidth=0.5)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(positions)
    if len(metrics) > 1:
        ax.set_xticklabels(bars, fontsize=8, rotation=30, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticklabels(bars, fontsize=8)
    ax.set_ylim(0, 1.0)
    ax.set_ylabel("fraction of the level's problems")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    return _png(mpl, fig)


def draw_all(mpl: Any, metrics: Sequence[RunMetrics]) -> Dict[str, bytes]:
    """Every plot as PNG bytes, keyed by PLOT_NAMES."""
    return {
        "fast_p": fast_p_plot(mpl, metrics),
        "speedup_histogram": speedup_histogram(mpl, metrics),
        "verdicts_by_level": verdicts_by_level(mpl, metrics),
    }
