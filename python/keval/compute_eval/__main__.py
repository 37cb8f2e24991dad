"""python -m keval.compute_eval: evaluate ComputeEval datapacks with keval, and make datapacks.

    python -m keval.compute_eval evaluate --problems P.tar.gz --solutions S.tar.gz [--k 1,3]
        [--jobs N] [--daemon SOCKET] [--baseline] [--benchmark] [--output FILE] [--timeout S]
    python -m keval.compute_eval pack-problems DIR... --release R -o OUT.tar.gz
    python -m keval.compute_eval pack-solutions DIR... --release R -o OUT.tar.gz
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .datapack import VALID_GROUPS, DatapackError
from .evaluate import EXIT_BAD_INPUT, EXIT_OK, EvaluateOptions, evaluate
from .pack import PackError, pack_problems, pack_solutions


def _k_values(text: str) -> List[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected k values like 1,3 (got {text!r})") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"each k must be a positive integer (got {text!r})")
    return values


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (got {text!r})") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive (got {text!r})")
    return value


def _groups(text: str) -> List[str]:
    groups = [g.strip() for g in text.split(",") if g.strip()]
    unknown = [g for g in groups if g not in VALID_GROUPS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown groups {', '.join(unknown)} (valid: "
                                         f"{', '.join(VALID_GROUPS)})")
    return groups


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m keval.compute_eval",
        description="Evaluate ComputeEval datapacks with keval's cuda_program kernel type "
                    "(docs/cuda_program.md), and make datapacks from problem directories.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    ev = sub.add_parser(
        "evaluate", help="grade a solutions datapack (or the problems' baselines)",
        description="Grade every solution of a solutions datapack against its problem: one "
                    "keval job each, graded solutions written as ComputeEval's JSONL (plus a "
                    "'keval' key) as they complete, then pass@k. An existing --output is "
                    "resumed. Exit codes: 0 the run completed, 2 bad input, 3 keval failed.")
    ev.add_argument("--problems", required=True, metavar="P.tar.gz",
                    help="the problems datapack")
    ev.add_argument("--solutions", metavar="S.tar.gz",
                    help="the solutions datapack (not with --baseline)")
    ev.add_argument("--k", type=_k_values, default=[1], metavar="K[,K...]",
                    help="pass@k for these k (default 1)")
    ev.add_argument("--jobs", type=int, default=None, metavar="N",
                    help="jobs submitted at once (default: as many as the daemon runs at once, "
                         "its /health max_active; builds run in parallel while GPUs test)")
    ev.add_argument("--daemon", metavar="SOCKET",
                    help="a running keval daemon's Unix socket (default: start one for the run)")
    ev.add_argument("--baseline", action="store_true",
                    help="evaluate each problem's own baseline_solution (checks the problems)")
    ev.add_argument("--benchmark", action="store_true",
                    help="performance mode: benchmark passing solutions against the baseline")
    ev.add_argument("--no-harness-reuse", action="store_true",
                    help="build every solution with the problem's plain build command (keval "
                         "otherwise compiles a held-out harness once per problem and reuses it)")
    ev.add_argument("--output", metavar="FILE",
                    help="graded solutions JSONL (default: <datapack>-graded-solutions.jsonl "
                         "here); metrics go to FILE.metrics.json")
    ev.add_argument("--timeout", type=_positive_float, metavar="S",
                    help="each job's limit in seconds (default: from the problem's "
                         "timeout_seconds, for every command the job runs)")
    ev.add_argument("--keval-bin", metavar="PATH",
                    help="the keval binary for the daemon started here (default $KEVAL_BIN, "
                         "else keval on PATH)")
    ev.add_argument("--sandbox", choices=("standard", "strict", "off"),
                    help="the started daemon's --sandbox")
    ev.add_argument("--daemon-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for the started 'keval serve' (repeatable)")
    ev.add_argument("--progress", choices=("auto", "bar", "lines"), default="auto",
                    help="progress on stderr: a bar (a TTY's default) or a line per 10%%")

    for name, what in (("pack-problems", "problem"), ("pack-solutions", "solution")):
        p = sub.add_parser(
            name, help=f"a {what}s datapack from {what} directories",
            description=(
                "A problems datapack (ComputeEval's format, task_id_hashes included) from "
                "problem directories: problem.json, context/, test/, solution/ (python/README.md)."
                if what == "problem" else
                "A solutions datapack from solution directories: a problem directory (its "
                "solution/, or with --variant its variants/<V>/), a problem's solution/ or "
                "variants/<V>/, or a directory with solution.json {\"task_id\": ...}."))
        p.add_argument("dirs", nargs="+", metavar="DIR")
        p.add_argument("--release", required=True, metavar="R",
                       help="the datapack's release, e.g. 2025-1 or internal")
        p.add_argument("-o", "--output", required=True, metavar="OUT.tar.gz")
        p.add_argument("--description", help="the metadata's description")
        if what == "solution":
            p.add_argument("--variant", action="append", metavar="V",
                           help="for problem directories: their variants/V/ instead of "
                                "solution/ (repeatable, in order)")
            p.add_argument("--groups", type=_groups, metavar="G[,G...]",
                           help="the metadata's groups: evaluation keeps the problems of these")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "evaluate":
        daemon_args = list(args.daemon_arg)
        if args.sandbox:
            daemon_args = ["--sandbox", args.sandbox] + daemon_args
        if args.daemon and (args.keval_bin or daemon_args):
            sys.stderr.write("compute-eval: error: --keval-bin, --sandbox and --daemon-arg are "
                             "for the daemon started here; not with --daemon\n")
            return EXIT_BAD_INPUT
        if args.baseline and args.solutions:
            sys.stderr.write("compute-eval: error: --baseline evaluates the problems' own "
                             "baselines; give no --solutions\n")
            return EXIT_BAD_INPUT
        options = EvaluateOptions(
            problems=args.problems, solutions=args.solutions, k=args.k, jobs=args.jobs,
            daemon=args.daemon, baseline=args.baseline, benchmark=args.benchmark,
            output=args.output, timeout=args.timeout, keval_bin=args.keval_bin,
            daemon_args=daemon_args, harness_reuse=not args.no_harness_reuse,
            progress={"auto": None, "bar": True, "lines": False}[args.progress])
        return evaluate(options)
    try:
        if args.command == "pack-problems":
            metadata = pack_problems(args.dirs, args.output, release=args.release,
                                     description=args.description)
        else:
            metadata = pack_solutions(args.dirs, args.output, release=args.release,
                                      description=args.description, groups=args.groups,
                                      variants=args.variant or [None])
    except (PackError, DatapackError, ValueError) as e:
        sys.stderr.write(f"compute-eval: error: {e}\n")
        return EXIT_BAD_INPUT
    except OSError as e:
        sys.stderr.write(f"compute-eval: error: {e}\n")
        return EXIT_BAD_INPUT
    sys.stderr.write(f"compute-eval: wrote {args.output} ({metadata['total_count']} "
                     f"{'problems' if args.command == 'pack-problems' else 'solutions'})\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
