"""The baselines as warm starts and fallbacks for the solver strategies.

:func:`best_baseline` runs the baselines (:data:`._table.BASELINES`) that apply to the graph and
returns the cheapest plan that fits the budget, simulated (checkpoint-last only when no other
fits). The ``checkmate`` strategy starts its search from it (on the anneal path, a helper process
runs the baselines alongside) and returns it, with ``fallback`` set, when it finds nothing better
in time; ``checkmate-lp`` returns it when no rounding fits.
"""

from __future__ import annotations

from remat.schedules import Graph, RematError, StrategyNotApplicable, simulate_schedule

from .._context import SolveContext, SolveLimits
from .._strategy import Strategy
from .._warm import WarmStart
from ._table import BASELINES

__all__ = ["best_baseline"]


LAST_RESORT = "checkpoint-last"
"""The baseline run only when no other fits: its plan recomputes every ancestor at every stage, quadratic in
the graph (a million computes on a 1,635-node LSTM; refused above :data:`._checkpoint.LARGEST_PLAN`); where
another fits, that one was never dearer (67 benchmark cells, 539 random DAGs)."""


def best_baseline(graph: Graph, budget: int, ctx: SolveContext) -> WarmStart | None:
    """The cheapest in-budget plan among the baselines that apply to ``graph``, or None if none fits
    (:data:`LAST_RESORT` is tried only then).

    A plan found is reported to ``ctx`` as the first incumbent ("best baseline: NAME, cost C").
    """
    best: WarmStart | None = None
    for strategy in [s for s in BASELINES if s.name != LAST_RESORT]:
        best = _cheaper(graph, budget, ctx, strategy, best)
    if best is None:
        best = _cheaper(graph, budget, ctx, next(s for s in BASELINES if s.name == LAST_RESORT), None)
    if best is not None:
        ctx.report(incumbent_cost=best.cost, message=f"best baseline: {best.source}, cost {best.cost:g}")
    return best


def _cheaper(graph: Graph, budget: int, ctx: SolveContext, strategy: Strategy,
             best: WarmStart | None) -> WarmStart | None:
    """``strategy``'s plan when it applies, fits and costs less than ``best``; else ``best``."""
    if ctx.stop_event.is_set():
        return best
    # A context of its own: the baselines' default options, no sink, a record that is not the solve's; only
    # the stop flag is shared.
    limits = SolveLimits(time_limit_s=max(ctx.remaining_s(), 0.1), mip_gap=ctx.limits.mip_gap,
                         threads=ctx.limits.threads)
    sub = SolveContext(limits, stop_event=ctx.stop_event)
    try:
        strategy.check_graph(graph)
        schedule = strategy.run(graph, budget, sub).schedule
        if schedule is None:
            return best
        simulation = simulate_schedule(graph, schedule)
    except StrategyNotApplicable:
        return best
    except RematError as e:
        ctx.record.log.append(f"baseline {strategy.name} failed: {e}")
        return best
    if simulation.peak_memory <= budget and (best is None or simulation.cost < best.cost):
        return WarmStart(strategy.name, schedule, simulation)
    return best
