"""python -m keval.kernelbench (``keval kernelbench``): KernelBench evaluated through keval.

    keval kernelbench run --kernelbench PATH --level N [--problems 1-100]
        (--generations DIR | --baseline) [--samples K] [--out DIR] [--jobs N]
        [--num-trials N] [--timeout S] [--kernel-type auto|torch|torch_cuda|triton]
        [--request-extra JSON] [--force] [--socket PATH | --url URL --token-file F]

docs/kernelbench.md says what is read, what is written and how a run resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional

from .. import __version__
from ..client import Client, DaemonUnavailable, KevalError, KevalHTTPError
from . import dataset
from .runner import (EXIT_INFRASTRUCTURE, EXIT_OK, EXIT_USAGE, RunOptions, Runner,
                     SubmitOutcome)

PROG = "keval kernelbench"


def _positive_int(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} wants a whole number, got {text!r}") \
                from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} wants a number >= 1, got {text!r}")
        return value
    return parse


def _positive_float(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} wants seconds, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{name} wants a positive number, got {text!r}")
        return value
    return parse


def _problems(text: str) -> List[int]:
    try:
        return dataset.parse_problem_spec(text)
    except dataset.DatasetError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--problems ", "", 1)) from None


def parse_request_extra(text: str) -> Dict[str, Any]:
    """``--request-extra``: a JSON object, inline or ``@FILE``, merged into every request."""
    source = text
    if text.startswith("@"):
        try:
            with open(text[1:], "r", encoding="utf-8") as f:
                source = f.read()
        except OSError as e:
            raise argparse.ArgumentTypeError(f"cannot read {text[1:]}: {e.strerror}") from None
    try:
        value = json.loads(source)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"want a JSON object, got {type(value).__name__}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Evaluate KernelBench problems and generations with keval.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    run = sub.add_parser(
        "run", prog=f"{PROG} run",
        help="evaluate a level's generations (or the problems themselves) through a daemon",
        description="Evaluate KernelBench generations (--generations, KernelBench's runs/ "
                    "layout) or the problems against themselves (--baseline) through a keval "
                    "daemon, writing KernelBench's eval_results.json with keval's fields. "
                    "Resumable: rerunning the command evaluates only what is missing (and what "
                    "failed for keval's own reasons: timeouts, infrastructure).",
        epilog="Exit status: 0 the run completed (whatever the verdicts), 2 usage, 3 keval "
               "could not be reached or stopped answering, 130 interrupted. docs/kernelbench.md")
    run.add_argument("--kernelbench", required=True, metavar="PATH",
                     help="a KernelBench checkout: the repository root or its KernelBench/ folder")
    run.add_argument("--level", required=True, type=_positive_int("--level"), metavar="N")
    run.add_argument("--problems", type=_problems, metavar="IDS",
                     help="problem ids: 1-20, 1,3,5-7 (default: every problem of the level)")
    mode = run.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generations", metavar="DIR",
                      help="a run directory: level_{L}_problem_{P}_sample_{S}_kernel.py files")
    mode.add_argument("--baseline", action="store_true",
                      help="each problem against itself (ModelNew = Model): the fairness check "
                           "(speedup about 1.00) and the reference's times as "
                           "baseline_time_torch.json")
    run.add_argument("--samples", type=_positive_int("--samples"), default=1, metavar="K",
                     help="samples 0..K-1 of each problem (default 1)")
    run.add_argument("--out", metavar="DIR",
                     help="where results go (default: the generations directory, as KernelBench "
                          "does; with --baseline ./kernelbench-baseline-level{N})")
    run.add_argument("--run-name", metavar="NAME",
                     help="the run's name in keval_run.json (default: the generations folder's)")
    run.add_argument("--jobs", type=_positive_int("--jobs"), default=8, metavar="N",
                     help="requests in flight at once (default 8); the daemon queues them")
    run.add_argument("--num-trials", type=_positive_int("--num-trials"), default=100,
                     metavar="N", help="timed samples per side (default 100)")
    run.add_argument("--timeout", type=_positive_float("--timeout"), metavar="S",
                     help="seconds for each job (keval's default when not given)")
    run.add_argument("--kernel-type", default="auto", metavar="TYPE",
                     help="the generations' kernel type: auto (default: torch_cuda for "
                          "load_inline, torch for a ModelNew, triton for bare @triton.jit), "
                          "torch, torch_cuda, triton, or a plugin's")
    run.add_argument("--request-extra", type=parse_request_extra, default={}, metavar="JSON",
                     help="fields merged into every request: a JSON object or @FILE "
                          "(e.g. '{\"atol\": 0.001, \"strict\": [\"excessive_speedup\"]}')")
    run.add_argument("--force", action="store_true",
                     help="evaluate again samples that already have a result")
    run.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                     help="on stderr: bar (one updating line), lines (one per finished sample), "
                          "none; auto: bar on a terminal, lines otherwise")
    daemon = run.add_argument_group("daemon (default: the local one, started if none runs)")
    daemon.add_argument("--socket", metavar="PATH", help="a daemon's Unix socket")
    daemon.add_argument("--url", metavar="URL", help="a daemon on TCP (keval serve --listen)")
    daemon.add_argument("--token-file", metavar="FILE", help="the token for --url")
    return parser


def make_submit(client: Client):
    """``Runner``'s submit over ``keval.Client``: exceptions turned into outcomes.

    A daemon that cannot be reached is asked for its health once more before the run is given
    up: a single refused connection (the connection limit) is one sample's failure, a daemon that
    is gone stops the run.
    """
    def submit(request: Dict[str, Any]) -> SubmitOutcome:
        try:
            result = client.compare(request)
            return SubmitOutcome(response=result.raw, http_status=result.http_status,
                                 gpu_type=result.gpu_type)
        except KevalHTTPError as e:
            if e.status == 503:
                body = dict(e.body)
                body["retry_after"] = e.retry_after
                return SubmitOutcome(response=body, http_status=503, failure_class="busy",
                                     message=str(e))
            cls = "bad_request" if 400 <= e.status < 500 else "infrastructure"
            return SubmitOutcome(response=e.body or None, http_status=e.status,
                                 failure_class=cls, error_class=e.error_class or cls,
                                 message=str(e))
        except DaemonUnavailable as e:
            try:
                client.health()
                gone = False
            except KevalError:
                gone = True
            return SubmitOutcome(failure_class="infrastructure",
                                 error_class="daemon_unavailable", message=str(e),
                                 daemon_gone=gone)
        except KevalError as e:
            return SubmitOutcome(failure_class="infrastructure", error_class="client",
                                 message=str(e))
    return submit


def _connect(args: argparse.Namespace) -> Client:
    if args.url:
        return Client(url=args.url, token_file=args.token_file)
    if args.socket:
        return Client(socket_path=args.socket)
    return Client.local()


def cmd_run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    err = sys.stderr
    if args.token_file and not args.url:
        parser.error("--token-file goes with --url")
    if args.url and args.socket:
        parser.error("give --socket or --url, not both")
    try:
        root = dataset.resolve_kernelbench_root(args.kernelbench)
    except dataset.DatasetError as e:
        print(f"{PROG} run: {e}", file=err)
        return EXIT_USAGE
    generations = None
    if args.generations is not None:
        generations = os.path.abspath(os.path.expanduser(args.generations))
        if not os.path.isdir(generations):
            print(f"{PROG} run: --generations {args.generations}: not a directory", file=err)
            return EXIT_USAGE
    out = args.out or (generations if generations is not None
                       else f"kernelbench-baseline-level{args.level}")
    out = os.path.abspath(os.path.expanduser(out))
    options = RunOptions(
        kernelbench=root, kernelbench_arg=os.path.abspath(os.path.expanduser(args.kernelbench)),
        level=args.level, problems=args.problems, generations=generations, out=out,
        samples=args.samples, jobs=args.jobs, num_trials=args.num_trials, timeout=args.timeout,
        kernel_type=None if args.kernel_type == "auto" else args.kernel_type,
        request_extra=args.request_extra, force=args.force, run_name=args.run_name)
    stream = open(os.devnull, "w") if args.progress == "none" else sys.stderr
    tty = {"bar": True, "lines": False}.get(args.progress)
    runner = Runner(options, submit=lambda request: SubmitOutcome(), progress_stream=stream,
                    tty=tty)
    try:
        runner.plan()
    except dataset.DatasetError as e:
        print(f"{PROG} run: {e}", file=err)
        return EXIT_USAGE
    except (OSError, ValueError) as e:
        print(f"{PROG} run: {e}", file=err)
        return EXIT_USAGE
    if not runner.work:
        print(f"{PROG} run: nothing to evaluate: all {runner.skipped} sample(s) already have a "
              f"result in {runner.results_path} (--force evaluates them again)", file=err)
        runner.keval_version = runner.keval_version or __version__
        runner.finish()
        print(runner.summary_text())
        return EXIT_OK
    try:
        client = _connect(args)
    except (KevalError, ValueError) as e:
        print(f"{PROG} run: no keval daemon: {e}", file=err)
        return EXIT_INFRASTRUCTURE
    try:
        try:
            health = client.health()
        except KevalError as e:
            print(f"{PROG} run: the keval daemon at {client.address} does not answer: {e}",
                  file=err)
            return EXIT_INFRASTRUCTURE
        if health.gpus:
            runner.hardware = str(health.gpus[0].get("name") or health.gpus[0].get("type"))
        elif health.cpu_device:
            runner.hardware = "host CPU"
        runner.keval_version = health.version or __version__
        runner.submit = make_submit(client)
        where = f"{client.address}" + (" (started for this run)" if client.daemon else "")
        print(f"{PROG}: level {options.level}, {len(runner.selected)} problem(s), "
              f"{len(runner.work)} sample(s) to evaluate, {args.jobs} at a time, through {where}",
              file=err)
        code = runner.run()
    finally:
        client.close()
    print(runner.summary_text())
    return code


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        return cmd_run(args, parser)
    parser.error(f"unknown command {args.command!r}")
    return EXIT_USAGE


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:   # before or after the run's own handling (e.g. starting a daemon)
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        sys.exit(130)
