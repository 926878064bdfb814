"""Solving the joint keep / recompute / offload MILP (:mod:`._offload_model`) until its plan fits.

The model counts memory stage by stage, but the simulator lets the compute stream run ahead of a
slow offload, so the engine's answer can simulate over the budget. When it does, and it is cheaper
than every incumbent that fits, the model is solved again with its budget lowered by the excess, a
few times at most. Every incumbent of every round is simulated; the cheapest that fits is returned.
"""

from __future__ import annotations

import math

from remat.schedules import Graph, Transfer, format_size, plan_from_schedule, simulate

from .._context import Outcome, SolveContext
from .._warm import WarmStart
from ._milp import run_model
from ._offload_model import build_offload_model

__all__ = ["ROUNDS", "solve_offload_milp"]

ROUNDS = 4
"""Most solves of the model, each with the budget lowered by the previous answer's simulated excess. (docs/tuning.md)"""


def solve_offload_milp(graph: Graph, budget: int, transfer: Transfer, ctx: SolveContext,
                       warm: WarmStart | None) -> Outcome:
    """The cheapest plan within ``budget`` among the joint MILP's solutions, warm-started from ``warm``'s schedule.

    The outcome proves nothing (no bound, never ``optimal`` or ``infeasible``): the model's time and memory
    are the stage-by-stage approximation of what the simulator measures.
    """
    best, best_cost = Outcome(None), math.inf
    target = budget
    for _ in range(ROUNDS):
        model = build_offload_model(graph, target, transfer, ctx.stopped, host_budget=ctx.offload.host_budget)
        if model is None:
            break
        start = model.encode(warm.schedule) if warm is not None else None
        outcome, last = run_model(model, ctx, start=start, budget=budget)
        if outcome.found and (cost := _simulated_cost(graph, outcome, transfer)) < best_cost:
            best, best_cost = outcome, cost
        if last is None or ctx.stopped():
            break
        excess = last.simulation.peak_memory - budget
        if excess <= 0 or last.simulation.cost >= best_cost or target - excess < graph.min_feasible_budget:
            break
        target -= excess
        ctx.report(message=f"the MILP's plan simulates {format_size(excess)} over the budget: solving again with "
                           f"the model's budget at {format_size(target)}")
    return best


def _simulated_cost(graph: Graph, outcome: Outcome, transfer: Transfer) -> float:
    """The simulated cost of what ``outcome`` found."""
    plan = outcome.plan if outcome.schedule is None else plan_from_schedule(graph, outcome.schedule)
    assert plan is not None
    return simulate(graph, plan, transfer=transfer).cost
