"""What every solver backend is given and hands back.

A backend module (``_highs``, ``_cpsat``...) imports its engine in a try block and exposes one
function, ``solve(model, limits, on_progress) -> BackendResult``, which runs in a solver process
(see ``_process``); the parent never imports an engine. ``solve`` raises BackendUnavailable
carrying the import error when its engine is missing, or when its licence cannot take the model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from .._watch import watching

__all__ = ["BackendResult", "EngineStatus", "Limits", "ProgressCallback", "SolverProgress", "on_stop"]

STOP_POLL_S = 0.05
"""Seconds between two looks at a run's stop flag while an engine runs. (docs/tuning.md)"""


class EngineStatus(StrEnum):
    """How an engine run ended, in the one vocabulary all backends translate into."""

    OPTIMAL = "optimal"
    """The solution is proved optimal within the requested relative gap."""
    FEASIBLE = "feasible"
    """A solution was found; a limit or a stop request ended the search before the proof."""
    INFEASIBLE = "infeasible"
    """Proved: the model has no solution."""
    NO_SOLUTION = "no_solution"
    """A limit or a stop request ended the search before any solution was found."""


@dataclass
class Limits:
    """The limits of one engine run. ``stop`` is set (from another thread) to end it early.

    ``time_limit_s`` counts from when the limits were made; in a solver process that is when the
    request arrived, so an engine gives its search only :meth:`remaining_s` after loading the model.
    """

    time_limit_s: float
    mip_gap: float
    threads: int
    stop: threading.Event = field(default_factory=threading.Event)
    created: float = field(default_factory=time.monotonic)

    def remaining_s(self) -> float:
        """Seconds left for the search (at least 0.01, which engines accept as a limit)."""
        return max(0.01, self.time_limit_s - (time.monotonic() - self.created))

    def picklable(self) -> dict[str, float | int]:
        return {"time_limit_s": self.time_limit_s, "mip_gap": self.mip_gap, "threads": self.threads}


@dataclass(frozen=True)
class SolverProgress:
    """An engine's report during a run, in model units.

    ``objective`` is the incumbent's objective (offset included) and ``watched`` the incumbent's
    values of the model's watched variables, when the engine found a new one; ``bound`` is the
    best proved lower bound.
    """

    elapsed_s: float
    objective: float | None = None
    bound: float | None = None
    watched: np.ndarray | None = None


ProgressCallback = Callable[[SolverProgress], None]


@dataclass
class BackendResult:
    """The end of an engine run: status, the solution, its objective and the best proved bound.

    ``x`` holds every variable when the engine returned a solution; ``watched`` holds the model's
    watched variables, from ``x`` or, when the engine was killed, from its last reported incumbent.
    """

    status: EngineStatus
    x: np.ndarray | None = None
    objective: float | None = None
    bound: float | None = None
    watched: np.ndarray | None = None
    log: list[str] = field(default_factory=list)


def on_stop(limits: Limits, action: Callable[[], None]) -> AbstractContextManager[None]:
    """While the block runs, call ``action`` (an engine's own interrupt) once ``limits.stop`` is set."""
    return watching(limits.stop.is_set, action, every_s=STOP_POLL_S, name="remat-stop-watch")
