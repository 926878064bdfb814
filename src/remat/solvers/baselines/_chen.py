"""Chen et al.'s checkpoint heuristics: sqrt(n) segments, and greedy segments under a memory budget.

Both pick checkpoints among candidate forward nodes and hand them to the segment retention of
:mod:`._segments`. The candidates are every forward node in execution order ("linearized"; on a
chain this is Chen's own setting) or the articulation points of the forward graph ("ap").

References
----------
Chen, Xu, Zhang and Guestrin, "Training deep nets with sublinear memory cost", arXiv 1604.06174,
2016, section 4 (sqrt(n) and the greedy memory-budget planner); Jain et al., "Checkmate", MLSys
2020, Table 1 (the AP and linearized generalizations).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from math import isqrt

import numpy as np

from remat.schedules import MAX_TOTAL_BYTES, Graph

from .._context import Outcome, SolveContext
from .._options import Option
from ._articulation import articulation_points
from ._knob import search_knob
from ._segments import segment_schedule

__all__ = [
    "SEGMENT_BUDGET",
    "SEGMENT_BUDGET_OPTION",
    "ap_greedy",
    "ap_sqrtn",
    "greedy_checkpoints",
    "linearized_greedy",
    "linearized_sqrtn",
    "segment_budgets",
    "sqrtn_checkpoints",
]

SEGMENT_BUDGET = "segment_budget"
SEGMENT_BUDGET_OPTION = Option.whole("pin the segment budget (bytes) instead of searching it", most=MAX_TOTAL_BYTES)
"""The greedy knob: bytes of forward output a segment may hold before the next checkpoint."""

EXACT_CANDIDATES = 64
"""With at most this many candidates every segment budget where the greedy choice changes is
tried; with more, a geometric grid of :data:`GRID_POINTS` budgets is. (docs/tuning.md)"""

GRID_POINTS = 160
"""Segment budgets of the geometric grid tried beyond :data:`EXACT_CANDIDATES` candidates. (docs/tuning.md)"""


def sqrtn_checkpoints(candidates: Sequence[int]) -> tuple[int, ...]:
    """Every k-th candidate, k = floor(sqrt(#candidates)): about sqrt(n) segments of sqrt(n) candidates.

    >>> sqrtn_checkpoints(range(10))
    (2, 5, 8)
    """
    k = isqrt(len(candidates))
    return tuple(candidates[k - 1::k]) if k else ()


def greedy_checkpoints(graph: Graph, candidates: Sequence[int], segment_budget: int) -> tuple[int, ...]:
    """Chen's greedy planner: walk the forward nodes adding up output sizes; once the running sum
    exceeds ``segment_budget``, the next candidate reached becomes a checkpoint and the sum restarts.

    >>> from remat.schedules import Graph
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": str(i), "deps": [str(i - 1)] if i else [], "cost": 1, "memory": 2} for i in range(6)]})
    >>> greedy_checkpoints(g, range(6), 3)
    (1, 3, 5)
    """
    return _walk(*_running_sums(graph, candidates), segment_budget)


def segment_budgets(graph: Graph, candidates: Sequence[int]) -> list[int]:
    """The greedy knob values to try, ascending, from "every candidate" (0) to "none" (the total).

    The greedy choice changes only where the budget crosses a difference of two running sums, so
    with few candidates those differences are exactly the values worth trying; with many, a
    geometric grid between the smallest output and the total stands in for them.
    """
    running, _ = _running_sums(graph, candidates)
    if len(running) == 0:
        return [0]
    total = int(running[-1])
    if len(running) <= EXACT_CANDIDATES:
        starts = np.concatenate(([0], running))
        gaps = running[None, :] - starts[:, None]
        return sorted(int(d) for d in np.unique(gaps[gaps >= 0]))
    memory = graph.memory[list(graph.forward_nodes)]
    smallest = int(memory[memory > 0].min()) if (memory > 0).any() else 1
    grid = np.geomspace(smallest, max(total, smallest), GRID_POINTS).astype(np.int64)
    return sorted({0, total, *(int(b) for b in grid)})


def linearized_sqrtn(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """Chen's sqrt(n) over every forward node in execution order (on a chain: Chen's own heuristic)."""
    return Outcome(segment_schedule(graph, sqrtn_checkpoints(graph.forward_nodes)))


def ap_sqrtn(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """Chen's sqrt(n) over the articulation points of the forward graph."""
    return Outcome(segment_schedule(graph, sqrtn_checkpoints(articulation_points(graph))))


def linearized_greedy(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """Chen's greedy over every forward node, its segment budget searched for the cheapest fit."""
    return _greedy(graph, budget, ctx, graph.forward_nodes)


def ap_greedy(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """Chen's greedy over the articulation points, its segment budget searched for the cheapest fit."""
    return _greedy(graph, budget, ctx, articulation_points(graph))


def _greedy(graph: Graph, budget: int, ctx: SolveContext, candidates: Sequence[int]) -> Outcome:
    running, positions = _running_sums(graph, candidates)

    @cache
    def checkpoints(segment_budget: int) -> tuple[int, ...]:
        return _walk(running, positions, segment_budget)

    return search_knob(
        graph, budget, ctx,
        knob=SEGMENT_BUDGET,
        values=segment_budgets(graph, candidates),
        build=lambda b: segment_schedule(graph, checkpoints(b)),
        key=checkpoints,
    )


def _walk(running: np.ndarray, positions: list[int], segment_budget: int) -> tuple[int, ...]:
    """The greedy walk over candidate running sums: each checkpoint is the first candidate whose sum
    since the previous checkpoint exceeds the budget."""
    if len(running) == 0:
        return ()
    budget = min(segment_budget, int(running[-1]))  # a larger budget chooses nothing, as this one does
    following = np.searchsorted(running, running + budget, side="right").tolist()  # after a checkpoint at j
    chosen: list[int] = []
    j = int(np.searchsorted(running, budget, side="right"))
    while j < len(running):
        chosen.append(positions[j])
        j = following[j]
    return tuple(chosen)


def _running_sums(graph: Graph, candidates: Sequence[int]) -> tuple[np.ndarray, list[int]]:
    """Running sums of forward output sizes, read at each candidate (ascending), and the candidates."""
    forward = list(graph.forward_nodes)
    total = np.cumsum(graph.memory[forward])
    where = {v: k for k, v in enumerate(forward)}
    positions = sorted(set(candidates))
    return total[[where[v] for v in positions]].astype(np.int64), positions

