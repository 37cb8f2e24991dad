"""python -m keval.report (also `keval report`): results files -> one HTML page (+ PNGs).

Exit codes: 0 the page was written (with or without plots: without matplotlib stderr says so),
2 bad input (a results file missing or not KernelBench's shape, labels not one per file).
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .load import ResultsError
from .metrics import POLICIES
from .plots import NO_MATPLOTLIB
from .report import build_report

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keval report",
        description="Write one self-contained HTML page (plots embedded, no external URL) "
                    "from KernelBench eval_results.json files, with or without keval's fields; "
                    "several files are compared side by side. docs/report.md explains it.")
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="an eval_results.json, or a directory holding one (keval_run.json "
                             "beside it is read too)")
    parser.add_argument("-o", "--output", default="report.html", metavar="FILE",
                        help="the HTML page to write (default report.html)")
    parser.add_argument("--png-dir", metavar="DIR",
                        help="also write each plot as DIR/<plot>.png (needs matplotlib)")
    parser.add_argument("--title", metavar="T", help="the page's title")
    parser.add_argument("--label", action="extend", nargs="+", metavar="NAME", dest="labels",
                        help="a name for each results file, in order (repeat --label or give "
                             "several; default: keval_run.json's run_name, else the directory)")
    parser.add_argument("--samples", choices=POLICIES, default="best",
                        help="with several samples per problem, score each problem by its best "
                             "sample (default; best-of-n) or by its first (KernelBench's "
                             "sample 0)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = build_report(args.results, output=args.output, png_dir=args.png_dir,
                              title=args.title, labels=args.labels, policy=args.samples)
    except ResultsError as exc:
        print(f"keval report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not report.plots:
        print(f"keval report: matplotlib is not importable, so the page has no plots: "
              f"{NO_MATPLOTLIB}", file=sys.stderr)
        if args.png_dir:
            print(f"keval report: no PNGs written to {args.png_dir}", file=sys.stderr)
    for m in report.metrics:
        fast1 = m.fast(1.0)
        print(f"{m.run.label}: {m.n} problems, compiled {m.compiled}, correct {m.correct}, "
              f"fast_1 {'n/a' if fast1 is None else f'{fast1:.3f}'}")
    for path in report.png_paths:
        print(f"wrote {path}")
    print(f"wrote {report.html_path}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
