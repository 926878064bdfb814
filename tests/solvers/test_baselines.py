"""Properties every baseline shares: valid simulated plans, honest numbers, clear refusals."""

import numpy as np
import pytest
from factories import BENCHMARK_NAMES, benchmark_graph, random_chains, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import InvalidRequest, StrategyNotApplicable, recompute_closure, simulate
from remat.solvers import BASELINES as BASELINE_STRATEGIES
from remat.solvers import STRATEGIES, StrategyKind, solve
from remat.solvers.baselines import _checkpoint as checkpoint
from remat.solvers.baselines import checkpoint_last_schedule
from remat.solvers.offload import OFFLOAD_BASELINES

BASELINES = sorted(s.name for s in BASELINE_STRATEGIES)
KNOBS = {"chen-greedy": "segment_budget", "ap-greedy": "segment_budget", "linearized-greedy": "segment_budget",
         "griewank": "snapshots"}


def test_the_baselines_are_the_registered_strategies_of_kind_baseline_and_use_no_backend():
    engine_free = [s.name for s in (*BASELINE_STRATEGIES, *OFFLOAD_BASELINES)]
    assert sorted(engine_free) == sorted(name for name, s in STRATEGIES.items() if s.kind is StrategyKind.BASELINE)
    assert list(STRATEGIES)[:len(engine_free)] == engine_free
    assert not any(STRATEGIES[name].offloads for name in BASELINES)
    assert all(not STRATEGIES[name].backends for name in BASELINES)
    assert all(s.backends for s in STRATEGIES.values() if s.kind is not StrategyKind.BASELINE)


def _check_honest(g, result):
    """The result's plan simulates valid and its numbers are the simulator's."""
    sim = simulate(g, result.plan)
    assert result.cost == sim.cost
    assert result.peak_memory == sim.peak_memory
    assert result.status.value == ("feasible" if sim.peak_memory <= result.budget else "over_budget")


def _solve_or_refuse(g, strategy, ratio):
    try:
        STRATEGIES[strategy].check_graph(g)
    except StrategyNotApplicable:
        with pytest.raises(StrategyNotApplicable):
            solve(g, budget_ratio=ratio, strategy=strategy)
        return None
    budget = max(g.min_feasible_budget, int(ratio * g.checkpoint_all_peak))
    return solve(g, budget=budget, strategy=strategy)


@settings(max_examples=40, deadline=None)
@given(st.one_of(random_dags(max_nodes=14), random_chains(max_length=10)), st.floats(0.2, 1.2))
@pytest.mark.parametrize("strategy", BASELINES)
def test_every_plan_simulates_valid_and_reports_the_simulated_numbers(strategy, g, ratio):
    result = _solve_or_refuse(g, strategy, ratio)
    if result is not None:
        _check_honest(g, result)


@settings(max_examples=100, deadline=None)
@given(random_dags(max_nodes=14))
def test_checkpoint_all_has_overhead_one(g):
    result = solve(g, budget_ratio=1.0, strategy="checkpoint-all")
    assert result.overhead == 1 or g.base_cost == 0
    assert result.peak_memory == g.checkpoint_all_peak


def test_knob_strategies_name_their_knob():
    assert {name: STRATEGIES[name].knob for name in BASELINES if STRATEGIES[name].knob} == KNOBS


@pytest.mark.parametrize("name", BENCHMARK_NAMES)
def test_every_baseline_runs_on_every_benchmark_graph(name):
    g = benchmark_graph(name)
    for strategy in BASELINES:
        result = _solve_or_refuse(g, strategy, 0.8)
        if result is not None:
            _check_honest(g, result)
            if strategy in KNOBS:
                assert any(KNOBS[strategy] in line for line in result.log), strategy


@pytest.mark.parametrize("strategy", BASELINES)
def test_an_option_the_strategy_does_not_read_is_refused_by_name(strategy):
    g = benchmark_graph("vgg16")
    takes = f"the options are: {KNOBS[strategy]}" if strategy in KNOBS else "it takes none"
    with pytest.raises(InvalidRequest, match=f"Unknown option 'segmnet_budget' for {strategy}; {takes}"):
        solve(g, budget_ratio=1.0, strategy=strategy, options={"segmnet_budget": 3})


@settings(max_examples=200, deadline=None)
@given(random_dags(max_nodes=14))
def test_checkpoint_last_computes_the_closure_of_holding_the_newest_value(g):
    schedule = checkpoint_last_schedule(g)
    n = g.size
    S = np.zeros((n, n), dtype=bool)
    for t in range(n - 1):
        S[t + 1, t] = g.last_use[t] > t
    assert np.array_equal(schedule.S, S) and np.array_equal(schedule.R, recompute_closure(g, S))


def test_checkpoint_last_is_refused_where_its_plan_would_pass_the_largest_it_makes(monkeypatch):
    g = benchmark_graph("rl100")
    computes = checkpoint_last_schedule(g).compute_count
    monkeypatch.setattr(checkpoint, "LARGEST_PLAN", computes)
    assert solve(g, budget_ratio=1.0, strategy="checkpoint-last").schedule.compute_count == computes
    monkeypatch.setattr(checkpoint, "LARGEST_PLAN", computes - 1)
    with pytest.raises(StrategyNotApplicable, match=f"its plan would compute {computes:,} values"):
        solve(g, budget_ratio=1.0, strategy="checkpoint-last")
