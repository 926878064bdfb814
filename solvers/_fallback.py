"""The baselines as warm starts and fallbacks for the solver strategies.

Every registered strategy that needs no solver backend (checkpoint-all, Chen, Griewank, the AP
and linearized heuristics...) is a baseline. :func:`best_baseline` runs those that apply to the
graph and returns the cheapest plan that fits the budget, simulated. The ``checkmate`` strategy
starts its search from it (on the anneal path, a helper process runs the baselines alongside) and
returns it, with ``fallback`` set, when it finds nothing better in time; ``checkmate-lp`` returns
it when no rounding fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from remat.schedules import (
    Graph,
    RematError,
    Schedule,
    Simulation,
    StrategyNotApplicable,
    plan_from_schedule,
    simulate,
)

from ._context import Outcome, SolveContext

__all__ = ["Baseline", "best_baseline"]


@dataclass(frozen=True)
class Baseline:
    """A baseline's schedule that fits the budget, with its simulation."""

    name: str
    schedule: Schedule
    simulation: Simulation

    @property
    def cost(self) -> float:
        return self.simulation.cost

    def as_fallback(self, outcome: Outcome) -> Outcome:
        """``outcome`` (a solver's bound, backend and log) with this plan as the answer."""
        return Outcome(self.schedule, lower_bound=outcome.lower_bound, backend=outcome.backend, fallback=self.name,
                       log=[*outcome.log, f"returning the best baseline, {self.name} (cost {self.cost:g})"])


def best_baseline(graph: Graph, budget: int, ctx: SolveContext) -> Baseline | None:
    """The cheapest in-budget plan among the baselines that apply to ``graph``, or None if none fits.

    A plan found is reported to ``ctx`` as the first incumbent ("best baseline: NAME, cost C").
    """
    from ._registry import STRATEGIES  # the registry imports the strategies that call this

    best: Baseline | None = None
    for strategy in STRATEGIES.values():
        if strategy.backends:
            continue
        if ctx.stop_event.is_set():
            break
        sub = SolveContext(time_limit_s=max(ctx.remaining_s(), 0.1), mip_gap=ctx.mip_gap, threads=ctx.threads,
                           stop_event=ctx.stop_event)
        try:
            strategy.check(graph)
            schedule = strategy.run(graph, budget, sub).schedule
            if schedule is None:
                continue
            simulation = simulate(graph, plan_from_schedule(graph, schedule))
        except StrategyNotApplicable:
            continue
        except RematError as e:
            ctx.log.append(f"baseline {strategy.name} failed: {e}")
            continue
        if simulation.peak_memory <= budget and (best is None or simulation.cost < best.cost):
            best = Baseline(strategy.name, schedule, simulation)
    if best is not None:
        ctx.report(incumbent_cost=best.cost, message=f"best baseline: {best.name}, cost {best.cost:g}")
    return best
