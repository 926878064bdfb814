"""A deep graph's first plan composed from one solve of its repeated block: the short graph, the composition,
and the solve that starts from it (its plan simulated like every plan)."""

from __future__ import annotations

import math

from factories import stacked_blocks

from remat.schedules import GraphLimits, simulate, simulate_schedule
from remat.schedules._repeats import find_repeats
from remat.solvers import ResultStatus, SolveContext, solve
from remat.solvers.search import Annealer, Timeline, compose, composed_start, shorten


def test_the_short_graph_keeps_three_blocks_at_each_end_and_the_rest():
    graph = stacked_blocks(20)
    (run,) = find_repeats(graph)
    short = shorten(graph, run)
    assert short is not None and short.kept == (0, 1, 2, 17, 18, 19)
    assert short.graph.size == graph.size - 14 * run.size
    (again,) = find_repeats(short.graph)
    assert again.count == 6 and again.size == run.size
    # per block, checkpoint-all keeps as much in the short graph as in the whole one
    per_block = (graph.checkpoint_all_peak - short.graph.checkpoint_all_peak) / 14
    assert per_block == (short.graph.checkpoint_all_peak - stacked_blocks(5).checkpoint_all_peak)


def test_the_template_block_is_composed_over_every_cut_block_and_the_ends_stay():
    graph = stacked_blocks(20)
    (run,) = find_repeats(graph)
    short = shorten(graph, run)
    assert short is not None
    index = short.graph.index
    # the template (block 2) and an end block (block 18, the short graph's block 4) recompute s before go
    extras = [(index["s2"], index["go2"]), (index["s18"], index["go18"])]
    composed = compose(short, extras)
    whole = graph.index
    assert composed == {(whole[f"s{k}"], whole[f"go{k}"]) for k in [*range(2, 17), 18]}
    timeline = Timeline.with_extras(graph, sorted(composed, key=lambda e: (e[1], e[0])))
    simulation = simulate_schedule(graph, timeline.schedule())
    assert simulation.cost == timeline.total_cost and simulation.peak_memory == timeline.peak()
    assert timeline.peak() < graph.checkpoint_all_peak


def test_a_composed_start_fits_and_says_what_it_reused():
    graph = stacked_blocks(60)
    budget = math.ceil(0.7 * graph.checkpoint_all_peak)
    annealer = Annealer(graph, budget, seed=0)
    found: list[float] = []
    line = composed_start(graph, budget, SolveContext(), annealer, lambda cost, extras: found.append(cost),
                          min_nodes=0)
    assert line is not None and line.startswith("repeated blocks: 60 identical blocks of 10 nodes"), line
    assert found and found == sorted(found, reverse=True) and annealer.best_cost == found[-1]
    assert annealer.tl.peak() <= budget


def test_a_graph_under_min_nodes_is_searched_whole():
    graph = stacked_blocks(1000)
    annealer = Annealer(graph, graph.checkpoint_all_peak, seed=0)
    assert composed_start(graph, graph.checkpoint_all_peak, SolveContext(), annealer, lambda *_: None) is None


def test_the_solve_from_a_composed_start_returns_a_simulated_plan():
    graph = stacked_blocks(2000, limits=GraphLimits(max_nodes=30_000))  # 20,004 nodes
    result = solve(graph, budget_ratio=0.7, strategy="checkmate", time_limit_s=15, threads=2)
    assert result.status in (ResultStatus.FEASIBLE, ResultStatus.OPTIMAL), result.log
    assert any(line.startswith("repeated blocks: 2000 identical blocks") for line in result.log), result.log
    simulation = simulate(graph, result.plan)
    assert (simulation.cost, simulation.peak_memory) == (result.cost, result.peak_memory)
    assert result.peak_memory <= result.budget
