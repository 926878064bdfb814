import numpy as np
from factories import benchmark_graph, chain, random_chains, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import plan_from_schedule, recompute_closure, simulate
from remat.solvers import segment_schedule


@st.composite
def graph_and_checkpoints(draw, graphs=None):
    g = draw(random_dags(max_nodes=14) if graphs is None else graphs)
    return g, sorted(draw(st.sets(st.sampled_from(g.forward_nodes)))) if g.forward_nodes else []


@settings(max_examples=150, deadline=None)
@given(graph_and_checkpoints())
def test_every_checkpoint_choice_gives_a_valid_plan_with_optimal_recomputation(case):
    g, checkpoints = case
    schedule = segment_schedule(g, checkpoints)
    assert np.array_equal(schedule.R, recompute_closure(g, schedule.S))
    sim = simulate(g, plan_from_schedule(g, schedule))
    backward = np.flatnonzero(g.backward)
    assert (sim.compute_counts[backward] == 1).all()  # only forward values are ever dropped
    assert (sim.compute_counts[checkpoints] == 1).all()  # nor are checkpoints


@settings(max_examples=100, deadline=None)
@given(graph_and_checkpoints(random_chains(max_length=14)))
def test_on_a_chain_each_dropped_segment_is_recomputed_once(case):
    g, checkpoints = case
    sim = simulate(g, plan_from_schedule(g, segment_schedule(g, checkpoints)))
    assert sim.compute_counts.max() <= 2


@settings(max_examples=100, deadline=None)
@given(random_dags(max_nodes=14))
def test_no_checkpoints_or_all_of_them_is_checkpoint_all(g):
    for checkpoints in ([], list(g.forward_nodes)):
        sim = simulate(g, plan_from_schedule(g, segment_schedule(g, checkpoints)))
        assert sim.cost == g.base_cost
        assert sim.peak_memory == g.checkpoint_all_peak


def test_a_checkpoint_splits_the_backward_ladder():
    g = chain(6)  # f0..f5, loss (6), g5 (7) .. g0 (12)
    schedule = segment_schedule(g, [2])
    # f0 and f1 are dropped after the forward pass and recomputed together where g1 first needs f1;
    # f0 is kept on for g0, f1 is freed after g1
    g1 = g.index["g1"]
    assert sorted(np.flatnonzero(schedule.R[g1]).tolist()) == [0, 1, g1]
    assert schedule.S[g1 + 1, 0] and not schedule.S[g1 + 1, 1]
    # the tail segment f3..f5 belongs with the backward pass and is never dropped
    assert schedule.S[g.index["loss"], 3:6].all()


@settings(max_examples=100, deadline=None)
@given(graph_and_checkpoints())
def test_a_rung_never_keeps_a_value_past_its_last_reader(case):
    # Recomputing a dropped value from an older one that is gone would keep that one alive longer
    # (on random DAGs that costs more than the drop saves); such a value is kept across its gap.
    g, checkpoints = case
    schedule = segment_schedule(g, checkpoints)
    kept = set(checkpoints) | set(np.flatnonzero(g.backward).tolist())
    for u in kept:
        assert not schedule.S[g.last_use[u] + 1:, u].any()


def test_dense_checkpoints_on_a_random_layered_graph_do_not_raise_the_peak():
    g = benchmark_graph("rl100")
    checkpoints = [v for v in g.forward_nodes if v % 10]
    sim = simulate(g, plan_from_schedule(g, segment_schedule(g, checkpoints)))
    assert sim.peak_memory <= g.checkpoint_all_peak
