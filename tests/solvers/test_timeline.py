"""The incremental evaluator agrees with the simulator after any sequence of edits."""

from __future__ import annotations

import random

from factories import benchmark_graph, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import Graph, plan_from_schedule, simulate
from remat.solvers.search import Timeline


def assert_matches_simulator(graph: Graph, tl: Timeline) -> None:
    sim = simulate(graph, plan_from_schedule(graph, tl.schedule()))
    assert sim.peak_memory == tl.peak()
    assert abs(sim.cost - tl.total_cost) <= 1e-9 * max(1.0, sim.cost)


def random_edits(tl: Timeline, rng: random.Random, count: int):
    """Yield after each of ``count`` random additions and removals of extra computations."""
    n = tl.n
    extras: list[tuple[int, int]] = []
    for _ in range(count):
        if extras and rng.random() < 0.4:
            tl.remove(*extras.pop(rng.randrange(len(extras))))
        elif n > 1:
            v = rng.randrange(n - 1)
            t = rng.randrange(v + 1, n)
            if not tl.computes(v, t):
                tl.add(v, t)
                extras.append((v, t))
        yield extras


@settings(max_examples=60, deadline=None)
@given(graph=random_dags(max_nodes=14), seed=st.integers(0, 2**16))
def test_random_edits_match_the_simulator(graph: Graph, seed: int) -> None:
    tl = Timeline(graph)
    assert_matches_simulator(graph, tl)
    for _ in random_edits(tl, random.Random(seed), 25):
        assert_matches_simulator(graph, tl)


def test_edits_on_a_benchmark_graph_match_a_fresh_build() -> None:
    graph = benchmark_graph("rl100")
    tl = Timeline(graph)
    extras: list[tuple[int, int]] = []
    for edited in random_edits(tl, random.Random(7), 400):
        extras = edited
    assert_matches_simulator(graph, tl)
    fresh = Timeline(graph)
    for v, t in extras:
        fresh.add(v, t)
    assert (fresh.peaks == tl.peaks).all()
    assert abs(fresh.extra_cost - tl.extra_cost) < 1e-6
    batch = Timeline.with_extras(graph, extras)  # all added in one edit
    assert (batch.peaks == tl.peaks).all()
    assert sorted(batch.extras()) == sorted(tl.extras()) == sorted(extras)


def test_checkpoint_all_is_the_starting_point() -> None:
    graph = benchmark_graph("vgg16")
    tl = Timeline(graph)
    assert tl.peak() == graph.checkpoint_all_peak
    assert tl.total_cost == graph.base_cost
