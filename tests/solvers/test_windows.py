"""Proofs that nothing fits, from windows of the Checkmate MILP: sound, complete on small graphs, fast enough."""

from __future__ import annotations

import math

import pytest
from exhaustive import STAGE_INFEASIBLE, stage_optima
from factories import benchmark_graph, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st
from processes import helper_messages

from remat.schedules import Graph
from remat.solvers import ResultStatus, solve
from remat.solvers._windows import NEAR_FLOOR, WIDTHS


def proof(g: Graph, budget: int) -> tuple[int, int] | None:
    """The window a helper proves infeasible for ``budget`` (its bound task, with no plan known), or None."""
    messages = helper_messages(g.to_json(), budget, ("bound",), time_limit_s=20)
    proofs = [(first, last) for kind, first, last, *_ in messages if kind == "infeasible"]
    return proofs[0] if proofs else None


@settings(max_examples=15, deadline=None, derandomize=True)
@given(g=random_dags(min_nodes=2, max_nodes=6), share=st.floats(0.0, 1.0))
def test_a_window_is_proved_infeasible_exactly_when_no_schedule_fits(g: Graph, share: float) -> None:
    """Small graphs fit in the widest window, which is then the whole MILP: the proof is complete there."""
    assert g.size <= max(WIDTHS)
    budget = g.min_feasible_budget + int(share * (NEAR_FLOOR - 1) * g.min_feasible_budget)
    found = proof(g, budget)
    assert (found is not None) == (stage_optima(g, [budget])[0] == math.inf)
    if found is not None:
        assert 0 <= found[0] <= found[1] < g.size


def test_checkmate_answers_infeasible_for_a_graph_that_fits_its_memory_floor_but_no_schedule() -> None:
    assert STAGE_INFEASIBLE.min_feasible_budget <= 78
    result = solve(STAGE_INFEASIBLE, budget=78, strategy="checkmate", options={"path": "anneal"}, time_limit_s=20,
                   threads=2)
    assert result.status is ResultStatus.INFEASIBLE, result.log
    assert any("proved infeasible" in line for line in result.log)
    assert solve(STAGE_INFEASIBLE, budget=79, strategy="checkmate", options={"path": "anneal"}, time_limit_s=5,
                 threads=2).status in (ResultStatus.OPTIMAL, ResultStatus.FEASIBLE)


@pytest.mark.slow
def test_rl250_has_no_schedule_at_sixty_percent() -> None:
    """Its memory floor is 0.597 of the peak, yet two stages show that nothing fits 0.6 (in about 8 s)."""
    g = benchmark_graph("rl250")
    result = solve(g, budget_ratio=0.6, strategy="checkmate", time_limit_s=60, threads=2)
    assert result.status is ResultStatus.INFEASIBLE, result.log
