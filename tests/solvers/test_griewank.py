from functools import cache

import pytest
from factories import chain, random_chains
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import InvalidRequest, plan_from_schedule, simulate
from remat.solvers import binomial_steps, revolve_schedule, solve
from remat.solvers.baselines import delivery_steps


@cache
def _reversal_steps(steps, snapshots):
    """Griewank's recurrence, by brute force: advance m steps, snapshot, reverse the top part with
    one snapshot fewer, then the bottom part with all of them."""
    if steps <= 1:
        return 0
    if snapshots == 1:
        return steps * (steps - 1) // 2
    return min(m + _reversal_steps(steps - m, snapshots - 1) + _reversal_steps(m, snapshots)
               for m in range(1, steps))


def test_closed_form_matches_the_recurrence():
    for steps in range(1, 45):
        for snapshots in range(1, 12):
            assert binomial_steps(steps, snapshots) == _reversal_steps(steps, snapshots), (steps, snapshots)


@pytest.mark.parametrize("snapshots, per_step", [(2, 28.8), (5, 6.3), (10, 3.6), (32, 2.4), (63, 1.94)])
def test_published_ratios_for_a_thousand_steps(snapshots, per_step):
    assert binomial_steps(1000, snapshots) / 1000 == pytest.approx(per_step, abs=0.05)


def test_one_snapshot_is_quadratic():
    assert binomial_steps(100, 1) == 100 * 99 // 2


def _forward_computes(g, snapshots):
    sim = simulate(g, plan_from_schedule(g, revolve_schedule(g, snapshots)))
    return int(sim.compute_counts[list(g.forward_nodes)].sum()), sim


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 21, 34, 55])
def test_unit_chains_reach_the_binomial_minimum_and_hold_the_snapshots_claimed(n):
    g = chain(n, fixed_memory=7)
    for snapshots in range(n):
        computes, sim = _forward_computes(g, snapshots)
        # n forward values over a free input: revolve with one more step and one more snapshot
        assert computes == delivery_steps(n, snapshots) == binomial_steps(n + 1, snapshots + 1)
        # s snapshots plus the working set: the value in use, the incoming and the new gradient
        assert sim.peak_memory == 7 + snapshots + 3
        assert sim.compute_counts[list(range(n, 2 * n + 1))].tolist() == [1] * (n + 1)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.data())
def test_weighted_chains_follow_the_same_recursion(n, data):
    g = chain(n, cost=2.5, memory=3)
    snapshots = data.draw(st.integers(0, n - 1))
    computes, sim = _forward_computes(g, snapshots)
    assert computes == delivery_steps(n, snapshots)
    assert sim.peak_memory == 3 * (snapshots + 3)


@pytest.mark.parametrize("n, snapshots", [(30, 0), (30, 2), (30, 5), (60, 4)])
def test_the_search_takes_as_many_snapshots_as_the_budget_holds(n, snapshots):
    g = chain(n)
    result = solve(g, budget=snapshots + 3, strategy="griewank")
    assert result.status.value == "feasible"
    assert result.cost == n + 1 + delivery_steps(n, snapshots)


def test_the_snapshot_count_can_be_pinned():
    g = chain(20)
    result = solve(g, budget_ratio=1.0, strategy="griewank", options={"snapshots": 2})
    assert result.peak_memory == 5
    assert result.cost == 21 + delivery_steps(20, 2)
    with pytest.raises(InvalidRequest, match="snapshots"):
        solve(g, budget_ratio=1.0, strategy="griewank", options={"snapshots": -1})


@settings(max_examples=80, deadline=None)
@given(random_chains(max_length=12), st.floats(0.3, 1.0))
def test_the_search_fits_whenever_some_snapshot_count_does(g, ratio):
    budget = max(g.min_feasible_budget, int(ratio * g.checkpoint_all_peak))
    trials = [simulate(g, plan_from_schedule(g, revolve_schedule(g, s))) for s in range(len(g.forward_nodes))]
    fitting = [t.cost for t in trials if t.peak_memory <= budget]
    result = solve(g, budget=budget, strategy="griewank")
    if fitting:
        assert result.peak_memory <= budget
        assert result.cost == min(fitting)
    else:
        assert result.peak_memory == min(t.peak_memory for t in trials)
