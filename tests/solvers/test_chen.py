import math

import numpy as np
import pytest
from factories import benchmark_graph, chain, graph_doc, random_chains, random_dags
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from remat.schedules import Graph, StrategyNotApplicable, plan_from_schedule, simulate
from remat.solvers import segment_schedule, solve
from remat.solvers.baselines import EXHAUSTIVE_LIMIT, greedy_checkpoints, segment_budgets, sqrtn_checkpoints


@pytest.mark.parametrize("n", [16, 36, 50, 100, 225, 400])
def test_sqrtn_on_a_chain_keeps_about_sqrt_n_values_and_recomputes_one_forward_pass(n):
    g = chain(n)
    checkpoints = sqrtn_checkpoints(g.forward_nodes)
    schedule = segment_schedule(g, checkpoints)
    # what crosses from the forward into the backward pass: the checkpoints and the last segment
    crossing = int(schedule.S[n, :n].sum())
    assert math.sqrt(n) - 1 <= crossing <= 2 * math.sqrt(n) + 1
    sim = simulate(g, plan_from_schedule(g, schedule))
    assert sim.peak_memory <= 2 * math.sqrt(n) + 3
    # one extra forward pass over the dropped segments: not the checkpoints, nor the last segment
    assert sim.cost == g.base_cost + checkpoints[-1] + 1 - len(checkpoints)


def test_sqrtn_uses_every_kth_candidate():
    assert sqrtn_checkpoints(range(16)) == (3, 7, 11, 15)
    assert sqrtn_checkpoints(range(3)) == (0, 1, 2)
    assert sqrtn_checkpoints(()) == ()


def test_greedy_checkpoints_when_the_running_sum_passes_the_budget():
    g = Graph.from_json(graph_doc([
        {"id": str(i), "deps": [str(i - 1)] if i else [], "cost": 1, "memory": m}
        for i, m in enumerate([5, 1, 1, 5, 1, 1])]))
    assert greedy_checkpoints(g, range(6), 0) == (0, 1, 2, 3, 4, 5)
    assert greedy_checkpoints(g, range(6), 6) == (2, 5)
    assert greedy_checkpoints(g, [3, 4], 6) == (3,)  # the running sum only resets at a candidate
    assert greedy_checkpoints(g, range(6), 14) == ()
    assert greedy_checkpoints(g, range(6), 2**80) == ()  # beyond any byte count: no checkpoint


@settings(max_examples=150, deadline=None)
@given(random_chains(max_length=12), st.data())
def test_greedy_checkpoints_follow_chens_walk(g, data):
    candidates = sorted(data.draw(st.sets(st.sampled_from(g.forward_nodes))))
    budget = data.draw(st.integers(0, int(g.memory.sum()) + 1))
    chosen, running = [], 0
    for v in g.forward_nodes:  # Chen's walk, one node at a time
        running += int(g.memory[v])
        if running > budget and v in candidates:
            chosen.append(v)
            running = 0
    assert greedy_checkpoints(g, candidates, budget) == tuple(chosen)


@settings(max_examples=150, deadline=None)
@given(random_dags(max_nodes=12, training=True), st.data())
def test_segment_budgets_reach_every_greedy_choice(g, data):
    candidates = sorted(data.draw(st.sets(st.sampled_from(g.forward_nodes))))
    total = int(g.memory[list(g.forward_nodes)].sum())
    every = {greedy_checkpoints(g, candidates, b) for b in range(total + 2)}
    listed = [greedy_checkpoints(g, candidates, b) for b in segment_budgets(g, candidates)]
    assert set(listed) == every
    counts = [len(c) for c in listed]
    assert counts == sorted(counts, reverse=True)  # more budget, fewer checkpoints


@pytest.mark.parametrize("strategy", ["chen-sqrtn", "chen-greedy", "griewank"])
def test_linear_only_strategies_name_the_branching_node(strategy):
    g = Graph.from_json(graph_doc([
        {"id": "x", "deps": [], "cost": 1, "memory": 1},
        {"id": "left", "deps": ["x"], "cost": 1, "memory": 1},
        {"id": "right", "deps": ["x"], "cost": 1, "memory": 1},
        {"id": "join", "deps": ["left", "right"], "cost": 1, "memory": 1},
        {"id": "grad", "deps": ["join", "x"], "cost": 1, "memory": 1, "kind": "backward"},
    ]))
    with pytest.raises(StrategyNotApplicable, match="'x' branches") as info:
        solve(g, budget_ratio=1.0, strategy=strategy)
    assert info.value.node == "x"
    assert "chain" in str(info.value)


@settings(max_examples=40, deadline=None)
@given(random_chains(max_length=10), st.floats(0.3, 1.0))
@pytest.mark.parametrize("strategy", ["chen-greedy", "ap-greedy", "linearized-greedy"])
def test_greedy_fits_whenever_some_segment_budget_does(strategy, g, ratio):
    budget = max(g.min_feasible_budget, int(ratio * g.checkpoint_all_peak))
    candidates = list(range(1, len(g.forward_nodes) - 1)) if strategy == "ap-greedy" else list(g.forward_nodes)
    if not candidates:
        return
    total = int(g.memory[list(g.forward_nodes)].sum())
    sets = {greedy_checkpoints(g, candidates, b) for b in range(total + 2)}
    assume(len(sets) <= EXHAUSTIVE_LIMIT)  # beyond it the search samples, and this claim is not made
    trials = [simulate(g, plan_from_schedule(g, segment_schedule(g, c))) for c in sets]
    fitting = [t.cost for t in trials if t.peak_memory <= budget]
    result = solve(g, budget=budget, strategy=strategy)
    if fitting:
        assert result.status.value == "feasible"
        assert result.cost == min(fitting)
    else:
        assert result.status.value == "over_budget"
        assert result.peak_memory == min(t.peak_memory for t in trials)


def test_the_segment_budget_can_be_pinned():
    g = benchmark_graph("vgg16")
    pinned = solve(g, budget_ratio=1.0, strategy="chen-greedy", options={"segment_budget": 10**9})
    expected = segment_schedule(g, greedy_checkpoints(g, g.forward_nodes, 10**9))
    assert np.array_equal(pinned.schedule.S, expected.S)
