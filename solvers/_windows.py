"""Proofs that no schedule fits a budget, from the Checkmate MILP over a few stages.

The MILP over a window of stages (:func:`build_checkmate_model` with ``stages``) is a relaxation,
so when it has no solution no schedule fits. A few stages suffice where the budget is close to the
memory floor: the stage of the node with the largest compute footprint then has no room to keep
anything for the next stages, and what they must recompute instead does not fit either (on rl250
at budget ratio 0.6, stages 247 to 249 show it in about 30 s on one thread, where neither the full
MILP nor any heuristic answers). Windows are tried around the nodes with the largest footprints,
narrow ones first.

Needs highspy, so it runs in a process without OR-Tools (a helper of the anneal path).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from remat.schedules import Graph

from ._context import SolveContext
from ._milp_model import build_checkmate_model
from .backends import EngineStatus, Limits

__all__ = ["CENTRES", "WIDTHS", "prove_infeasible"]

WIDTHS = (3, 5, 9)
"""Window sizes tried, in stages, around each centre."""

CENTRES = 3
"""How many of the nodes with the largest compute footprint are window centres."""


def prove_infeasible(graph: Graph, budget: int, ctx: SolveContext) -> range | None:
    """A window of stages that no schedule within ``budget`` can run, or None if none was found before ``ctx`` stops.

    Examples
    --------
    Not run as doctests (importing highspy would keep OR-Tools out of the test process); see
    tests/solvers/test_windows.py.

    >>> g = Graph.from_path("benchmarks/graphs/rl250.json")  # doctest: +SKIP
    >>> prove_infeasible(g, resolve_budget(g, budget_ratio=0.6), SolveContext(time_limit_s=30))  # doctest: +SKIP
    range(247, 250)
    """
    from .backends._highs import solve as highs_solve

    n = graph.size
    centres = np.argsort(-graph.compute_footprint, kind="stable")[:CENTRES]
    for width in WIDTHS:
        for centre in centres:
            first = max(0, min(int(centre) - width // 2, n - width))
            stages = range(first, min(n, first + width))
            model = build_checkmate_model(graph, budget, ctx.stopped, stages=stages)
            if model is None or ctx.stopped():
                return None
            if not model.memory.exact:  # sizes rounded up: an infeasible model proves nothing
                return None
            # Only whether a solution exists matters: no objective, and the first solution ends the search.
            feasibility = dataclasses.replace(model.milp, objective=np.zeros(model.milp.n_vars))
            result = highs_solve(feasibility, Limits(time_limit_s=ctx.remaining_s(), mip_gap=1.0, threads=1,
                                                      stop=ctx.stop_event),
                                 lambda _: None)
            if result.status is EngineStatus.INFEASIBLE:
                return stages
    return None
