"""The baselines as fallbacks: the cheapest in-budget plan among those that apply."""

from __future__ import annotations

from factories import chain, random_dags
from hypothesis import given, settings

from remat.schedules import Graph, StrategyNotApplicable
from remat.solvers import BASELINES, Progress, SolveContext, solve
from remat.solvers.baselines import best_baseline


@settings(max_examples=25, deadline=None)
@given(g=random_dags(max_nodes=12))
def test_the_best_baseline_is_the_cheapest_baseline_plan_that_fits(g: Graph) -> None:
    budget = (g.min_feasible_budget + g.checkpoint_all_peak) // 2
    fitting = {}
    for name in (s.name for s in BASELINES):
        try:
            result = solve(g, budget=budget, strategy=name)
        except StrategyNotApplicable:
            continue
        if result.fits:
            fitting[name] = result.cost
    best = best_baseline(g, budget, SolveContext())
    if not fitting:
        assert best is None
        return
    assert best is not None
    assert best.cost == min(fitting.values())
    assert best.simulation.peak_memory <= budget
    assert fitting[best.source] == best.cost


def test_checkpoint_all_is_the_fallback_when_everything_fits_and_is_reported_as_the_first_incumbent() -> None:
    g = chain(5)
    seen: list[Progress] = []
    best = best_baseline(g, g.checkpoint_all_peak, SolveContext(on_progress=seen.append))
    assert best is not None and (best.source, best.cost) == ("checkpoint-all", g.base_cost)
    reported = [(p.incumbent_cost, p.message) for p in seen]
    assert reported == [(g.base_cost, f"best baseline: checkpoint-all, cost {g.base_cost:g}")]


def test_nothing_comes_back_when_no_baseline_fits() -> None:
    g = chain(5)
    assert best_baseline(g, g.min_feasible_budget - 1, SolveContext()) is None
