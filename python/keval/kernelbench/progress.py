"""The progress display on stderr: one updating line on a terminal, one line per job otherwise.

A run of a hundred problems takes minutes to hours; the user wants to see that it moves and how
it is going (correct so far, failures) without scrolling. In a log file (CI, ``nohup``) a
carriage-return line would be one unreadable line, so there each finished sample is a line of
its own, which is also what the tests read.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Dict, Optional, TextIO

__all__ = ["Progress"]


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


class Progress:
    """Counts of finished samples, printed as they change. Thread-safe.

    ``tty`` defaults to whether ``stream`` is a terminal. ``finish`` ends the updating line so
    that the summary starts on a fresh one.
    """

    def __init__(self, total: int, stream: Optional[TextIO] = None, tty: Optional[bool] = None,
                 width: int = 100):
        self.stream = stream if stream is not None else sys.stderr
        if tty is None:
            try:
                tty = self.stream.isatty()
            except (AttributeError, ValueError):
                tty = False
        self.tty = bool(tty)
        self.total = total
        self.width = width
        self.done = 0
        self.correct = 0
        self.compile_failures = 0
        self.errors = 0  # infrastructure, timeout, bad_request: failures of the run, not verdicts
        self.other_failures = 0
        self.evaluated = 0  # finished through keval: the rate counts these, not instant records
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._lock = threading.Lock()
        self._drawn = False

    def _counts_text(self) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.evaluated / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else None
        text = (f"{self.done}/{self.total} done, {self.correct} correct, "
                f"{self.compile_failures} compile failed, {self.errors} errors")
        text += f" | {_duration(elapsed)}"
        if rate > 0:
            text += f", {rate * 60:.1f}/min"
        text += f", ETA {_duration(eta)}" if eta is not None and self.done < self.total else ""
        return text

    def start(self) -> None:
        """Show the empty bar on a terminal, so that the first slow job does not look hung."""
        with self._lock:
            if self.tty:
                self._draw()

    def tick(self) -> None:
        """Redraw the terminal line about once a second, so elapsed time and ETA move while
        long jobs run; nothing when not on a terminal."""
        if not self.tty:
            return
        with self._lock:
            if self._drawn and time.monotonic() - self._last_draw >= 1.0:
                self._draw()

    def update(self, problem_id: int, sample_id: int, entry: Dict[str, Any],
               evaluated: bool = True) -> None:
        """Count one finished sample (an eval_results entry) and show it. ``evaluated``: it went
        through keval (a missing generation is recorded at once and says nothing of the rate)."""
        cls = entry.get("failure_class")
        with self._lock:
            self.done += 1
            self.evaluated += bool(evaluated)
            if cls is None and entry.get("correctness"):
                self.correct += 1
            elif cls == "compile":
                self.compile_failures += 1
            elif cls in ("infrastructure", "timeout", "bad_request"):
                self.errors += 1
            else:
                self.other_failures += 1
            if self.tty:
                self._draw()
            else:
                verdict = "correct" if cls is None else cls
                speedup = entry.get("speedup")
                extra = f" speedup {speedup:.2f}x" if isinstance(speedup, float) else ""
                self.stream.write(f"[{self.done}/{self.total}] problem {problem_id} sample "
                                  f"{sample_id}: {verdict}{extra} ({self._counts_text()})\n")
                self.stream.flush()

    def note(self, text: str) -> None:
        """A message between updates (a retry, the daemon gone) without tearing the bar."""
        with self._lock:
            if self.tty and self._drawn:
                self.stream.write("\r\x1b[K")
            self.stream.write(text.rstrip("\n") + "\n")
            if self.tty:
                self._draw()
            self.stream.flush()

    def _draw(self) -> None:
        frac = self.done / self.total if self.total else 1.0
        bar_width = 20
        filled = int(round(frac * bar_width))
        line = f"[{'#' * filled}{'.' * (bar_width - filled)}] {self._counts_text()}"
        self.stream.write("\r\x1b[K" + line[: max(self.width, 40)])
        self.stream.flush()
        self._drawn = True
        self._last_draw = time.monotonic()

    def finish(self) -> None:
        with self._lock:
            if self.tty and self._drawn:
                self.stream.write("\n")
                self.stream.flush()
                self._drawn = False
