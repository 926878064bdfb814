"""checkmate-lp: the LP bound, the two rounding phases, and what comes back when no rounding fits."""

from __future__ import annotations

import numpy as np
import pytest
from exhaustive import STAGE_FORM_GAP, stage_optima
from factories import FCN8_AT_08_OPTIMUM, benchmark_graph, random_dags
from hypothesis import given, settings

from remat.schedules import Graph, InvalidRequest
from remat.solvers import ResultStatus, solve
from remat.solvers.checkmate import rounding_candidates


@settings(max_examples=10, deadline=None)
@given(g=random_dags(min_nodes=3, max_nodes=7))
def test_the_lp_value_bounds_the_optimum_and_every_returned_plan_fits(g: Graph) -> None:
    budget = (g.min_feasible_budget + g.checkpoint_all_peak) // 2
    [optimum] = stage_optima(g, [budget])
    result = solve(g, budget=budget, strategy="checkmate-lp", backend="highs")
    if optimum == np.inf:
        assert result.status in (ResultStatus.INFEASIBLE, ResultStatus.TIMEOUT)
        return
    assert result.lower_bound is not None and result.lower_bound <= optimum + 1e-9
    if result.plan is not None:
        assert result.fits and result.cost >= optimum - 1e-9


def test_on_fcn8_the_rounding_lands_near_the_optimum_and_the_bound_under_it() -> None:
    g = benchmark_graph("fcn8")
    result = solve(g, budget_ratio=0.8, strategy="checkmate-lp", backend="highs")
    assert result.status is ResultStatus.FEASIBLE and result.fits and result.fallback is None
    assert result.lower_bound is not None and result.lower_bound <= FCN8_AT_08_OPTIMUM
    assert result.cost < 1.01 * g.base_cost


def test_the_bound_is_reported_even_when_no_rounding_and_no_baseline_fits() -> None:
    result = solve(STAGE_FORM_GAP, budget=128, strategy="checkmate-lp", backend="highs")
    assert result.status is ResultStatus.TIMEOUT
    assert result.plan is None
    assert result.lower_bound is not None and result.lower_bound >= STAGE_FORM_GAP.base_cost


def test_thresholds_give_nested_sets_and_randomized_rounding_repeats_with_its_seed() -> None:
    fractional = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.25, 0.75, 0.0]])
    sweep = list(rounding_candidates(fractional, rounds=0, seed=0))
    assert [int(s.sum()) for s in sweep] == [1, 2, 3]
    assert all((a <= b).all() for a, b in zip(sweep, sweep[1:], strict=False))
    first = list(rounding_candidates(fractional, rounds=20, seed=7))[3:]
    again = list(rounding_candidates(fractional, rounds=20, seed=7))[3:]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert all(s[1, 0] and not s[0].any() for s in first)
    assert len({s.tobytes() for s in first}) > 1


@pytest.mark.parametrize("options, message", [
    ({"rounds": -1}, "Option 'rounds' of checkmate-lp must be a whole number from 0 to 100000, got -1"),
    ({"seed": 1.5}, "Option 'seed' of checkmate-lp must be a whole number"),
    ({"path": "milp"}, "Unknown option 'path' for checkmate-lp"),
])
def test_bad_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        solve(STAGE_FORM_GAP, budget=134, strategy="checkmate-lp", options=options)
