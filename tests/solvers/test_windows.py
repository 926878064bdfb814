"""Proofs that nothing fits, from windows of the Checkmate MILP: sound, complete on small graphs, fast enough."""

from __future__ import annotations

import math

import pytest
from exhaustive import STAGE_FORM_GAP, STAGE_INFEASIBLE, stage_optima
from factories import benchmark_graph, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st
from processes import helper_messages

from remat.schedules import Graph
from remat.solvers import ResultStatus, solve
from remat.solvers.checkmate import NEAR_FLOOR, WIDTHS
from remat.solvers.checkmate._anneal_worker import WindowInfeasible


def proof(g: Graph, budget: int) -> tuple[int, int] | None:
    """The window a helper proves infeasible for ``budget`` (its bound task, with no plan known), or None."""
    messages = helper_messages(g, budget, ("bound",), time_limit_s=20)
    proofs = [(m.first, m.last) for m in messages if isinstance(m, WindowInfeasible)]
    return proofs[0] if proofs else None


@settings(max_examples=15, deadline=None, derandomize=True)
@given(g=random_dags(min_nodes=2, max_nodes=6), share=st.floats(0.0, 1.0))
def test_no_window_is_proved_infeasible_where_a_schedule_fits(g: Graph, share: float) -> None:
    """Budgets from the floor to 1.1x it, where windows are tried (on such random graphs a schedule fits them)."""
    budget = g.min_feasible_budget + int(share * (NEAR_FLOOR - 1) * g.min_feasible_budget)
    found = proof(g, budget)
    assert (found is not None) == (stage_optima(g, [budget])[0] == math.inf)


@pytest.mark.parametrize(("g", "smallest"), [(STAGE_INFEASIBLE, 79), (STAGE_FORM_GAP, 134)])
def test_a_window_proves_every_budget_under_the_smallest_that_a_schedule_fits(g: Graph, smallest: int) -> None:
    """Small graphs fit in the widest window, which is then the whole MILP: the proof is complete there."""
    assert g.size <= max(WIDTHS) and smallest <= NEAR_FLOOR * g.min_feasible_budget
    assert stage_optima(g, [smallest - 1, smallest])[0] == math.inf
    for budget in (g.min_feasible_budget, smallest - 1):
        found = proof(g, budget)
        assert found is not None and 0 <= found[0] <= found[1] < g.size
    assert proof(g, smallest) is None


def test_checkmate_answers_infeasible_for_a_graph_that_fits_its_memory_floor_but_no_schedule() -> None:
    assert STAGE_INFEASIBLE.min_feasible_budget <= 78
    result = solve(STAGE_INFEASIBLE, budget=78, strategy="checkmate", options={"path": "anneal"}, time_limit_s=20,
                   threads=2)
    assert result.status is ResultStatus.INFEASIBLE, result.log
    assert any("proved infeasible" in line for line in result.log)
    assert result.smallest_peak is not None and result.smallest_peak >= 79  # a plan's peak: no schedule fits 78
    fits = solve(STAGE_INFEASIBLE, budget=79, strategy="checkmate", options={"path": "anneal"}, time_limit_s=5,
                 threads=2)
    assert fits.status in (ResultStatus.OPTIMAL, ResultStatus.FEASIBLE) and fits.to_json()["smallest_peak"] is None


def test_the_milp_path_reports_the_leanest_plan_its_anneal_reached_with_its_proof() -> None:
    result = solve(STAGE_INFEASIBLE, budget=78, strategy="checkmate", time_limit_s=20)  # six nodes: anneal-milp
    assert result.status is ResultStatus.INFEASIBLE, result.log
    assert result.smallest_peak is not None and result.smallest_peak >= 79


def test_a_solve_that_finds_nothing_reports_the_leanest_plan_its_search_reached() -> None:
    """rl100 at 0.6 of its peak: no plan in 3 s (none known at all), yet the search's leanest state is a
    plan, simulated, whose peak says which budgets have one."""
    g = benchmark_graph("rl100")
    result = solve(g, budget_ratio=0.6, strategy="checkmate", options={"path": "anneal"}, time_limit_s=3, threads=2)
    assert result.status is ResultStatus.TIMEOUT
    assert result.budget < result.smallest_peak <= g.checkpoint_all_peak
    assert result.to_json()["smallest_peak"] == result.smallest_peak
    assert f"the leanest plan found peaks at {result.smallest_peak} bytes" in result.log[-1]


@pytest.mark.slow
def test_rl250_has_no_schedule_at_sixty_percent() -> None:
    """Its memory floor is 0.597 of the peak, yet two stages show that no schedule fits 0.6 (HiGHS 1.12
    closes that window at the root in 3 to 5 s; the solve stops as soon as the proof comes)."""
    g = benchmark_graph("rl250")
    result = solve(g, budget_ratio=0.6, strategy="checkmate", time_limit_s=60, threads=2)
    assert result.status is ResultStatus.INFEASIBLE, result.log
