"""offload_to_fit: a plan without transfers brought down to a budget by moving idle values to the host."""

from __future__ import annotations

from exhaustive import offload_optimum
from factories import graph_doc, random_chains
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import Graph, Transfer, checkpoint_all_plan, simulate
from remat.solvers.offload import offload_to_fit

TWO_ACTIVATIONS = Graph.from_json(graph_doc([
    {"id": "f0", "deps": [], "cost": 2.0, "memory": 36},
    {"id": "f1", "deps": ["f0"], "cost": 1.0, "memory": 5},
    {"id": "f2", "deps": ["f1"], "cost": 2.0, "memory": 39},
    {"id": "loss", "deps": ["f2"], "cost": 2.0, "memory": 37},
    {"id": "g2", "deps": ["loss", "f2"], "cost": 2.0, "memory": 36},
    {"id": "g1", "deps": ["g2", "f1"], "cost": 2.0, "memory": 29},
    {"id": "g0", "deps": ["g1", "f0"], "cost": 5.0, "memory": 3},
], name="two-activations", fixed_memory=2))
"""At 126 bytes the greedy first moves f0 and f1 (f0 coming back early, under g2); moving f0 alone, back
under g1, is enough and cheaper: the pruning pass finds it."""


@settings(max_examples=60, deadline=None)
@given(g=random_chains(max_length=4), where=st.floats(0.0, 1.0), bandwidth=st.sampled_from([1.0, 10.0, 100.0]),
       host=st.sampled_from([None, 0, 40]))
def test_a_fitted_plan_keeps_the_computes_fits_and_holds_what_the_host_budget_allows(
        g: Graph, where: float, bandwidth: float, host: int | None) -> None:
    budget = int(g.min_feasible_budget + where * (g.checkpoint_all_peak - g.min_feasible_budget))
    plan = checkpoint_all_plan(g)
    transfer = Transfer(bandwidth=bandwidth)
    fitted = offload_to_fit(g, plan, budget, transfer, host_budget=host)
    if fitted is None:
        assert simulate(g, plan).peak_memory > budget
        return
    moved, simulation = fitted
    assert simulation.peak_memory <= budget
    assert simulate(g, moved, transfer=transfer).cost == simulation.cost
    assert [s for s in moved.steps if s[0] == "compute"] == [s for s in plan.steps if s[0] == "compute"]
    assert host is None or simulation.host_peak_memory <= host
    if simulate(g, plan).peak_memory <= budget:
        assert moved == plan


def test_moves_it_does_not_need_are_undone() -> None:
    g, budget, transfer = TWO_ACTIVATIONS, 126, Transfer(bandwidth=10)
    fitted = offload_to_fit(g, checkpoint_all_plan(g), budget, transfer)
    assert fitted is not None
    moved, simulation = fitted
    assert [(op, g.ids[v]) for op, v in moved.steps if op in ("offload", "reload")] == [
        ("offload", "f0"), ("reload", "f0")]
    assert simulation.cost == offload_optimum(g, budget, transfer) == 17.6  # the exposed 1.6 of f0's reload


def test_nothing_is_moved_beyond_the_host_budget() -> None:
    g, budget = TWO_ACTIVATIONS, 126
    assert offload_to_fit(g, checkpoint_all_plan(g), budget, Transfer(bandwidth=10), host_budget=35) is None
    fitted = offload_to_fit(g, checkpoint_all_plan(g), budget, Transfer(bandwidth=10), host_budget=41)  # f0 and f1
    assert fitted is not None and fitted[1].host_peak_memory <= 41
