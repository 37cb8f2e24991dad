"""Reading results files: KernelBench's ``eval_results.json``, with or without keval's fields.

The shape is KernelBench's ``{"<problem_id>": [entry, ...]}``. keval's ``kernelbench run`` adds
fields to each entry (speedup, failure_class, flags, level, response_file...) and may write a
``keval_run.json`` beside it. A plain KernelBench file has none of those: it still reports
compiled and correct rates, so every keval field is optional here and its absence is recorded
rather than guessed (a speedup is only derived from two measured runtimes).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

RESULTS_NAME = "eval_results.json"
RUN_META_NAME = "keval_run.json"

#: keval's failure classes, in the order the page lists them.
FAILURE_CLASSES = ("compile", "correctness", "runtime", "timeout", "infrastructure",
                   "bad_request", "missing_generation")

#: Entry keys only keval writes: any of them marks a file as keval's, not plain KernelBench's.
KEVAL_KEYS = ("speedup", "failure_class", "flags", "job_id", "status", "response_file",
              "ref_runtime", "methods")

ProblemKey = Tuple[Optional[int], str]  # (level or None, problem id as written)


class ResultsError(Exception):
    """A results file that cannot be read: the message names the file and what is wrong."""


@dataclass
class Sample:
    """One entry of a results file, normalised: absent fields are None, never invented."""

    problem_id: str
    level: Optional[int]
    sample_id: int
    compiled: bool
    correct: bool
    speedup: Optional[float] = None
    speedup_derived: bool = False  # computed from ref_runtime / runtime, not keval's field
    custom_ms: Optional[float] = None  # median when runtime_stats has one, else the mean
    ref_ms: Optional[float] = None
    custom_method: Optional[str] = None
    ref_method: Optional[str] = None
    flags: List[Tuple[str, str]] = field(default_factory=list)
    failure_class: Optional[str] = None
    failure_derived: bool = False  # inferred from compiled/correctness (plain KernelBench)
    error_class: Optional[str] = None
    error_message: Optional[str] = None
    response_file: Optional[str] = None  # absolute path
    job_id: Optional[str] = None
    status: Optional[str] = None
    problem_name: Optional[str] = None
    kernel_type: Optional[str] = None


@dataclass
class Run:
    """One results file and its optional ``keval_run.json``."""

    path: str  # absolute path of the results file
    label: str
    meta: Optional[Dict[str, Any]]
    problems: Dict[ProblemKey, List[Sample]]
    keval_fields: bool  # some entry carries keval's fields
    planned: Optional[Union[int, List[str]]] = None  # keval_run.json's problems: ids or a count
    notes: List[str] = field(default_factory=list)

    @property
    def directory(self) -> str:
        return os.path.dirname(self.path)

    def missing(self) -> int:
        """Planned problems with no entry in the results: KernelBench counts them as failed."""
        if isinstance(self.planned, list):
            present = {pid for _, pid in self.problems}
            return len(set(self.planned) - present)
        if isinstance(self.planned, int):
            return max(0, self.planned - len(self.problems))
        return 0


def _number(value: Any) -> Optional[float]:
    """A finite float, or None: JSON null, strings and KernelBench's -1.0 'not measured'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    if not math.isfinite(value):
        return None
    return value


def _positive(value: Any) -> Optional[float]:
    number = _number(value)
    return number if number is not None and number > 0 else None


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _level(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _ms(stats: Any, mean: Any) -> Optional[float]:
    """The median of a runtime_stats dict when it has one, else the mean runtime."""
    if isinstance(stats, dict):
        median = _positive(stats.get("median"))
        if median is not None:
            return median
        mean_stat = _positive(stats.get("mean"))
        if mean_stat is not None:
            return mean_stat
    return _positive(mean)


def _flags(value: Any) -> List[Tuple[str, str]]:
    flags: List[Tuple[str, str]] = []
    if not isinstance(value, list):
        return flags
    for item in value:
        if isinstance(item, dict):
            flags.append((str(item.get("name", "?")), _text(item.get("reason")) or ""))
        elif isinstance(item, str):
            flags.append((item, ""))
    return flags


def parse_sample(pid: str, entry: Dict[str, Any], default_level: Optional[int],
                 base_dir: str) -> Sample:
    """One entry as a Sample; ``base_dir`` is where response_file paths are relative to."""
    compiled = entry.get("compiled") is True
    correct = entry.get("correctness") is True
    sample_id = entry.get("sample_id")
    level = _level(entry.get("level"))
    sample = Sample(problem_id=pid, level=level if level is not None else default_level,
                    sample_id=sample_id if isinstance(sample_id, int) else 0,
                    compiled=compiled, correct=correct)
    sample.custom_ms = _ms(entry.get("runtime_stats"), entry.get("runtime"))
    sample.ref_ms = _ms(entry.get("ref_runtime_stats"), entry.get("ref_runtime"))
    methods = entry.get("methods") if isinstance(entry.get("methods"), dict) else {}
    for side, stats_key in (("custom", "runtime_stats"), ("ref", "ref_runtime_stats")):
        method = methods.get(side)
        stats = entry.get(stats_key)
        if method is None and isinstance(stats, dict):
            method = stats.get("method")
        setattr(sample, f"{side}_method", _text(method))
    speedup = _positive(entry.get("speedup"))
    if speedup is None and "speedup" not in entry:
        # Only where keval did not say: KernelBench's newer results carry both mean runtimes.
        ref_mean, mean = _positive(entry.get("ref_runtime")), _positive(entry.get("runtime"))
        if ref_mean is not None and mean is not None:
            speedup, sample.speedup_derived = ref_mean / mean, True
    sample.speedup = speedup
    sample.flags = _flags(entry.get("flags"))
    if "failure_class" in entry:
        failure = entry.get("failure_class")
        sample.failure_class = _text(failure) if failure is not None else None
        if sample.failure_class is None and not correct:
            sample.failure_class, sample.failure_derived = (
                "correctness" if compiled else "compile"), True
    elif not correct:
        sample.failure_class = "correctness" if compiled else "compile"
        sample.failure_derived = True
    error = entry.get("error")
    if isinstance(error, dict):
        sample.error_class = _text(error.get("class"))
        sample.error_message = _text(error.get("message"))
    elif isinstance(error, str):
        sample.error_message = error
    elif not correct and isinstance(entry.get("metadata"), dict):
        # Plain KernelBench puts its error text in metadata (compilation_error, runtime_error...).
        metadata = entry["metadata"]
        for key in sorted(metadata):
            if "error" in key and metadata[key]:
                sample.error_class = key
                sample.error_message = _text(metadata[key])
                break
    response = entry.get("response_file")
    if isinstance(response, str) and response:
        sample.response_file = os.path.normpath(os.path.join(base_dir, response))
    for name in ("job_id", "status", "problem_name", "kernel_type"):
        setattr(sample, name, _text(entry.get(name)))
    return sample


def resolve_results_path(arg: str) -> str:
    """A results file given as itself or as the directory that holds ``eval_results.json``."""
    path = os.path.abspath(arg)
    if os.path.isdir(path):
        path = os.path.join(path, RESULTS_NAME)
    if not os.path.isfile(path):
        raise ResultsError(f"{arg}: no such results file (expected {RESULTS_NAME} or a "
                           f"directory holding one)")
    return path


def _read_json(path: str) -> Any:
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ResultsError(f"{path}: cannot read JSON: {exc}") from None


def _planned(meta: Dict[str, Any]) -> Optional[Union[int, List[str]]]:
    """keval_run.json's ``problems``: the selected problem ids (a list) or, tolerated, a count."""
    problems = meta.get("problems")
    if isinstance(problems, bool):
        return None
    if isinstance(problems, int):
        return problems
    if isinstance(problems, list):
        return [str(p) for p in problems if isinstance(p, (int, str)) and not isinstance(p, bool)]
    return None


def load_run(arg: str, label: Optional[str] = None) -> Run:
    """Read one results file (and ``keval_run.json`` beside it, when there is one)."""
    path = resolve_results_path(arg)
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: expected an object of problem ids, each a list of entries")
    meta: Optional[Dict[str, Any]] = None
    notes: List[str] = []
    meta_path = os.path.join(os.path.dirname(path), RUN_META_NAME)
    if os.path.isfile(meta_path):
        loaded = _read_json(meta_path)
        if isinstance(loaded, dict):
            meta = loaded
        else:
            notes.append(f"{RUN_META_NAME} is not an object; ignored")
    default_level = _level(meta.get("level")) if meta else None
    problems: Dict[ProblemKey, List[Sample]] = {}
    keval_fields = False
    for pid, entries in data.items():
        if isinstance(entries, dict):  # tolerate one entry not wrapped in a list
            entries = [entries]
        if not isinstance(entries, list):
            raise ResultsError(f"{path}: problem {pid!r}: expected a list of entries")
        for entry in entries:
            if not isinstance(entry, dict):
                raise ResultsError(f"{path}: problem {pid!r}: an entry is not an object")
            keval_fields = keval_fields or any(key in entry for key in KEVAL_KEYS)
            sample = parse_sample(str(pid), entry, default_level, os.path.dirname(path))
            problems.setdefault((sample.level, str(pid)), []).append(sample)
    if label is None:
        label = default_label(path, meta)
    run = Run(path=path, label=label, meta=meta, problems=problems, keval_fields=keval_fields,
              planned=_planned(meta) if meta else None, notes=notes)
    return run


def default_label(path: str, meta: Optional[Dict[str, Any]]) -> str:
    """The run's name from keval_run.json, else the name of the directory holding the file."""
    if meta and isinstance(meta.get("run_name"), str) and meta["run_name"]:
        return meta["run_name"]
    directory = os.path.basename(os.path.dirname(path))
    if os.path.basename(path) == RESULTS_NAME and directory:
        return directory
    return os.path.basename(path)


def load_runs(args: Sequence[str], labels: Optional[Sequence[str]] = None) -> List[Run]:
    """Every results file, labels made unique so the page's columns can be told apart."""
    if labels is not None and len(labels) != len(args):
        raise ResultsError(f"{len(labels)} labels for {len(args)} results files: give one "
                           f"--label per results file, in order")
    runs = [load_run(arg, labels[i] if labels is not None else None)
            for i, arg in enumerate(args)]
    seen: Dict[str, int] = {}
    for run in runs:
        count = seen.get(run.label, 0) + 1
        seen[run.label] = count
        if count > 1:
            run.label = f"{run.label} #{count}"
    return runs


def problem_sort_key(key: ProblemKey) -> Tuple[int, int, Any]:
    """Levels in order (unknown last), then problem ids numerically where they are numbers."""
    level, pid = key
    level_key = level if level is not None else 1 << 30
    return (level_key, 0, int(pid)) if pid.isdigit() else (level_key, 1, pid)
