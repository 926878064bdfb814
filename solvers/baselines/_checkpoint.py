"""The two ends of the trade-off: keep everything, or keep only the newest value."""

from __future__ import annotations

import numpy as np

from remat.schedules import Graph, Schedule, checkpoint_all_schedule, recompute_closure

from .._context import Outcome, SolveContext

__all__ = ["checkpoint_all", "checkpoint_last", "checkpoint_last_schedule"]


def checkpoint_all(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """No rematerialization: every node once, each value kept until its last use (overhead 1)."""
    return Outcome(checkpoint_all_schedule(graph))


def checkpoint_last_schedule(graph: Graph) -> Schedule:
    """Keep only the value computed last (when anything still reads it); recompute all else per stage."""
    n = graph.size
    S = np.zeros((n, n), dtype=bool)
    for t in range(n - 1):
        if graph.last_use[t] > t:
            S[t + 1, t] = True
    return Schedule(recompute_closure(graph, S), S)


def checkpoint_last(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """Minimum-memory baseline of the Checkmate paper: quadratic recomputation, smallest footprint."""
    return Outcome(checkpoint_last_schedule(graph))
