"""The baselines as warm starts and fallbacks for the solver strategies.

:func:`best_baseline` runs the baselines (:data:`._table.BASELINES`) that apply to the graph and
returns the cheapest plan that fits the budget, simulated. The ``checkmate`` strategy starts its
search from it (on the anneal path, a helper process runs the baselines alongside) and returns it,
with ``fallback`` set, when it finds nothing better in time; ``checkmate-lp`` returns
it when no rounding fits.
"""

from __future__ import annotations

from remat.schedules import Graph, RematError, StrategyNotApplicable, simulate_schedule

from .._context import SolveContext
from .._warm import WarmStart
from ._table import BASELINES

__all__ = ["best_baseline"]


def best_baseline(graph: Graph, budget: int, ctx: SolveContext) -> WarmStart | None:
    """The cheapest in-budget plan among the baselines that apply to ``graph``, or None if none fits.

    A plan found is reported to ``ctx`` as the first incumbent ("best baseline: NAME, cost C").
    """
    best: WarmStart | None = None
    for strategy in BASELINES:
        if ctx.stop_event.is_set():
            break
        sub = SolveContext(time_limit_s=max(ctx.remaining_s(), 0.1), mip_gap=ctx.mip_gap, threads=ctx.threads,
                           stop_event=ctx.stop_event)
        try:
            strategy.check(graph)
            schedule = strategy.run(graph, budget, sub).schedule
            if schedule is None:
                continue
            simulation = simulate_schedule(graph, schedule)
        except StrategyNotApplicable:
            continue
        except RematError as e:
            ctx.log.append(f"baseline {strategy.name} failed: {e}")
            continue
        if simulation.peak_memory <= budget and (best is None or simulation.cost < best.cost):
            best = WarmStart(strategy.name, schedule, simulation)
    if best is not None:
        ctx.report(incumbent_cost=best.cost, message=f"best baseline: {best.source}, cost {best.cost:g}")
    return best
