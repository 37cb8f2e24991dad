"""The report as one self-contained HTML page: inline CSS, plots as data: URIs, no script.

Everything read from results (labels, problem names, error messages, flag reasons, paths) is
untrusted: kernels' output and error text reach the page only through ``html.escape``, and the
links to each job's details are relative paths percent-encoded, so they cannot become a
``javascript:`` URL or leave the attribute. Nothing on the page refers to another host, so it
reads the same offline and from an archive.
"""

from __future__ import annotations

import base64
import datetime
import html
import os
import urllib.parse
from typing import Any, Dict, Iterable, List, Optional, Sequence

from .load import FAILURE_CLASSES, ProblemKey, Sample, problem_sort_key
from .metrics import CORRECT, HEADLINE_P, RunMetrics, verdict, verdict_order
from .plots import NO_MATPLOTLIB, VERDICT_COLOURS, run_colour

ERROR_PREVIEW = 2000  # characters of an error message shown on the page; the rest is in the job

CSS = """
:root { --bg: #f3f4f6; --card: #ffffff; --ink: #1f2328; --muted: #5c6370; --line: #d8dbe0; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 24px 48px; }
h1 { font-size: 24px; margin: 4px 0 4px; }
h2 { font-size: 18px; margin: 0 0 10px; }
.sub { color: var(--muted); margin: 0 0 16px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: 16px 18px; margin: 0 0 18px; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 18px;
  margin: 0 0 18px; }
.plots section { margin: 0; }
figure { margin: 0; }
figure img { display: block; max-width: 100%; height: auto; }
figcaption, .note { color: var(--muted); font-size: 12.5px; margin-top: 6px; }
.noplot { border: 2px dashed var(--line); border-radius: 6px; padding: 36px 16px;
  text-align: center; color: var(--muted); }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 8px; text-align: left;
  vertical-align: top; }
th { background: #f7f8fa; font-weight: 600; }
td.num, th.num { text-align: right; }
.scroll { overflow-x: auto; }
table.headline td, table.headline th { text-align: left; }
td.label { white-space: nowrap; }
.problems td { font-size: 13px; }
.problems th.group { text-align: center; border-left: 2px solid var(--line); }
.problems td.first, .problems th.first { border-left: 2px solid var(--line); }
.v { display: inline-block; padding: 0 7px; border-radius: 10px; color: #fff; font-size: 12px;
  white-space: nowrap; }
.fast { font-weight: 700; color: #1a7f37; }
.slow { color: #9a6700; }
.muted { color: var(--muted); }
.flag { display: inline-block; background: #fff4d6; border: 1px solid #e9c46a;
  border-radius: 4px; padding: 0 5px; margin: 1px 2px 1px 0; font-size: 12px; }
details summary { cursor: pointer; color: var(--muted); font-size: 12px; }
pre { white-space: pre-wrap; word-break: break-word; background: #f7f8fa; padding: 6px 8px;
  border-radius: 4px; font-size: 12px; max-height: 240px; overflow: auto; margin: 4px 0 0; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
  margin-right: 6px; vertical-align: baseline; }
dl.defs dt { font-weight: 600; margin-top: 6px; }
dl.defs dd { margin: 0 0 0 16px; color: var(--muted); }
a { color: #0b63c5; }
"""


def e(value: Any) -> str:
    """Escaped text for element content and quoted attributes."""
    return html.escape("" if value is None else str(value), quote=True)


def pct(value: Optional[float]) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def num(value: Optional[float], digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def speed(value: Optional[float]) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}×" if value < 100 else f"{value:.0f}×"


def ms(value: Optional[float]) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}"


def duration(seconds: Any) -> Optional[str]:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        return None
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d} ({seconds:.0f} s)"


def compact(value: Any) -> str:
    """A keval_run.json value in a line: dicts as 'key: value' pairs."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {compact(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(compact(v) for v in value)
    return str(value)


def href(target: str, html_dir: str) -> str:
    """A relative, percent-encoded link from the page's directory to a file."""
    rel = os.path.relpath(target, html_dir).replace(os.sep, "/")
    return urllib.parse.quote(rel, safe="/")


def badge(name: str) -> str:
    colour = VERDICT_COLOURS.get(name, "#8c564b")
    return f'<span class="v" style="background:{colour}">{e(name)}</span>'


def plot_block(name: str, title: str, caption: str, images: Optional[Dict[str, bytes]]) -> str:
    if images is None:
        body = f'<div class="noplot" data-plot="{e(name)}">{e(NO_MATPLOTLIB)}</div>'
    else:
        data = base64.b64encode(images[name]).decode("ascii")
        body = (f'<img data-plot="{e(name)}" alt="{e(title)}" '
                f'src="data:image/png;base64,{data}">')
    return (f'<section><h2>{e(title)}</h2><figure>{body}'
            f'<figcaption>{caption}</figcaption></figure></section>')


def _level_name(level: Optional[int]) -> str:
    return f"level {level}" if level is not None else "level ?"


def headline(metrics: Sequence[RunMetrics], html_dir: str) -> str:
    rows: List[List[str]] = []

    def row(name: str, cells: Iterable[str], numeric: bool = True) -> None:
        rows.append([name] + [c for c in cells] + ["num" if numeric else ""])

    row("results file", (f'<a href="{href(m.run.path, html_dir)}">'
                         f'{e(os.path.relpath(m.run.path, html_dir))}</a>' for m in metrics),
        numeric=False)
    meta = [m.run.meta or {} for m in metrics]
    if any(meta):
        row("mode", (e(x.get("mode", "")) for x in meta), numeric=False)
    row("levels", (e(", ".join(str(lv) if lv is not None else "?" for lv in
                               sorted(m.levels, key=lambda lv: (lv is None, lv or 0))))
                   for m in metrics), numeric=False)
    row("problems", (e(m.n) + (f' <span class="muted">({m.missing} absent from the results, '
                               f'counted as failed)</span>' if m.missing else "")
                     for m in metrics))
    row("samples per problem (max)", (e(m.max_samples) for m in metrics))
    row("compiled", (f"{pct(m.rate(m.compiled))} <span class=\"muted\">({m.compiled})</span>"
                     for m in metrics))
    row("correct", (f"{pct(m.rate(m.correct))} <span class=\"muted\">({m.correct})</span>"
                    for m in metrics))
    for p in HEADLINE_P:
        row(f"fast_{p:g}", (pct(m.fast(p)) if m.has_speedups else
                            '<span class="muted">no speedups</span>' for m in metrics))
    row("geometric mean speedup (correct)", (speed(m.geomean) for m in metrics))
    row("geometric mean speedup (correct and faster)", (speed(m.geomean_faster)
                                                         for m in metrics))
    row("median speedup (correct)", (speed(m.median_speedup) for m in metrics))
    row("correct without a speedup", (e(m.correct_without_speedup) for m in metrics))
    if any(meta):
        row("hardware", (e(compact(x.get("hardware"))) for x in meta), numeric=False)
        row("wall time", (e(duration(x.get("wall_seconds")) or "") for x in meta))
        row("started", (e(compact(x.get("started"))) for x in meta), numeric=False)
        row("finished", (e(compact(x.get("finished"))) for x in meta), numeric=False)
        row("KernelBench", (e(compact(x.get("kernelbench"))) for x in meta), numeric=False)
        row("generations", (e(compact(x.get("generations"))) for x in meta), numeric=False)
        row("keval version", (e(compact(x.get("keval_version"))) for x in meta), numeric=False)
    head = "".join(f'<th class="num"><span class="swatch" style="background:{run_colour(i)}">'
                   f'</span>{e(m.run.label)}</th>' for i, m in enumerate(metrics))
    body = "".join(
        f"<tr><th>{e(r[0])}</th>" + "".join(f'<td class="{r[-1]}">{c}</td>' for c in r[1:-1])
        + "</tr>" for r in rows)
    notes = []
    for m in metrics:
        if m.n == 0:
            notes.append(f"<li><b>{e(m.run.label)}</b>: no problems in this results file.</li>")
        elif not m.has_speedups:
            why = ("this is a plain KernelBench results file (no keval fields): speedups are "
                   "absent, only compiled and correct rates are reported"
                   if not m.run.keval_fields else "no correct kernel has a measured speedup")
            notes.append(f"<li><b>{e(m.run.label)}</b>: {e(why)}.</li>")
        if m.derived_speedups:
            notes.append(f"<li><b>{e(m.run.label)}</b>: {m.derived_speedups} speedups computed "
                         f"as ref_runtime / runtime (the file has no speedup field).</li>")
        if m.max_samples > 1:
            policy = ("the best sample (correct first, then highest speedup): best-of-"
                      f"{m.max_samples}, not KernelBench's sample-0 score"
                      if m.policy == "best" else "sample 0 (the lowest sample id), as "
                      "KernelBench scores")
            notes.append(f"<li><b>{e(m.run.label)}</b>: several samples per problem; each "
                         f"problem is scored by {e(policy)}.</li>")
        for note in m.run.notes:
            notes.append(f"<li><b>{e(m.run.label)}</b>: {e(note)}</li>")
    note_html = f'<ul class="note">{"".join(notes)}</ul>' if notes else ""
    return (f'<section><h2>Summary</h2><div class="scroll"><table class="headline"><thead><tr>'
            f'<th></th>{head}</tr></thead><tbody>{body}</tbody></table></div>{note_html}'
            f'</section>')


def levels_table(metrics: Sequence[RunMetrics]) -> str:
    order = verdict_order(metrics)
    head = ("<th>results</th><th>level</th><th class=\"num\">problems</th>"
            "<th class=\"num\">compiled</th><th class=\"num\">correct</th>"
            "<th class=\"num\">fast_1</th>"
            + "".join(f'<th class="num">{badge(v)}</th>' for v in order))
    rows = []
    for m in metrics:
        for level in sorted(m.levels, key=lambda lv: (lv is None, lv or 0)):
            c = m.levels[level]
            fast = f"{pct(c.fast_1 / c.problems)}" if m.has_speedups else "—"
            cells = "".join(f'<td class="num">{c.verdicts.get(v, 0) or ""}</td>' for v in order)
            rows.append(f'<tr><td class="label">{e(m.run.label)}</td>'
                        f'<td class="label">{e(_level_name(level))}</td>'
                        f'<td class="num">{c.problems}</td>'
                        f'<td class="num">{pct(c.compiled / c.problems)}</td>'
                        f'<td class="num">{pct(c.correct / c.problems)}</td>'
                        f'<td class="num">{fast}</td>{cells}</tr>')
        if m.missing:
            rows.append(f'<tr><td class="label">{e(m.run.label)}</td><td>absent</td>'
                        f'<td class="num">{m.missing}</td><td colspan="{3 + len(order)}" '
                        f'class="muted">planned in keval_run.json, no entry: failed</td></tr>')
    return (f'<section><h2>Correctness and failure classes by level</h2><div class="scroll">'
            f'<table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
            f'<p class="note">Counts of problems by the verdict of the sample each is scored '
            f'by. Failure classes: {e(", ".join(FAILURE_CLASSES))}; a plain KernelBench file '
            f'has only compile (not compiled) and correctness (compiled, wrong output).</p>'
            f'</section>')


def flags_table(metrics: Sequence[RunMetrics]) -> str:
    names = sorted({n for m in metrics for n in m.flags_all})
    multi = any(m.max_samples > 1 for m in metrics)
    if not names:
        body = '<p class="muted">No sample carries a flag.</p>'
    else:
        head = "".join(f'<th class="num">{e(m.run.label)}</th>' for m in metrics)
        rows = []
        for name in names:
            cells = []
            for m in metrics:
                chosen, every = m.flags_chosen.get(name, 0), m.flags_all.get(name, 0)
                text = str(chosen) if chosen else ""
                if multi and every != chosen:
                    text += f' <span class="muted">({every} samples)</span>'
                cells.append(f'<td class="num">{text}</td>')
            rows.append(f'<tr><td><span class="flag">{e(name)}</span></td>{"".join(cells)}</tr>')
        body = (f'<div class="scroll"><table><thead><tr><th>flag</th>{head}</tr></thead>'
                f'<tbody>{"".join(rows)}</tbody></table></div>')
    return (f'<section><h2>Flags</h2>{body}<p class="note">Problems whose scored sample carries '
            f'each flag (in parentheses, every sample flagged, where several samples were '
            f'run). Flags are keval\'s warnings about a kernel (for example a suspicious '
            f'speedup); the reasons are in the per-problem table.</p></section>')


def _problem_cells(sample: Optional[Sample], m: RunMetrics, html_dir: str) -> str:
    if sample is None:
        return '<td class="first muted" colspan="6">not in this results file</td>'
    v = verdict(sample)
    verdict_html = badge(v)
    if sample.failure_derived and v != CORRECT:
        verdict_html += ' <span class="muted" title="from compiled/correctness">*</span>'
    message = sample.error_message
    if message:
        shown = message if len(message) <= ERROR_PREVIEW else message[:ERROR_PREVIEW] + " …"
        summary = e(sample.error_class or "error")
        verdict_html += f"<details><summary>{summary}</summary><pre>{e(shown)}</pre></details>"
    if sample.speedup is not None and v == CORRECT:
        cls = "fast" if sample.speedup > 1 else "slow"
        speed_html = f'<span class="{cls}">{speed(sample.speedup)}</span>'
    elif sample.speedup is not None:
        speed_html = f'<span class="muted">{speed(sample.speedup)}</span>'
    else:
        speed_html = '<span class="muted">—</span>'
    custom = ms(sample.custom_ms)
    if sample.custom_method and sample.custom_ms is not None:
        custom += f'<br><span class="muted">{e(sample.custom_method)}</span>'
    ref = ms(sample.ref_ms)
    if sample.ref_method and sample.ref_ms is not None:
        ref += f'<br><span class="muted">{e(sample.ref_method)}</span>'
    flags = "".join(f'<span class="flag" title="{e(reason)}">{e(name)}</span>'
                    + (f'<br><span class="muted">{e(reason)}</span>' if reason else "") + " "
                    for name, reason in sample.flags)
    if sample.response_file:
        text = sample.job_id or os.path.basename(sample.response_file)
        details = f'<a href="{href(sample.response_file, html_dir)}">{e(text)}</a>'
    elif sample.job_id:
        details = f"job {e(sample.job_id)}"
    else:
        details = '<span class="muted">—</span>'
    samples = len(m.run.problems.get((sample.level, sample.problem_id), []))
    if samples > 1:
        details += f'<br><span class="muted">sample {sample.sample_id} of {samples}</span>'
    return (f'<td class="first">{verdict_html}</td><td class="num">{speed_html}</td>'
            f'<td class="num">{custom}</td><td class="num">{ref}</td><td>{flags}</td>'
            f'<td>{details}</td>')


def problems_table(metrics: Sequence[RunMetrics], html_dir: str) -> str:
    keys: List[ProblemKey] = sorted({k for m in metrics for k in m.chosen},
                                    key=problem_sort_key)
    group = "".join(f'<th class="group" colspan="6"><span class="swatch" '
                    f'style="background:{run_colour(i)}"></span>{e(m.run.label)}</th>'
                    for i, m in enumerate(metrics))
    sub = ('<th class="first">verdict</th><th class="num">speedup</th>'
           '<th class="num">kernel ms</th><th class="num">ref ms</th><th>flags</th>'
           '<th>details</th>') * len(metrics)
    rows = []
    for key in keys:
        name = next((m.chosen[key].problem_name for m in metrics
                     if key in m.chosen and m.chosen[key].problem_name), None)
        level, pid = key
        if name and name.startswith(f"{pid}_"):
            label = e(name)  # KernelBench's names start with the id already
        else:
            label = e(pid) + (f' <span class="muted">{e(name)}</span>' if name else "")
        cells = "".join(_problem_cells(m.chosen.get(key), m, html_dir) for m in metrics)
        rows.append(f'<tr><td class="num">{e(level if level is not None else "?")}</td>'
                    f'<td>{label}</td>{cells}</tr>')
    derived = (" * verdict inferred from compiled/correctness (the file has no failure_class)."
               if any(s.failure_derived for m in metrics for s in m.chosen.values()) else "")
    return (f'<section><h2>Problems</h2><div class="scroll"><table class="problems"><thead>'
            f'<tr><th rowspan="2">level</th><th rowspan="2">problem</th>{group}</tr>'
            f'<tr>{sub}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
            f'<p class="note">Kernel and reference times are medians in ms (the mean where no '
            f'median was recorded), with the timing method below. Details link to each job\'s '
            f'full response, relative to this page.{derived}</p></section>')


DEFINITIONS = """
<section><h2>Definitions</h2><dl class="defs">
<dt>speedup</dt><dd>reference (PyTorch) time / kernel time, as keval measured them in the same
job. Only correct kernels count towards any speedup metric.</dd>
<dt>fast_p</dt><dd>the fraction of <em>all</em> problems attempted (failed ones included) whose
kernel is correct and whose speedup is strictly greater than p (KernelBench's definition).
fast_0 is the fraction correct with a measured speedup; fast_1, the fraction correct and faster
than the reference.</dd>
<dt>geometric mean speedup</dt><dd>exp(mean(log speedup)) over correct kernels; "correct and
faster" takes only those with speedup &gt; 1.</dd>
<dt>compiled, correct</dt><dd>fractions of all problems attempted.</dd>
<dt>several samples</dt><dd>each problem is scored by one sample: by default the best (correct
first, then the highest speedup, then compiled), which is best-of-n; with --samples first, the
lowest sample id, KernelBench's own sample-0 reading.</dd>
</dl></section>
"""


def render(metrics: Sequence[RunMetrics], html_path: str, title: str,
           images: Optional[Dict[str, bytes]]) -> str:
    """The whole page; ``images`` is None when matplotlib is unavailable."""
    html_dir = os.path.dirname(os.path.abspath(html_path))
    from .. import __version__
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sub = (f"{len(metrics)} results file{'s' if len(metrics) != 1 else ''} · generated "
           f"{e(generated)} by keval {e(__version__)} report")
    plots = "".join([
        plot_block("fast_p", "fast_p over p",
                   "Fraction of all problems whose kernel is correct and faster than p times "
                   "the reference; one line per results file; dashed: p = 1.", images),
        plot_block("speedup_histogram", "Speedups of correct kernels",
                   "Histogram over log-spaced bins; dashed: speedup 1.", images),
        plot_block("verdicts_by_level", "Correctness and failure classes by level",
                   "Stacked fractions of each level's problems by verdict.", images),
    ])
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{e(title)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>{e(title)}</h1><p class=\"sub\">{sub}</p>"
            f"{headline(metrics, html_dir)}<div class=\"plots\">{plots}</div>"
            f"{levels_table(metrics)}{flags_table(metrics)}"
            f"{problems_table(metrics, html_dir)}{DEFINITIONS}</main></body></html>\n")
