"""The ``anneal-milp`` path of the checkmate strategy: a short anneal, then the exact MILP from it.

On graphs small enough for the Checkmate MILP to be proved, the engine still needs a good
incumbent to prune with, and the baselines are poor ones. A few seconds of annealing (from the
best baseline) usually find the optimum or come close; the MILP, warm-started from that plan,
then proves it or improves on it. Whatever the engine finds, the plan returned is never worse
than the anneal's, and progress never reports an incumbent worse than the one already found.
"""

from __future__ import annotations

import dataclasses

from remat.schedules import Graph, simulate_schedule

from .._context import Outcome, Progress, SolveContext, relative_gap
from .._warm import WarmStart
from ..search import anneal
from ._milp import solve_milp

__all__ = ["ANNEAL_MAX_S", "ANNEAL_SEEDS", "ANNEAL_SHARE", "MILP_NODES", "MOVES_PER_NODE", "anneal_then_milp"]

MILP_NODES = 100
"""Largest graph (in nodes) that checkmate hands to this path by default; larger ones go to ``anneal``.
(docs/tuning.md)"""

ANNEAL_SHARE = 0.2
"""Share of the time left that the anneal may use before the MILP starts. (docs/tuning.md)"""

ANNEAL_MAX_S = 10.0
"""Most seconds the anneal may use. (docs/tuning.md)"""

MOVES_PER_NODE = 200
"""Moves the anneal makes per node of the graph (it stops earlier when its time share runs out). (docs/tuning.md)"""

ANNEAL_SEEDS = 8
"""Most anneals tried, each from the next seed, while none has found a plan that fits. (docs/tuning.md)"""


def anneal_then_milp(graph: Graph, budget: int, ctx: SolveContext, warm: WarmStart | None) -> Outcome:
    """Anneal from ``warm`` for a share of the time, then solve the MILP warm-started from the better plan."""
    share = min(ANNEAL_MAX_S, ANNEAL_SHARE * ctx.remaining_s())
    annealed = _anneal(graph, budget, ctx.within(share), warm)
    start = warm
    if annealed.schedule is not None:
        simulation = simulate_schedule(graph, annealed.schedule)
        if simulation.peak_memory <= budget and (warm is None or simulation.cost < warm.cost):
            start = WarmStart("anneal", annealed.schedule, simulation)
    ctx.record.log.extend(annealed.log)
    if ctx.stopped():
        return Outcome(start.schedule if start is not None else None, leanest=annealed.leanest)
    exact = solve_milp(graph, budget, _never_worse(ctx, start), start)
    if start is None or start.source != "anneal" or exact.infeasible:
        if not exact.found:
            exact.leanest = annealed.leanest
        return exact
    if exact.schedule is not None:
        found = simulate_schedule(graph, exact.schedule)
        if found.peak_memory <= budget and found.cost <= start.cost:
            return exact
    bound = exact.lower_bound
    return Outcome(start.schedule, optimal=ctx.proves(start.cost, bound), lower_bound=bound, backend=exact.backend,
                   log=[*exact.log, f"the MILP found nothing cheaper than the anneal's plan (cost {start.cost:g})"])


def _anneal(graph: Graph, budget: int, ctx: SolveContext, warm: WarmStart | None) -> Outcome:
    """The anneal from ``warm``; while it finds nothing that fits, again from the next seed, up to
    :data:`ANNEAL_SEEDS` times within ``ctx``'s time: one chain can miss a tight budget that another
    reaches, and the MILP alone may take longer than the solve has to find a first plan."""
    log: list[str] = []
    for seed in range(ANNEAL_SEEDS):
        annealed = anneal(graph, budget, ctx, start=warm.schedule if warm is not None else None, seed=seed,
                          max_moves=MOVES_PER_NODE * graph.size)
        log.extend(annealed.log)
        if annealed.schedule is not None or ctx.stopped():
            break
    annealed.log = log
    return annealed


def _never_worse(ctx: SolveContext, start: WarmStart | None) -> SolveContext:
    """``ctx`` whose progress reports never show an incumbent worse than ``start``."""
    sink = ctx.on_progress
    if start is None or sink is None:
        return ctx

    def report(progress: Progress) -> None:
        cost = progress.incumbent_cost
        if cost is None or cost > start.cost:
            progress = dataclasses.replace(progress, incumbent_cost=start.cost,
                                           gap=relative_gap(start.cost, progress.lower_bound))
        sink(progress)

    return ctx.reporting_to(report)
