"""KernelBench through keval: ``keval kernelbench run`` (``python -m keval.kernelbench``).

Reads the problems from a KernelBench checkout the user points at (nothing of KernelBench is
vendored) and generations in KernelBench's ``runs/`` layout, evaluates them through a keval
daemon, and writes KernelBench's ``eval_results.json`` with keval's fields added
(docs/kernelbench.md). Standard library only.
"""

from .dataset import (DatasetError, Problem, baseline_source, detect_kernel_type,
                      generation_path, load_problems, parse_problem_spec,
                      resolve_kernelbench_root)
from .results import FAILURE_CLASSES, classify, summarize
from .runner import RunOptions, Runner, SubmitOutcome

__all__ = [
    "DatasetError",
    "FAILURE_CLASSES",
    "Problem",
    "RunOptions",
    "Runner",
    "SubmitOutcome",
    "baseline_source",
    "classify",
    "detect_kernel_type",
    "generation_path",
    "load_problems",
    "parse_problem_spec",
    "resolve_kernelbench_root",
    "summarize",
]
