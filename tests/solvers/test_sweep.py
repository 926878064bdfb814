"""plan_sweep: the budgets and strategies of a sweep, shared by the service and `remat compare`."""

from __future__ import annotations

import pytest
from factories import benchmark_graph, chain

from remat.schedules import StrategyNotApplicable, Transfer, UnknownStrategy
from remat.solvers import STRATEGIES, StrategyKind, plan_sweep, solve, sweep_budgets


def test_budgets_span_the_feasible_range_evenly():
    graph = benchmark_graph("vgg16")
    budgets = sweep_budgets(graph)
    assert budgets[0] == graph.min_feasible_budget and budgets[-1] == graph.checkpoint_all_peak
    assert len(budgets) == 12 and budgets == sorted(set(budgets))
    steps = [b - a for a, b in zip(budgets, budgets[1:], strict=False)]
    assert max(steps) - min(steps) <= 1


def test_a_default_sweep_covers_every_applicable_strategy_and_each_heuristics_natural_point():
    graph = benchmark_graph("resnet50")
    plan = plan_sweep(graph, time_limit_s=60)
    applicable = [name for name, s in STRATEGIES.items() if _applies(s, graph) and not s.offloads]
    assert list(plan.strategies) == applicable and "chen-sqrtn" not in plan.strategies
    assert set(sweep_budgets(graph)) <= set(plan.budgets) and list(plan.budgets) == sorted(plan.budgets)
    heuristics = [s for s in applicable if STRATEGIES[s].kind is StrategyKind.BASELINE]
    assert set(plan.natural) == set(heuristics)
    for name, peak in plan.natural.items():
        assert peak in plan.budgets
        assert peak == solve(graph, budget=graph.checkpoint_all_peak, strategy=name).peak_memory
    assert plan.points == [(s, b) for s in plan.strategies for b in plan.budgets]


def test_named_strategies_and_budgets_are_taken_as_given():
    graph = chain(8)
    plan = plan_sweep(graph, strategies=["griewank", "checkpoint-all"], budgets=[50, 20])
    assert plan.strategies == ("griewank", "checkpoint-all") and plan.budgets == (50, 20) and not plan.natural
    with pytest.raises(StrategyNotApplicable):
        plan_sweep(benchmark_graph("resnet50"), strategies=["chen-sqrtn"])
    with pytest.raises(UnknownStrategy):
        plan_sweep(graph, strategies=["magic"])


def _applies(strategy, graph) -> bool:
    try:
        strategy.check_graph(graph)
    except StrategyNotApplicable:
        return False
    return True


def test_with_transfer_parameters_the_offloading_heuristics_join_the_sweep_with_their_natural_points():
    graph = benchmark_graph("resnet50")
    transfer = Transfer(bandwidth=float(graph.memory.sum()) / graph.base_cost)
    plan = plan_sweep(graph, time_limit_s=60, transfer=transfer)
    assert {"offload-all", "offload-window"} <= set(plan.strategies)
    natural = solve(graph, budget=graph.checkpoint_all_peak, strategy="offload-all", transfer=transfer).peak_memory
    assert plan.natural["offload-all"] == natural < graph.checkpoint_all_peak and natural in plan.budgets
