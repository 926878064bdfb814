"""checkmate-offload: plans re-simulated, never worse than remat only or offload only, below the remat floor."""

from __future__ import annotations

import math

import pytest
from exhaustive import offload_optimum, plan_optimum, stage_optimum
from factories import benchmark_graph, chain, graph_doc, random_chains
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import Graph, InvalidRequest, Transfer, simulate
from remat.solvers import (
    FITTING_STATUSES,
    Convergence,
    OffloadSettings,
    Progress,
    ResultStatus,
    SolveContext,
    SolveLimits,
    Stop,
    solve,
)
from remat.solvers.checkmate import build_offload_model, solve_offload_milp

FAST = Transfer(bandwidth=4.0)
"""On the unit chains a copy lasts a quarter of a compute: it hides behind the next one."""


def _joint(graph: Graph, budget: int, transfer: Transfer, **kwargs):  # type: ignore[no-untyped-def]
    return solve(graph, budget=budget, strategy="checkmate-offload", backend="highs", time_limit_s=30,
                 transfer=transfer, **kwargs)


@pytest.mark.parametrize("budget", [3, 4, 6, 10])
def test_plans_fit_and_their_cost_and_peak_are_the_simulators(budget: int) -> None:
    g = chain(8)
    result = _joint(g, budget, FAST)
    assert result.status in FITTING_STATUSES, result.log
    assert result.plan is not None and result.simulation is not None
    again = simulate(g, result.plan, transfer=FAST)
    assert (again.cost, again.peak_memory) == (result.cost, result.peak_memory)
    assert result.peak_memory <= budget
    assert result.lower_bound == g.base_cost <= result.cost
    assert result.host_peak_memory == again.host_peak_memory


@settings(max_examples=25, deadline=None)
@given(g=random_chains(max_length=3), bandwidth=st.sampled_from([2.0, 10.0, 50.0]),
       where=st.sampled_from([0.0, 0.3, 0.6]))
def test_never_worse_than_the_exhaustive_remat_only_or_offload_only_optimum(
        g: Graph, bandwidth: float, where: float) -> None:
    budget = int(g.min_feasible_budget + where * (g.checkpoint_all_peak - g.min_feasible_budget))
    transfer = Transfer(bandwidth=bandwidth)
    best = min(stage_optimum(g, budget), offload_optimum(g, budget, transfer))
    result = _joint(g, budget, transfer)
    if best == math.inf:
        return
    assert result.status in FITTING_STATUSES, result.log
    assert result.cost is not None and result.cost <= best + 1e-9, result.log


REMAT_FLOOR = Graph.from_json(graph_doc([
    {"id": "s", "deps": [], "cost": 1, "memory": 10},
    {"id": "a", "deps": ["s"], "cost": 1, "memory": 10},
    {"id": "b", "deps": ["a"], "cost": 4, "memory": 10},
    {"id": "c", "deps": ["b"], "cost": 4, "memory": 10},
    {"id": "d", "deps": ["c", "a"], "cost": 1, "memory": 1},
], name="remat-floor"))
"""Without transfers nothing fits under checkpoint-all's 30 bytes (recomputing a for d needs s, a and c at
once); moving a to the host fits the smallest feasible budget, 21."""


def test_a_budget_below_the_remat_only_floor_gets_a_plan_that_offloads() -> None:
    g, budget = REMAT_FLOOR, REMAT_FLOOR.min_feasible_budget
    assert budget == 21 and stage_optimum(g, 29) == plan_optimum(g, 29) == math.inf
    assert solve(g, budget=budget, strategy="checkmate", backend="highs").status is ResultStatus.INFEASIBLE
    transfer = Transfer(bandwidth=10.0)
    result = _joint(g, budget, transfer)
    assert result.status in FITTING_STATUSES, result.log
    assert result.plan is not None and result.plan.has_transfers
    assert result.peak_memory is not None and result.peak_memory <= budget
    assert result.cost == offload_optimum(g, budget, transfer) == 12.0


def test_strictly_cheaper_than_remat_only_where_copies_hide_and_never_dearer_where_they_cannot() -> None:
    g = chain(8)
    remat = solve(g, budget=4, strategy="checkmate", backend="highs")
    assert remat.status is ResultStatus.OPTIMAL and remat.cost == 26.0
    fast = _joint(g, 4, FAST)
    assert fast.cost == g.base_cost == 17.0  # every activation goes out and comes back behind a compute
    assert fast.status is ResultStatus.OPTIMAL  # the base cost proves it
    slow = _joint(g, 4, Transfer(bandwidth=0.01))  # a copy lasts 100 computes
    assert slow.cost == remat.cost and slow.plan is not None and not slow.plan.has_transfers


def test_the_host_budget_caps_what_is_offloaded() -> None:
    g = chain(8)
    capped = _joint(g, 4, FAST, host_budget=2)
    assert capped.status in FITTING_STATUSES and capped.host_peak_memory is not None
    assert capped.host_peak_memory <= 2
    assert capped.cost is not None and 17.0 < capped.cost < 26.0
    nothing = _joint(g, 4, FAST, host_budget=0)
    assert nothing.cost == 26.0 and nothing.host_peak_memory == 0


def test_checkmate_with_the_offload_option_runs_the_joint_strategy() -> None:
    g = chain(8)
    routed = solve(g, budget=4, strategy="checkmate", backend="highs", options={"offload": True}, transfer=FAST)
    assert routed.strategy == "checkmate" and routed.cost == 17.0
    assert routed.plan is not None and routed.plan.has_transfers
    plain = solve(g, budget=4, strategy="checkmate", backend="highs", options={"offload": False}, transfer=FAST)
    assert plain.cost == 26.0


def test_offloading_without_transfer_parameters_is_refused_with_what_to_give() -> None:
    g = chain(4)
    with pytest.raises(InvalidRequest, match="'checkmate-offload' moves values to host memory.*'transfer'"):
        solve(g, budget=4, strategy="checkmate-offload")
    with pytest.raises(InvalidRequest, match="'checkmate' with option 'offload' moves values.*'transfer'") as e:
        solve(g, budget=4, strategy="checkmate", options={"offload": True})
    assert e.value.field == "transfer"
    with pytest.raises(InvalidRequest, match="Option 'offload' of checkmate must be true or false, got 'yes'"):
        solve(g, budget=4, strategy="checkmate", options={"offload": "yes"}, transfer=FAST)
    assert solve(g, budget=4, strategy="checkmate", options={"offload": False}).status in FITTING_STATUSES


def test_progress_shows_only_plans_that_fit_improving_and_the_base_cost_as_bound() -> None:
    g = chain(8)
    seen: list[Progress] = []
    result = _joint(g, 3, FAST, on_progress=seen.append)
    costs = [p.incumbent_cost for p in seen if p.incumbent_cost is not None]
    assert costs and costs[-1] == result.cost
    assert all(c >= result.cost for c in costs)  # type: ignore[operator]
    assert {p.lower_bound for p in seen if p.lower_bound is not None} == {g.base_cost}


@pytest.mark.parametrize("limits", [{"time_limit_s": 2.0}, {"time_limit_s": 60.0, "convergence": Convergence()}],
                         ids=["time-limit", "convergence"])
def test_a_large_graph_ends_by_the_time_limit_or_once_converged(limits: dict) -> None:
    g = benchmark_graph("mobilenet")
    transfer = Transfer.from_profile("pcie4-x16", seconds_per_cost_unit=1e-4)
    result = solve(g, budget_ratio=0.3, strategy="checkmate-offload", transfer=transfer, **limits)
    assert result.status in FITTING_STATUSES, result.log
    assert result.solve_time_s < (4.0 if "convergence" not in limits else 20.0)


def test_a_stopped_solve_ends_at_once() -> None:
    stop = Stop()
    stop.set()
    result = _joint(chain(8), 4, FAST, stop_event=stop)
    assert result.status is ResultStatus.CANCELLED


def test_the_joint_milp_offloads_every_activation_behind_a_compute() -> None:
    g = chain(8)
    ctx = SolveContext(SolveLimits(time_limit_s=30, backend="highs"), OffloadSettings(transfer=FAST))
    found = solve_offload_milp(g, 4, FAST, ctx, None)
    assert found.plan is not None and found.plan.has_transfers
    assert simulate(g, found.plan, transfer=FAST).cost == 17.0
    assert found.lower_bound is None and not found.optimal  # the model's bound bounds nothing simulated


def test_the_joint_model_has_a_copy_variable_only_where_a_copy_can_help() -> None:
    g = chain(8)
    model = build_offload_model(g, 4, FAST)
    assert model is not None and not model.proves
    offloaded = {int(i) for i in (model.O_var >= 0).nonzero()[1]}
    reloaded = {int(i) for i in (model.L_var >= 0).nonzero()[1]}
    assert reloaded <= offloaded
    assert g.index["g0"] not in offloaded  # nothing reads the last gradient


def test_a_schedule_without_transfers_is_a_solution_of_the_joint_model_at_its_own_cost() -> None:
    g = chain(8)
    remat = solve(g, budget=5, strategy="checkmate", backend="highs")
    assert remat.schedule is not None
    model = build_offload_model(g, 5, FAST)
    assert model is not None
    start = model.encode(remat.schedule)  # the MIP start of the joint MILP
    assert start is not None
    assert model.real_cost(model.milp.objective_value(start)) == pytest.approx(remat.cost)


@settings(max_examples=15, deadline=None)
@given(g=random_chains(max_length=4), bandwidth=st.sampled_from([1.0, 5.0, 20.0]),
       where=st.sampled_from([0.0, 0.3, 0.6]))
def test_the_joint_milps_plans_keep_to_its_memory_once_stages_wait_for_their_offloads(
        g: Graph, bandwidth: float, where: float) -> None:
    budget = int(g.min_feasible_budget + where * (g.checkpoint_all_peak - g.min_feasible_budget))
    transfer = Transfer(bandwidth=bandwidth)
    ctx = SolveContext(SolveLimits(time_limit_s=30, backend="highs"), OffloadSettings(transfer=transfer))
    found = solve_offload_milp(g, budget, transfer, ctx, None)
    assert not any("solving again" in line for line in ctx.record.log)  # no answer simulated over the budget
    if found.plan is not None:
        assert simulate(g, found.plan, transfer=transfer).peak_memory <= budget
