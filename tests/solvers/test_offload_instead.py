"""offload_instead_of_recomputing: a plan that computes values again made cheaper by keeping them on the host."""

from __future__ import annotations

from factories import chain, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import Graph, Plan, Transfer, plan_from_schedule, simulate
from remat.solvers.baselines import checkpoint_last_schedule
from remat.solvers.offload import offload_instead_of_recomputing


def _computes(plan: Plan) -> list[int]:
    return [v for op, v in plan.steps if op == "compute"]


@settings(max_examples=60, deadline=None)
@given(g=random_dags(min_nodes=2, max_nodes=10), bandwidth=st.sampled_from([0.5, 5.0, 500.0]),
       host=st.sampled_from([None, 0, 30]))
def test_it_computes_less_fits_and_costs_less_or_gives_nothing(g: Graph, bandwidth: float, host: int | None) -> None:
    remat = plan_from_schedule(g, checkpoint_last_schedule(g))
    budget = simulate(g, remat).peak_memory
    transfer = Transfer(bandwidth=bandwidth)
    found = offload_instead_of_recomputing(g, remat, budget, transfer, host_budget=host)
    if found is None:
        return
    plan, simulation = found
    again = simulate(g, plan, transfer=transfer)
    assert (again.cost, again.peak_memory, again.host_peak_memory) == (
        simulation.cost, simulation.peak_memory, simulation.host_peak_memory)
    assert simulation.peak_memory <= budget and (host is None or simulation.host_peak_memory <= host)
    assert simulation.cost < simulate(g, remat, transfer=transfer).cost
    fewer = _computes(plan)
    assert set(fewer) == set(range(g.size)) and len(fewer) < len(_computes(remat))


def test_a_value_kept_takes_the_recomputations_that_only_fed_it_along() -> None:
    g = chain(5, memory=4)  # checkpoint-last computes each value again from the first for every backward node
    remat = plan_from_schedule(g, checkpoint_last_schedule(g))
    budget = simulate(g, remat).peak_memory + 4  # room for one more value on the device
    found = offload_instead_of_recomputing(g, remat, budget, Transfer(bandwidth=1e6))
    assert found is not None
    plan, simulation = found
    assert simulation.cost < simulate(g, remat).cost
    # a value kept is not computed again, nor are its ancestors where only it read them
    assert len(_computes(plan)) < len(_computes(remat)) - 1


def test_a_stop_before_the_first_change_gives_nothing() -> None:
    g = chain(5, memory=4)
    remat = plan_from_schedule(g, checkpoint_last_schedule(g))
    budget = simulate(g, remat).peak_memory
    assert offload_instead_of_recomputing(g, remat, budget, Transfer(bandwidth=1e6), stopped=lambda: True) is None
