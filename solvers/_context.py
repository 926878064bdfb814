"""What a strategy is given besides the graph and budget, and what it hands back.

A strategy is a plain function ``run(graph, budget, ctx) -> Outcome``. The context carries the
user's limits (time, gap, threads, backend, strategy options), a stop flag that the job runner
sets on cancel, and a progress sink. The outcome is the best schedule found plus what the
strategy proved about it; :func:`remat.solvers.solve` turns it into a simulated result.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remat.schedules import Schedule

__all__ = ["DEFAULT_MIP_GAP", "DEFAULT_TIME_LIMIT_S", "Outcome", "Progress", "SolveContext"]

DEFAULT_TIME_LIMIT_S = 60.0
"""Seconds a solve may take when the request names no limit."""

DEFAULT_MIP_GAP = 1e-4
"""Relative gap at which a MILP solve counts as proved optimal."""


@dataclass(frozen=True)
class Progress:
    """A snapshot of a running solve: elapsed seconds, best cost so far, best proved bound, gap."""

    elapsed_s: float
    incumbent_cost: float | None = None
    lower_bound: float | None = None
    gap: float | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "elapsed_s": round(self.elapsed_s, 3),
            "incumbent_cost": self.incumbent_cost,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "message": self.message,
        }


@dataclass
class SolveContext:
    """Limits and control handles for one solve."""

    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    mip_gap: float = DEFAULT_MIP_GAP
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    backend: str = "auto"
    options: Mapping[str, Any] = field(default_factory=dict)
    stop_event: threading.Event = field(default_factory=threading.Event)
    on_progress: Callable[[Progress], None] | None = None
    started: float = field(default_factory=time.monotonic)
    log: list[str] = field(default_factory=list)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def remaining_s(self) -> float:
        """Seconds left before the time limit (never negative)."""
        return max(0.0, self.time_limit_s - self.elapsed_s())

    def stopped(self) -> bool:
        """True once the solve was cancelled or ran out of time."""
        return self.stop_event.is_set() or self.remaining_s() <= 0.0

    def report(self, *, incumbent_cost: float | None = None, lower_bound: float | None = None,
               message: str | None = None) -> None:
        """Pass a progress snapshot to the sink, if there is one."""
        gap = None
        if incumbent_cost is not None and lower_bound is not None and incumbent_cost > 0:
            gap = max(0.0, (incumbent_cost - lower_bound) / incumbent_cost)
        if message:
            self.log.append(message)
        if self.on_progress is not None:
            self.on_progress(Progress(self.elapsed_s(), incumbent_cost, lower_bound, gap, message))


@dataclass
class Outcome:
    """What a strategy found.

    ``schedule`` is the best schedule (None when nothing was found); ``optimal`` and
    ``infeasible`` are proofs, never guesses; ``lower_bound`` is a proved bound on cost;
    ``fallback`` names the strategy whose schedule this is when it is not the one asked for.
    """

    schedule: Schedule | None
    optimal: bool = False
    infeasible: bool = False
    lower_bound: float | None = None
    backend: str | None = None
    fallback: str | None = None
    log: list[str] = field(default_factory=list)
