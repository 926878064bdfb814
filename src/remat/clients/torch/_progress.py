"""One progress line on stderr for a solve that takes more than a second.

On a terminal the line is rewritten in place as better plans come; elsewhere (a log file, a
notebook's captured stream) one line is written when the solve passes a second and one when it ends.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from remat.solvers import Progress

__all__ = ["ProgressLine"]


class ProgressLine:
    """Shows a solve's progress once it has taken ``after_s`` seconds; silent for quicker ones."""

    def __init__(self, what: str, base_cost: float, *, after_s: float = 1.0, stream: TextIO | None = None) -> None:
        self.what = what
        self.base_cost = base_cost
        self.after_s = after_s
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.shown = False
        self._last: Progress | None = None
        self._live = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, progress: Progress) -> None:
        """Take a progress report from the solver; draw it when due."""
        if progress.incumbent_cost is not None or self._last is None:
            self._last = progress
        if time.monotonic() - self.started < self.after_s:
            return
        if self._live or not self.shown:
            self._draw("\r" if self._live else "")
        self.shown = True

    def close(self, summary: str) -> None:
        """End the line with ``summary`` if anything was shown."""
        if self.shown:
            prefix, clear = ("\r", "\x1b[K") if self._live else ("", "")
            self.stream.write(f"{prefix}remat: {self.what}: {summary}{clear}\n")
            self.stream.flush()

    def _draw(self, prefix: str) -> None:
        elapsed = time.monotonic() - self.started
        text = f"remat: {self.what}: {elapsed:.0f} s"
        last = self._last
        if last is not None and last.incumbent_cost is not None and self.base_cost > 0:
            text += f", best plan {last.incumbent_cost / self.base_cost:.3f}x the step's compute"
            if last.lower_bound is not None:
                text += f" (bound {last.lower_bound / self.base_cost:.3f}x)"
        elif last is not None:
            text += ", no plan yet"
        end = "\x1b[K" if self._live else "\n"
        self.stream.write(prefix + text + end)
        self.stream.flush()
