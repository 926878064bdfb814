"""Schedules held as their entries give the closure, plan, peak and cost the matrices give, without the matrices."""

import pickle
import tracemalloc

import numpy as np
import pytest
from factories import BENCHMARK_NAMES, benchmark_graph, chain, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import (
    InvalidSchedule,
    Schedule,
    ScheduleEntries,
    checkpoint_all_schedule,
    plan_from_schedule,
    plan_peak_and_cost,
    recompute_closure,
    simulate,
)
from remat.schedules._sparse import merged_runs
from remat.solvers.baselines import checkpoint_last_schedule, segment_schedule


@st.composite
def graph_and_runs(draw):
    """A random DAG and retention runs over it: they may overlap, touch or be empty."""
    g = draw(random_dags(max_nodes=12))
    n = g.size
    runs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n), st.integers(0, n)), max_size=3 * n))
    node = np.array([v for v, _, _ in runs], dtype=np.int64)
    start = np.array([max(a, v + 1) for v, a, _ in runs], dtype=np.int64)  # held only once computed
    end = np.array([b for _, _, b in runs], dtype=np.int64)
    return g, node, start, end


def _dense_retention(n, node, start, end):
    S = np.zeros((n, n), dtype=bool)
    for v, a, b in zip(node, start, end, strict=True):
        S[a:b, v] = True
    return S


@settings(max_examples=300, deadline=None)
@given(graph_and_runs())
def test_the_closure_of_runs_is_the_closure_of_their_matrix(case):
    g, node, start, end = case
    S = _dense_retention(g.size, node, start, end)
    R_entries, S_entries = ScheduleEntries.retaining(g, node, start, end).matrices()
    assert np.array_equal(S_entries, S)
    assert np.array_equal(R_entries, recompute_closure(g, S))


@settings(max_examples=300, deadline=None)
@given(graph_and_runs())
def test_a_schedule_of_entries_plans_and_measures_as_its_matrices_do(case):
    g, node, start, end = case
    sparse = Schedule.of_entries(ScheduleEntries.retaining(g, node, start, end))
    plan = plan_from_schedule(g, sparse)
    assert plan == plan_from_schedule(g, Schedule(sparse.R, sparse.S))
    sim = simulate(g, plan)
    assert plan_peak_and_cost(g, sparse) == (sim.peak_memory, sim.cost)


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**32 - 1))
def test_any_schedule_read_from_its_entries_fails_or_plans_as_its_matrices_do(half, seed):
    g = chain(half)
    rng = np.random.default_rng(seed)
    dense = Schedule(np.tril(rng.random((g.size, g.size)) < 0.4) | np.eye(g.size, dtype=bool),
                     np.tril(rng.random((g.size, g.size)) < 0.3, k=-1))
    sparse = Schedule.of_entries(ScheduleEntries.of(dense))
    outcomes = []
    for schedule in (dense, sparse):
        try:
            outcomes.append(plan_from_schedule(g, schedule))
        except InvalidSchedule as e:
            outcomes.append((str(e), e.stage, e.node))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("name", BENCHMARK_NAMES)
def test_baseline_schedules_measure_as_the_simulator_says(name):
    g = benchmark_graph(name)
    forward = g.forward_nodes
    schedules = [checkpoint_all_schedule(g), segment_schedule(g, forward[::7]), segment_schedule(g, forward[3::2])]
    if g.size <= 400:
        schedules.append(checkpoint_last_schedule(g))
    for schedule in schedules:
        sim = simulate(g, plan_from_schedule(g, schedule))
        assert plan_peak_and_cost(g, schedule) == (sim.peak_memory, sim.cost)


def test_runs_are_merged_where_they_overlap_or_touch():
    runs = merged_runs(np.array([2, 2, 2, 5, 5]), np.array([1, 3, 9, 4, 6]), np.array([3, 5, 9, 5, 8]))
    assert [r.tolist() for r in runs] == [[2, 5, 5], [1, 4, 6], [5, 5, 8]]


def test_a_large_schedule_of_entries_never_needs_stages_times_nodes_memory():
    g = chain(4_000)  # 8,001 nodes: R and S as matrices would take 128 MB
    tracemalloc.start()
    try:
        schedule = segment_schedule(g, g.forward_nodes[99::100])
        plan = plan_from_schedule(g, schedule)
        doc = schedule.to_json(g)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20  # 10 MB measured
    assert len(doc["stages"]) == g.size and simulate(g, plan).peak_memory == plan_peak_and_cost(g, schedule)[0]


def test_a_schedule_made_from_entries_reads_back_its_matrices_and_pickles():
    g = chain(4)
    schedule = checkpoint_all_schedule(g)
    assert schedule.has_entries and schedule.compute_count == g.size
    dense = Schedule(schedule.R, schedule.S)
    assert np.array_equal(dense.R, np.eye(g.size, dtype=bool)) and dense.compute_count == g.size
    for original in (schedule, dense):
        back = pickle.loads(pickle.dumps(original))
        assert np.array_equal(back.R, original.R) and np.array_equal(back.S, original.S)
    read = Schedule.from_json(g, schedule.to_json(g))
    assert read.has_entries and plan_from_schedule(g, read) == plan_from_schedule(g, dense)



@settings(max_examples=200, deadline=None)
@given(graph_and_runs())
def test_the_recomputations_of_entries_are_r_and_not_s_off_the_diagonal(case):
    g, node, start, end = case
    entries = ScheduleEntries.retaining(g, node, start, end)
    R, S = entries.matrices()
    extra = R & ~S
    np.fill_diagonal(extra, False)
    v, t = entries.recomputations()
    stage, node = np.nonzero(extra)
    assert sorted(zip(t.tolist(), v.tolist(), strict=True)) == list(zip(stage.tolist(), node.tolist(), strict=True))
