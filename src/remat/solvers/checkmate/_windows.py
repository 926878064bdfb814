"""Proofs that no schedule fits a budget, from the Checkmate MILP over a few stages.

The MILP over a window of stages (:func:`build_checkmate_model` with ``stages``) is a relaxation,
so when it has no solution no schedule fits. A few stages suffice where the budget is close to the
memory floor: computing the node with the largest compute footprint leaves almost no room, so its
inputs must reach its stage with little else resident, and the stages around it cannot arrange that.
On rl250 at budget ratio 0.6 (floor 0.597) stages 247 and 248 show it on one thread, where neither
the full MILP nor any heuristic answers (benchmarks/LOG.md, 2026-11-22 08:30 UTC). Windows are tried
around the nodes whose footprint is close to the budget, narrow ones first (wider ones prove more but
take longer: stages 247 to 249 take several times as long).

Needs highspy, so it runs in a process without OR-Tools (a helper of the anneal path).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from remat.schedules import Graph

from .._context import SolveContext
from ..backends import EngineStatus, Limits, get_backend
from ._model import MemoryScale, build_checkmate_model

__all__ = ["CENTRES", "NEAR_FLOOR", "WIDTHS", "prove_infeasible"]

NEAR_FLOOR = 1.1
"""A node is a window centre when the budget is at most this multiple of its compute footprint
(fixed memory included); further above it, a few stages always have room. (docs/tuning.md)"""

CENTRES = 3
"""Most window centres, the largest footprints first. (docs/tuning.md)"""

WIDTHS = (2, 3, 5, 9)
"""Window sizes tried, in stages, around each centre. (docs/tuning.md)"""


def prove_infeasible(graph: Graph, budget: int, ctx: SolveContext) -> range | None:
    """A window of stages that no schedule within ``budget`` can run, or None if none was found before ``ctx`` stops.

    Returns None at once when the budget is over :data:`NEAR_FLOOR` times every node's footprint, or
    when memory sizes must be rounded up to fit the model (an infeasible model would prove nothing).

    Examples
    --------
    Not run as doctests (importing highspy would keep OR-Tools out of the test process); see
    tests/solvers/test_windows.py.

    >>> g = Graph.from_path("benchmarks/graphs/rl250.json")  # doctest: +SKIP
    >>> ctx = SolveContext(SolveLimits(time_limit_s=30))  # doctest: +SKIP
    >>> prove_infeasible(g, resolve_budget(g, budget_ratio=0.6), ctx)  # doctest: +SKIP
    range(247, 249)
    """
    if not MemoryScale.of(graph, budget).exact:
        return None
    n = graph.size
    footprint = graph.compute_footprint + graph.fixed_memory
    heavy = np.flatnonzero(NEAR_FLOOR * footprint >= budget)
    centres = heavy[np.argsort(-footprint[heavy], kind="stable")][:CENTRES]
    tried: set[range] = set()
    for width in WIDTHS:
        for centre in centres:
            first = max(0, min(int(centre) - width // 2, n - width))
            stages = range(first, min(n, first + width))
            if stages in tried:  # small graphs: a wider window is the same one
                continue
            tried.add(stages)
            model = build_checkmate_model(graph, budget, ctx.stopped, stages=stages)
            if model is None or ctx.stopped():
                return None
            # Only whether a solution exists matters: no objective, and the first solution ends the search.
            feasibility = dataclasses.replace(model.milp, objective=np.zeros(model.milp.n_vars))
            limits = Limits(time_limit_s=ctx.remaining_s(), mip_gap=1.0, threads=1, stop=ctx.stop_event)
            result = get_backend("highs").solve(feasibility, limits, lambda _: None)
            if result.status is EngineStatus.INFEASIBLE:
                return stages
    return None
