"""The checkmate strategy against exhaustive search, the known chain optima, and its options."""

from __future__ import annotations

import math

import pytest
from exhaustive import STAGE_FORM_GAP, plan_optimum, stage_optima
from factories import benchmark_graph, chain, random_dags
from hypothesis import given, settings

from remat.schedules import Graph, InvalidRequest
from remat.solvers import Progress, ResultStatus, SolveContext, Stop, solve
from remat.solvers._context import Outcome
from remat.solvers.checkmate import PATHS, solve_milp


def budgets_between(g: Graph) -> list[int]:
    low, high = g.min_feasible_budget, g.checkpoint_all_peak
    return sorted({low, low + (high - low) // 4, (low + high) // 2})


@settings(max_examples=30, deadline=None)
@given(g=random_dags(min_nodes=4, max_nodes=7))
def test_the_milp_optimum_equals_an_exhaustive_search_over_every_checkmate_schedule(g: Graph) -> None:
    budgets = budgets_between(g)
    for budget, best in zip(budgets, stage_optima(g, budgets), strict=True):
        result = solve(g, budget=budget, strategy="checkmate", backend="highs", time_limit_s=60)
        if best == math.inf:
            assert result.status is ResultStatus.INFEASIBLE
            continue
        assert result.status is ResultStatus.OPTIMAL, result.log
        assert result.cost == pytest.approx(best, rel=1e-9, abs=1e-9)
        assert result.peak_memory is not None and result.peak_memory <= budget
        assert result.cost >= plan_optimum(g, budget) - 1e-9
        assert result.lower_bound is not None and result.lower_bound <= result.cost


def test_plans_outside_the_stage_form_can_fit_where_no_checkmate_schedule_does() -> None:
    assert stage_optima(STAGE_FORM_GAP, [124, 133, 134]) == [math.inf, math.inf, 20.0]
    assert plan_optimum(STAGE_FORM_GAP, 124) == plan_optimum(STAGE_FORM_GAP, 133) == 33.5
    result = solve(STAGE_FORM_GAP, budget=124, strategy="checkmate", backend="highs")
    assert result.status is ResultStatus.INFEASIBLE
    assert STAGE_FORM_GAP.min_feasible_budget == 124


@pytest.mark.parametrize("budget, optimum", [(5, 22.0), (4, 26.0)])
def test_unit_chain_of_eight_layers_reaches_the_known_optima(budget: int, optimum: float) -> None:
    result = solve(chain(8), budget=budget, strategy="checkmate", backend="highs")
    assert result.status is ResultStatus.OPTIMAL
    assert result.cost == optimum
    assert result.lower_bound == pytest.approx(optimum)
    assert result.peak_memory is not None and result.peak_memory <= budget


def test_a_budget_under_the_feasible_minimum_is_infeasible_without_a_model() -> None:
    g = chain(8)
    result = solve(g, budget=g.min_feasible_budget - 1, strategy="checkmate")
    assert result.status is ResultStatus.INFEASIBLE
    assert result.plan is None
    assert any("min_feasible_budget" in line for line in result.log)


def test_progress_reports_incumbents_and_a_bound_that_meets_the_cost() -> None:
    seen: list[Progress] = []
    result = solve(chain(6), budget=4, strategy="checkmate", backend="highs", on_progress=seen.append)
    assert result.status is ResultStatus.OPTIMAL
    assert any(p.incumbent_cost is not None for p in seen)
    bounds = [p.lower_bound for p in seen if p.lower_bound is not None]
    assert bounds and max(bounds) == pytest.approx(result.cost)


def test_the_best_baseline_comes_back_as_the_fallback_when_the_search_does_not_run() -> None:
    g = chain(6)
    result = solve(g, budget=g.checkpoint_all_peak, strategy="checkmate", time_limit_s=1e-9)
    assert result.fallback == "checkpoint-all"
    assert result.status is ResultStatus.FEASIBLE
    assert result.cost == g.base_cost


def test_without_a_warm_start_the_engine_still_proves_the_optimum() -> None:
    result = solve(chain(6), budget=4, strategy="checkmate", backend="highs", options={"warm_start": False})
    assert result.status is ResultStatus.OPTIMAL
    assert result.fallback is None


@pytest.mark.parametrize("options, message", [
    ({"nope": 1}, "Unknown option 'nope'"),
    ({"path": "quantum"}, "Option 'path' of checkmate must be one of 'anneal', 'anneal-milp', 'milp', got 'quantum'"),
    ({"warm_start": "yes"}, "Option 'warm_start' of checkmate must be true or false, got 'yes'"),
])
def test_bad_options_are_refused_with_a_clear_message(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        solve(chain(3), budget_ratio=0.9, strategy="checkmate", options=options)


def test_the_milp_path_fits_every_graph_and_comes_last() -> None:
    assert list(PATHS)[-1] == "milp"
    assert PATHS["milp"].fits(chain(1000))


def test_a_milp_path_that_is_already_stopped_gives_up_before_the_engine_starts() -> None:
    stopped = Stop()
    stopped.set()
    g = benchmark_graph("fcn8")
    outcome = solve_milp(g, g.checkpoint_all_peak, SolveContext(stop_event=stopped), None)
    assert outcome.schedule is None and outcome.log == ["stopped while building the model"]


def test_the_short_anneal_tries_the_next_seed_when_a_chain_finds_nothing_that_fits(monkeypatch) -> None:
    import remat.solvers.checkmate._anneal_milp as anneal_milp

    seeds: list[int] = []
    real = anneal_milp.anneal

    def first_chain_misses(graph, budget, ctx, start=None, *, seed=0, max_moves=None):
        seeds.append(seed)
        if seed == 0:
            return Outcome(None, log=["anneal: nothing within the budget after 0 moves"])
        return real(graph, budget, ctx, start, seed=seed, max_moves=max_moves)

    monkeypatch.setattr(anneal_milp, "anneal", first_chain_misses)
    result = solve(chain(6), budget=4, strategy="checkmate", backend="highs", options={"path": "anneal-milp"})
    assert seeds == [0, 1]
    assert result.status is ResultStatus.OPTIMAL
    assert [line for line in result.log if line.startswith("anneal:")][:1] == [
        "anneal: nothing within the budget after 0 moves"]
