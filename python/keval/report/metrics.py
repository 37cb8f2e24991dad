"""KernelBench's metrics over a loaded run: compiled and correct rates, fast_p, geometric mean.

Definitions follow KernelBench (src/kernelbench/score.py, scripts/benchmark_eval_analysis.py):
fast_p is the fraction of *all* problems (the denominator is every problem attempted, failed ones
included) whose kernel is correct and whose speedup (reference time / kernel time) exceeds p; the
geometric mean speedup is taken over correct kernels only.

KernelBench scores sample 0 only. With several samples per problem this report by default keeps,
per problem, the best sample (correct before incorrect, then the highest speedup, then compiled
before not compiled, then the lowest sample id), which is best-of-n and says so on the page;
``policy="first"`` keeps KernelBench's sample-0 reading.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .load import FAILURE_CLASSES, ProblemKey, Run, Sample, problem_sort_key

POLICIES = ("best", "first")
#: Thresholds shown in the headline table (fast_0 is "correct and any measured speedup").
HEADLINE_P = (0.0, 1.0, 1.5, 2.0)
CORRECT = "correct"


def choose_sample(samples: Sequence[Sample], policy: str = "best") -> Sample:
    """The one sample a problem is scored by (see the module docstring for why)."""
    if not samples:
        raise ValueError("a problem without samples")
    if policy == "first":
        return min(samples, key=lambda s: s.sample_id)
    if policy != "best":
        raise ValueError(f"unknown sample policy {policy!r} (one of {', '.join(POLICIES)})")

    def rank(s: Sample) -> Tuple[bool, float, bool, int]:
        speed = s.speedup if (s.correct and s.speedup is not None) else -math.inf
        return (s.correct, speed, s.compiled, -s.sample_id)

    return max(samples, key=rank)


def verdict(sample: Sample) -> str:
    """'correct', or the failure class ('other' where keval wrote none we know of)."""
    if sample.correct and sample.failure_class is None:
        return CORRECT
    if sample.failure_class is None:
        return "other"
    return sample.failure_class


def geometric_mean(values: Sequence[float]) -> Optional[float]:
    """exp(mean(log v)); None for no values (KernelBench reports 0 there, which reads as data)."""
    positive = [v for v in values if v > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def fast_p(speedups_sorted: Sequence[float], n: int, p: float) -> Optional[float]:
    """Fraction of the n problems whose correct kernel has speedup > p (strictly)."""
    if n <= 0:
        return None
    above = len(speedups_sorted) - bisect.bisect_right(speedups_sorted, p)
    return above / n


@dataclass
class LevelCounts:
    """Per level: how many problems, compiled, correct, and each verdict."""

    problems: int = 0
    compiled: int = 0
    correct: int = 0
    fast_1: int = 0
    verdicts: Dict[str, int] = field(default_factory=dict)


@dataclass
class RunMetrics:
    """Everything the page shows about one run, computed once."""

    run: Run
    policy: str
    chosen: Dict[ProblemKey, Sample]
    n: int  # the fast_p denominator: problems attempted
    missing: int  # planned in keval_run.json but absent from the results: counted as failed
    compiled: int
    correct: int
    speedups: List[float]  # of correct chosen samples with a measured speedup, sorted
    correct_without_speedup: int
    derived_speedups: int  # how many of those speedups came from ref_runtime / runtime
    max_samples: int
    levels: Dict[Optional[int], LevelCounts]
    verdicts: Dict[str, int]
    flags_chosen: Dict[str, int]  # problems whose chosen sample carries the flag
    flags_all: Dict[str, int]  # samples carrying the flag, every sample counted

    @property
    def has_speedups(self) -> bool:
        return bool(self.speedups)

    def fast(self, p: float) -> Optional[float]:
        return fast_p(self.speedups, self.n, p) if self.has_speedups else None

    @property
    def geomean(self) -> Optional[float]:
        return geometric_mean(self.speedups)

    @property
    def geomean_faster(self) -> Optional[float]:
        return geometric_mean([s for s in self.speedups if s > 1])

    @property
    def median_speedup(self) -> Optional[float]:
        if not self.speedups:
            return None
        values, mid = self.speedups, len(self.speedups) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    def rate(self, count: int) -> Optional[float]:
        return count / self.n if self.n else None

    def curve(self) -> Tuple[List[float], List[float]]:
        """The fast_p step function's corners: fast_p(p) for p just below/at each speedup."""
        xs: List[float] = [0.0]
        ys: List[float] = [self.fast(0.0) or 0.0]
        for s in sorted(set(self.speedups)):
            xs.append(s)
            ys.append(fast_p(self.speedups, self.n, s) or 0.0)
        return xs, ys


def compute(run: Run, policy: str = "best") -> RunMetrics:
    """The metrics of one run under a sample policy."""
    chosen = {key: choose_sample(samples, policy) for key, samples in
              sorted(run.problems.items(), key=lambda kv: problem_sort_key(kv[0]))}
    missing = run.missing()
    n = len(chosen) + missing
    speedups: List[float] = []
    levels: Dict[Optional[int], LevelCounts] = {}
    verdicts: Dict[str, int] = {}
    flags_chosen: Dict[str, int] = {}
    flags_all: Dict[str, int] = {}
    compiled = correct = without = derived = 0
    for key, sample in chosen.items():
        v = verdict(sample)
        level = levels.setdefault(key[0], LevelCounts())
        level.problems += 1
        level.verdicts[v] = level.verdicts.get(v, 0) + 1
        verdicts[v] = verdicts.get(v, 0) + 1
        if sample.compiled:
            compiled += 1
            level.compiled += 1
        if v == CORRECT:
            correct += 1
            level.correct += 1
            if sample.speedup is None:
                without += 1
            else:
                speedups.append(sample.speedup)
                derived += sample.speedup_derived
                level.fast_1 += sample.speedup > 1.0
        for name in sorted({name for name, _ in sample.flags}):
            flags_chosen[name] = flags_chosen.get(name, 0) + 1
    for samples in run.problems.values():
        for sample in samples:
            for name in sorted({name for name, _ in sample.flags}):
                flags_all[name] = flags_all.get(name, 0) + 1
    if missing:
        verdicts["missing_from_results"] = missing
    return RunMetrics(
        run=run, policy=policy, chosen=chosen, n=n, missing=missing, compiled=compiled,
        correct=correct, speedups=sorted(speedups), correct_without_speedup=without,
        derived_speedups=derived,
        max_samples=max((len(s) for s in run.problems.values()), default=0),
        levels=levels, verdicts=verdicts, flags_chosen=flags_chosen, flags_all=flags_all)


def verdict_order(metrics: Sequence[RunMetrics]) -> List[str]:
    """Verdicts in a stable order: correct, keval's classes, then anything else seen."""
    seen = {v for m in metrics for v in m.verdicts}
    for m in metrics:
        for level in m.levels.values():
            seen.update(level.verdicts)
    order = [CORRECT] + list(FAILURE_CLASSES)
    extra = sorted(seen - set(order))
    return [v for v in order if v in seen] + extra
