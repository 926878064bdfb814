"""solve() with transfer parameters: plans with transfers are simulated in time, host memory is reported and capped."""

from __future__ import annotations

import pytest
from factories import skip_read

from remat.schedules import InvalidRequest, Plan, Transfer
from remat.solvers import STRATEGIES, Outcome, ResultStatus, Strategy, solve, sweep_strategies

# a is read again by d after b and c: the plan below offloads it meanwhile.
G = skip_read()
A, B, C, D = range(4)
OFFLOAD_A = Plan.of([("compute", A), ("compute", B), ("offload", A), ("compute", C), ("free", B),
                     ("reload", A), ("compute", D), ("free", A), ("free", C), ("free", D)])


@pytest.fixture
def offload_a(monkeypatch: pytest.MonkeyPatch) -> str:
    """A registered strategy whose answer is OFFLOAD_A, whatever the budget."""
    strategy = Strategy("test-offload-a", "Offloads a between its two reads.",
                        lambda graph, budget, ctx: Outcome(None, plan=OFFLOAD_A), offloads=True)
    monkeypatch.setitem(STRATEGIES, strategy.name, strategy)
    return strategy.name


def test_a_plan_with_transfers_is_simulated_in_time_and_reports_its_host_memory(offload_a):
    # 40 bytes per unit: copies of a last 1. a [0, 2], b [2, 5], offload a [2, 3] released at 5 (after b);
    # c [5, 6]; the reload, issued after c, runs [6, 7]; d [7, 9]: one unit exposed. Memory: 140, 150, 110 + 20,
    # 6: -b +a 160, 7: +d 165, below checkpoint-all's 170 (a, b and c together).
    result = solve(G, budget=165, strategy=offload_a, transfer=Transfer(bandwidth=40))
    assert result.status is ResultStatus.FEASIBLE and result.schedule is None and result.plan == OFFLOAD_A
    assert (result.cost, result.peak_memory, result.host_peak_memory) == (9.0, 165, 40)
    assert result.lower_bound == G.base_cost and G.checkpoint_all_peak == 170
    doc = result.to_json()
    assert doc["transfer"] == {"bandwidth": 40.0, "latency": 0.0} and doc["host_peak_memory"] == 40
    assert doc["schedule"] is None and {"op": "offload", "node": "a"} in doc["plan"]


def test_a_plan_over_the_host_budget_does_not_fit(offload_a):
    result = solve(G, budget=165, strategy=offload_a, transfer=Transfer(bandwidth=40), host_budget=39)
    assert result.status is ResultStatus.OVER_BUDGET and not result.fits and result.to_json()["host_budget"] == 39
    assert solve(G, budget=165, strategy=offload_a, transfer=Transfer(bandwidth=40), host_budget=40).fits


def test_an_offloading_strategy_needs_transfer_parameters(offload_a):
    with pytest.raises(InvalidRequest, match="needs to know how long copies take") as raised:
        solve(G, budget=165, strategy=offload_a)
    assert raised.value.field == "transfer"
    with pytest.raises(InvalidRequest, match="host_budget"):
        solve(G, budget=165, strategy=offload_a, transfer=Transfer(bandwidth=40), host_budget=-1)


def test_plans_without_transfers_are_unchanged_by_transfer_parameters():
    plain = solve(G, budget=G.checkpoint_all_peak, strategy="checkpoint-all")
    timed = solve(G, budget=G.checkpoint_all_peak, strategy="checkpoint-all", transfer=Transfer(bandwidth=1))
    assert (timed.cost, timed.peak_memory, timed.host_peak_memory) == (plain.cost, plain.peak_memory, 0)
    assert plain.to_json()["transfer"] is None


def test_a_default_sweep_has_the_offloading_strategies_only_with_a_transfer(offload_a):
    assert offload_a not in sweep_strategies(G)
    assert offload_a in sweep_strategies(G, transfer=Transfer(bandwidth=40))
    with pytest.raises(InvalidRequest, match="transfer"):
        sweep_strategies(G, [offload_a])
