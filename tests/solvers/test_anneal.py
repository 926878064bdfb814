"""The annealer against exhaustive search, known optima and the simulator; stopping and starting points."""

from __future__ import annotations

import math
import threading

import pytest
from exhaustive import stage_optima
from factories import benchmark_graph, chain, random_dags
from hypothesis import given, settings

from remat.schedules import Graph, plan_from_schedule, resolve_budget, simulate
from remat.solvers import SolveContext, SolveLimits, solve
from remat.solvers.search import Annealer, Timeline, _annealer, anneal, timeline_from_schedule


def budgets_between(g: Graph) -> list[int]:
    low, high = g.min_feasible_budget, g.checkpoint_all_peak
    return sorted({low, low + (high - low) // 4, (low + high) // 2})


@settings(max_examples=40, deadline=None, derandomize=True)
@given(g=random_dags(min_nodes=3, max_nodes=6))
def test_it_reaches_the_exhaustive_optimum_on_tiny_graphs(g: Graph) -> None:
    budgets = budgets_between(g)
    for budget, best in zip(budgets, stage_optima(g, budgets), strict=True):
        outcome = anneal(g, budget, SolveContext(), max_moves=2000)
        if best == math.inf:
            assert outcome.schedule is None
            continue
        assert outcome.schedule is not None, f"nothing found at budget {budget}; optimum {best}"
        sim = simulate(g, plan_from_schedule(g, outcome.schedule))
        assert sim.peak_memory <= budget
        assert sim.cost == pytest.approx(best, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("budget, optimum", [(5, 22.0), (4, 26.0)])
def test_unit_chain_of_eight_layers_reaches_the_known_optima(budget: int, optimum: float) -> None:
    g = chain(8)
    for seed in range(3):  # the anneal path runs one chain per thread, each with its own seed
        outcome = anneal(g, budget, SolveContext(), seed=seed, max_moves=30_000)
        assert outcome.schedule is not None
        sim = simulate(g, plan_from_schedule(g, outcome.schedule))
        assert sim.peak_memory <= budget and sim.cost >= optimum
        if sim.cost == optimum:
            return
    pytest.fail(f"no chain reached the optimum {optimum}")


def test_every_best_it_announces_fits_and_costs_what_it_says() -> None:
    g = benchmark_graph("rl100")
    budget = resolve_budget(g, budget_ratio=0.8)
    announced: list[tuple[float, list[tuple[int, int]]]] = []
    annealer = Annealer(g, budget, seed=3)
    annealer.run(SolveContext(), max_moves=4000, on_best=lambda cost, extras: announced.append((cost, extras)))
    assert announced, "no plan within 80% of the checkpoint-all peak"
    costs = [cost for cost, _ in announced]
    assert costs == sorted(costs, reverse=True) and len(set(costs)) == len(costs)
    for cost, extras in announced[::max(1, len(announced) // 5)] + announced[-1:]:
        sim = simulate(g, plan_from_schedule(g, Timeline.with_extras(g, extras).schedule()))
        assert sim.peak_memory <= budget
        assert sim.cost == pytest.approx(cost)
    assert annealer.best_cost == pytest.approx(costs[-1])


def test_while_nothing_fits_it_announces_ever_leaner_states_and_keeps_none_as_a_plan() -> None:
    """rl100 at 0.45 of its peak (no plan known below 0.6): the search presses its peak down under limits
    above the budget; the states that fit those are announced as leaner, never as plans."""
    g = benchmark_graph("rl100")
    budget = resolve_budget(g, budget_ratio=0.45)
    peaks: list[int] = []
    annealer = Annealer(g, budget, seed=1)
    annealer.run(SolveContext(), max_moves=6000, on_best=lambda *_: pytest.fail("a plan under the budget"),
                 on_leanest=peaks.append)
    assert len(peaks) > 1 and peaks == sorted(peaks, reverse=True) and len(set(peaks)) == len(peaks)
    assert annealer.best is None and annealer.leanest is not None
    leanest = simulate(g, plan_from_schedule(g, Timeline.with_extras(g, annealer.leanest).schedule()))
    assert budget < leanest.peak_memory == peaks[-1]


@pytest.mark.parametrize("total,first,lengths", [
    (60.0, 8.0, [8.0, 16.0, 36.0]),  # the next (32 s) would not fit twice in the 36 s left
    (5.0, 8.0, [5.0]),
    (24.0, 8.0, [8.0, 16.0]),
    (4000, 4000, [4000]),            # a run of max_moves cools once over them
])
def test_cooling_cycles_double_and_the_last_takes_what_is_left(total: float, first: float,
                                                                lengths: list[float]) -> None:
    assert list(_annealer._cycles(total, first)) == lengths


def test_each_cooling_cycle_starts_from_the_best_state(monkeypatch: pytest.MonkeyPatch) -> None:
    g = benchmark_graph("rl100")
    annealer = Annealer(g, resolve_budget(g, budget_ratio=0.8), seed=1)
    restarts: list[float] = []

    def adopt(extras: list[tuple[int, int]]) -> None:
        Annealer.adopt(annealer, extras)
        assert sorted(annealer.extras) == sorted(annealer.best or [])
        restarts.append(annealer.tl.extra_cost)

    monkeypatch.setattr(annealer, "adopt", adopt)
    annealer.run(SolveContext(SolveLimits(time_limit_s=2.0)), first_cycle_s=0.1)
    assert restarts and annealer.best_cost is not None
    # each from the best so far, which only improves (the running total drifts by rounding)
    assert all(later <= earlier + 1e-9 for earlier, later in zip(restarts, restarts[1:], strict=False))
    assert restarts[-1] >= annealer.best_extra - 1e-9


def test_a_baseline_start_keeps_its_cost_and_never_needs_more_memory() -> None:
    g = benchmark_graph("vgg_unet")
    baseline = solve(g, budget_ratio=0.6, strategy="linearized-sqrtn")
    assert baseline.schedule is not None and baseline.simulation is not None
    tl = timeline_from_schedule(g, baseline.schedule)
    assert tl.total_cost == pytest.approx(baseline.simulation.cost)
    assert tl.peak() <= baseline.simulation.peak_memory


@pytest.mark.timeout(60)
def test_a_stop_request_ends_the_run_with_the_best_plan_so_far() -> None:
    g = benchmark_graph("rl250")
    budget = resolve_budget(g, budget_ratio=0.8)
    ctx = SolveContext(SolveLimits(time_limit_s=3600))
    annealer = Annealer(g, budget)
    threading.Timer(2.0, ctx.stop_event.set).start()
    annealer.run(ctx)
    assert annealer.best is not None
    assert ctx.elapsed_s() < 60


def test_a_drop_takes_the_recomputations_that_only_fed_it_along() -> None:
    g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
        {"id": "a", "deps": [], "cost": 1, "memory": 4},
        {"id": "b", "deps": ["a"], "cost": 1, "memory": 4},
        {"id": "c", "deps": ["b"], "cost": 1, "memory": 4},
        {"id": "d", "deps": ["c"], "cost": 1, "memory": 4},
        {"id": "e", "deps": ["b", "d"], "cost": 1, "memory": 4}]})
    annealer = Annealer(g, g.checkpoint_all_peak)
    annealer._edit(added=[(0, 4), (1, 4), (0, 3)])  # b again for e, from a again; a again in stage d (unread)
    assert annealer._drop(1, 4) == [(1, 4), (0, 4)]
    assert annealer.extras == [(0, 3)]
    assert annealer.tl.total_cost == 6
