"""A KernelBench checkout and a run's generations, read where the user keeps them.

Nothing of KernelBench is vendored: the problems are read from the checkout the user points at,
laid out as KernelBench lays them out (``KernelBench/level{N}/{id}_{Name}.py``), and generations
from a run directory in KernelBench's ``runs/`` layout
(``level_{L}_problem_{P}_sample_{S}_kernel.py``). This module only reads files and names
things; it does not talk to keval.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional

__all__ = [
    "DatasetError",
    "Problem",
    "baseline_source",
    "detect_kernel_type",
    "generation_path",
    "load_problems",
    "parse_problem_spec",
    "resolve_kernelbench_root",
]

KERNEL_TYPES = ("torch", "torch_cuda", "triton")


class DatasetError(ValueError):
    """A path or a value that names no usable KernelBench data; the message says which."""


@dataclass(frozen=True)
class Problem:
    """One KernelBench problem: its numeric id, its file name (KernelBench's key) and path."""

    level: int
    problem_id: int
    name: str  # the file name, "1_Square_matrix_multiplication_.py", as baseline times key it
    path: str

    def read(self) -> str:
        with open(self.path, "r", encoding="utf-8") as f:
            return f.read()


def resolve_kernelbench_root(path: str) -> str:
    """The folder that holds ``level{N}/``: PATH itself, or PATH/KernelBench for a repo root.

    Users point at whichever they think of as "the checkout"; both are accepted so neither is a
    surprise. Raises ``DatasetError`` when neither holds a level folder.
    """
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise DatasetError(f"--kernelbench {path}: not a directory")
    candidates = [os.path.join(path, "KernelBench"), path]
    for candidate in candidates:
        if os.path.isdir(candidate) and any(
                re.fullmatch(r"level\d+", entry) and os.path.isdir(os.path.join(candidate, entry))
                for entry in os.listdir(candidate)):
            return candidate
    raise DatasetError(f"--kernelbench {path}: no level folders (level1/, level2/, ...) in it or "
                       f"in its KernelBench/ folder; point it at a KernelBench checkout")


def load_problems(root: str, level: int) -> Dict[int, Problem]:
    """Every problem of ``root/level{level}``, by id, as KernelBench's dataset finds them.

    KernelBench takes the id from the file name's first ``_``-separated field; files that do not
    start with a number are not problems. Two files with one id would make results ambiguous, so
    that is an error. A missing level folder raises ``DatasetError`` naming it.
    """
    level_dir = os.path.join(root, f"level{level}")
    if not os.path.isdir(level_dir):
        raise DatasetError(f"--level {level}: no folder {level_dir}")
    problems: Dict[int, Problem] = {}
    for name in sorted(os.listdir(level_dir)):
        if not name.endswith(".py"):
            continue
        head = name.split("_", 1)[0]
        if not head.isdigit():
            continue
        pid = int(head)
        if pid in problems:
            raise DatasetError(f"{level_dir}: two problems with id {pid}: "
                               f"{problems[pid].name} and {name}")
        problems[pid] = Problem(level, pid, name, os.path.join(level_dir, name))
    return problems


def parse_problem_spec(text: str) -> List[int]:
    """Problem ids from ``"1-20"``, ``"1,3,5-7"``: sorted, without duplicates.

    Raises ``DatasetError`` naming the option and the part at fault, so a typo in a long list is
    easy to find.
    """
    ids = set()
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise DatasetError(f"--problems {text!r}: expected ids and ranges like 1-20 or 1,3,5-7")
    for part in parts:
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise DatasetError(f"--problems {text!r}: {part!r} is not an id or a range "
                               f"like 5-7")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if lo < 1:
            raise DatasetError(f"--problems {text!r}: problem ids start at 1 (got {part!r})")
        if hi < lo:
            raise DatasetError(f"--problems {text!r}: range {part!r} ends before it starts")
        if hi - lo > 100000:
            raise DatasetError(f"--problems {text!r}: range {part!r} is implausibly large")
        ids.update(range(lo, hi + 1))
    return sorted(ids)


def generation_path(run_dir: str, level: int, problem_id: int, sample_id: int) -> str:
    """Where KernelBench's ``generate_samples.py`` writes a sample (``runs/{run_name}/``)."""
    return os.path.join(run_dir,
                        f"level_{level}_problem_{problem_id}_sample_{sample_id}_kernel.py")


def baseline_source(problem_source: str) -> str:
    """The problem as its own candidate: the fairness check (speedup about 1.00).

    ``ModelNew = Model`` is how KernelBench's own baseline seeds name the reference as a
    candidate; keval's torch type then runs the same class on both sides.
    """
    return problem_source.rstrip("\n") + "\n\n\nModelNew = Model\n"


_CPP_EXTENSION = re.compile(r"torch\.utils\.cpp_extension|\bload_inline\s*\(|"
                            r"from\s+torch\.utils\s+import\s+cpp_extension")
_TRITON = re.compile(r"^\s*(?:import\s+triton\b|from\s+triton\b)|@triton\.jit", re.MULTILINE)
_MODEL_NEW = re.compile(r"^\s*(?:class\s+ModelNew\b|ModelNew\s*=)", re.MULTILINE)


def detect_kernel_type(source: str) -> str:
    """keval's kernel type for a KernelBench generation, from what the source uses.

    - ``torch.utils.cpp_extension`` / ``load_inline``: ``torch_cuda`` (keval builds the
      extension with its cached builder, plugins/torch_cuda).
    - a ``ModelNew`` otherwise, Triton kernels or not: ``torch``. keval's ``triton`` type launches
      one ``@triton.jit`` kernel against an IOContract (docs/compatibility.md), which a
      KernelBench generation does not carry; its ``ModelNew.forward`` launches the kernels itself,
      which the torch type runs as it is.
    - ``@triton.jit`` / ``import triton`` without a ``ModelNew``: ``triton`` (the request then
      needs an ``io`` contract, through ``--request-extra``).
    - anything else: ``torch``.
    """
    if _CPP_EXTENSION.search(source):
        return "torch_cuda"
    if _MODEL_NEW.search(source):
        return "torch"
    if _TRITON.search(source):
        return "triton"
    return "torch"


def find_generation(run_dir: Optional[str], level: int, problem_id: int,
                    sample_id: int) -> Optional[str]:
    """The generation's path when the file exists, else None (recorded as missing_generation)."""
    if run_dir is None:
        return None
    path = generation_path(run_dir, level, problem_id, sample_id)
    return path if os.path.isfile(path) else None
