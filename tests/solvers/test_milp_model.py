"""The Checkmate model builder: structure, memory scaling, and the map between schedules and variables."""

from __future__ import annotations

import numpy as np
from factories import chain, graph_doc, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import Graph, Schedule, plan_from_schedule, recompute_closure, simulate
from remat.solvers.checkmate import MAX_MEMORY_UNITS, MemoryScale, build_checkmate_model


def random_schedule(graph: Graph, data: st.DataObject) -> Schedule:
    """A Checkmate schedule from a random lower-triangular S, with R its minimal closure."""
    n = graph.size
    bits = data.draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))
    S = np.tril(np.array(bits, dtype=bool).reshape(n, n), k=-1)
    return Schedule(recompute_closure(graph, S), S)


def test_variables_exist_only_below_the_diagonal_and_only_where_a_value_can_still_be_needed() -> None:
    g = Graph.from_json(graph_doc([
        {"id": "a", "deps": [], "cost": 1, "memory": 4},
        {"id": "b", "deps": ["a"], "cost": 1, "memory": 4},
        {"id": "c", "deps": [], "cost": 1, "memory": 4},
        {"id": "d", "deps": ["c"], "cost": 1, "memory": 4},
    ]))
    m = build_checkmate_model(g, 100)
    rows, cols = np.nonzero(m.R_var >= 0)
    assert np.all(cols < rows)
    assert np.array_equal(m.R_var >= 0, m.S_var >= 0)
    # a and b feed nothing from stage 2 on (c and d do not read them): no variables for them there.
    assert not (m.S_var[2:, :2] >= 0).any() and not (m.R_var[2:, :2] >= 0).any()
    assert m.S_var[3, 2] >= 0


def test_memory_is_counted_in_exact_units_of_the_common_divisor() -> None:
    g = chain(3, memory=96, fixed_memory=10)
    scale = MemoryScale.of(g, 10 + 96 * 4 + 50)
    assert (scale.unit, scale.exact, scale.capacity) == (96, True, 4)
    assert list(scale.sizes) == [1] * g.size


def test_huge_sizes_are_rounded_up_and_the_budget_down_so_that_a_fit_in_units_is_a_fit_in_bytes() -> None:
    sizes = [MAX_MEMORY_UNITS * 8 + 1, 3, 5 * MAX_MEMORY_UNITS + 7]
    g = Graph.from_json(graph_doc([
        {"id": f"n{k}", "deps": [f"n{k - 1}"] if k else [], "cost": 1, "memory": size} for k, size in enumerate(sizes)
    ], fixed_memory=5))
    budget = 5 + sum(sizes)
    scale = MemoryScale.of(g, budget)
    assert not scale.exact
    assert max(scale.sizes) <= MAX_MEMORY_UNITS
    assert all(units * scale.unit >= size for units, size in zip(scale.sizes, sizes, strict=True))
    assert scale.capacity * scale.unit <= budget - 5


@settings(max_examples=60, deadline=None)
@given(g=random_dags(max_nodes=9), data=st.data())
def test_a_schedule_encodes_to_a_feasible_start_whose_memory_and_cost_are_the_simulated_ones(
        g: Graph, data: st.DataObject) -> None:
    schedule = random_schedule(g, data)
    sim = simulate(g, plan_from_schedule(g, schedule))
    m = build_checkmate_model(g, sim.peak_memory)
    x = m.encode(schedule)
    assert x is not None and m.milp.watch is not None
    assert m.milp.violation(x) == 0
    # The start drops retention nothing reads (and the recomputation it needed), so it never costs more.
    started = simulate(g, plan_from_schedule(g, m.schedule(x[m.milp.watch])))
    assert started.cost <= sim.cost and started.peak_memory <= sim.peak_memory
    assert g.fixed_memory + max(x[m.u_vars[:, 2]]) * m.memory.unit == started.peak_memory
    assert np.isclose(m.real_cost(m.milp.objective_value(x)), started.cost, rtol=1e-12, atol=1e-9)
    # One byte under its peak and the start no longer fits the model.
    if started.peak_memory > g.fixed_memory:
        assert build_checkmate_model(g, started.peak_memory - 1).encode(schedule) is None


@settings(max_examples=30, deadline=None)
@given(g=random_dags(min_nodes=2, max_nodes=8), data=st.data())
def test_solution_values_are_rounded_not_truncated(g: Graph, data: st.DataObject) -> None:
    schedule = random_schedule(g, data)
    m = build_checkmate_model(g, g.checkpoint_all_peak * 4)
    x = m.encode(schedule)
    assert x is not None and m.milp.watch is not None
    noisy = x[m.milp.watch] + np.where(x[m.milp.watch] > 0.5, -4e-4, 4e-4)
    decoded = m.schedule(noisy)
    assert np.array_equal(decoded.S, m.retention_values(x[m.milp.watch]) > 0.5)
    assert np.array_equal(decoded.R, recompute_closure(g, decoded.S))


def test_the_objective_carries_the_cost_of_every_first_computation_as_its_constant() -> None:
    g = chain(4, cost=2.5)
    m = build_checkmate_model(g, g.checkpoint_all_peak)
    assert np.isclose(m.real_cost(m.milp.objective_offset), g.base_cost)
    assert np.all(m.milp.objective >= 0)


def test_the_build_gives_up_as_soon_as_it_is_stopped() -> None:
    g = chain(50)
    assert build_checkmate_model(g, g.checkpoint_all_peak, stopped=lambda: True) is None
