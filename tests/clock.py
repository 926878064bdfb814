"""A simulated clock for job stores (``clock=``) in tests and benchmarks."""

from __future__ import annotations


class Clock:
    """Seconds since the epoch, moved on by hand."""

    def __init__(self, now: float = 1.7e9) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
