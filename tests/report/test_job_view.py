"""The data behind a job's page: heat-map downsampling, memory against the budget, plan statistics."""

from __future__ import annotations

import math

import numpy as np
from factories import benchmark_graph, chain
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from remat.report import MAX_STEPS, job_figures, memory_envelope, plan_stats, run_blocks
from remat.schedules import layout_plan, simulate
from remat.solvers import solve


def downsample(matrix: np.ndarray, side: int = 400):
    """run_blocks of a matrix's runs of set entries, column by column."""
    padded = np.vstack([np.zeros((1, matrix.shape[1]), bool), matrix, np.zeros((1, matrix.shape[1]), bool)])
    edges = np.diff(padded.astype(np.int8), axis=0)
    starts, start_cols = np.nonzero(edges.T == 1)[1], np.nonzero(edges.T == 1)[0]
    ends = np.nonzero(edges.T == -1)[1]
    return run_blocks(matrix.shape, start_cols, starts, ends, side)


@given(arrays(bool, st.tuples(st.integers(1, 40), st.integers(1, 40))), st.integers(1, 12))
def test_blocks_keep_the_fraction_of_every_block(matrix, side):
    blocks = downsample(matrix, side)
    rows, cols = matrix.shape
    assert blocks.z.shape == (math.ceil(rows / blocks.row_step), math.ceil(cols / blocks.col_step))
    assert max(blocks.z.shape) <= side
    for i in range(blocks.z.shape[0]):
        for j in range(blocks.z.shape[1]):
            block = matrix[i * blocks.row_step:(i + 1) * blocks.row_step, j * blocks.col_step:(j + 1) * blocks.col_step]
            assert math.isclose(blocks.z[i, j], block.mean())


def test_small_matrices_are_sent_as_they_are():
    m = np.random.default_rng(0).random((30, 30)) < 0.3
    blocks = downsample(m)
    assert blocks.exact and (blocks.z == m).all()


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=300), st.integers(1, 50))
def test_the_memory_envelope_keeps_every_span_s_peak_where_it_happened(timeline, max_points):
    line = np.array(timeline, dtype=np.int64)
    steps, memory = memory_envelope(line, max_points)
    assert len(steps) <= max_points
    assert (line[steps] == memory).all()
    assert memory.max() == line.max()
    span = math.ceil(len(line) / max_points)
    for k, step in enumerate(steps.tolist()):
        assert line[step] == line[k * span:(k + 1) * span].max()


def test_plan_statistics_agree_with_the_simulator_and_the_layout():
    graph = benchmark_graph("fcn8")
    result = solve(graph, budget_ratio=0.7, strategy="checkpoint-last")
    sim = simulate(graph, result.plan)
    stats = plan_stats(graph, result.plan, sim)
    layout = layout_plan(graph, result.plan)
    assert stats.recomputations == sim.recomputations > 0
    assert stats.computes == len(graph) + stats.recomputations
    assert stats.arena_size == layout.arena_size and stats.activation_peak == layout.activation_peak
    assert stats.peak_memory == result.peak_memory and stats.steps == len(result.plan)
    top_id, top_extra, top_cost = stats.top[0]
    v = graph.index[top_id]
    assert top_extra == sim.compute_counts[v] - 1 and top_cost == max((sim.compute_counts - 1) * graph.cost)


def test_job_figures_draw_memory_against_the_budget_and_both_matrices():
    graph = chain(6, memory=10)
    result = solve(graph, budget=50, strategy="checkpoint-last")
    figures, stats = job_figures(graph, result.document())
    assert set(figures) == {"memory", "recompute", "R", "S"}
    memory, budget, peak = figures["memory"]["data"][:3]
    assert memory["y"] == simulate(graph, result.plan).timeline.tolist()
    assert budget["y"] == [50, 50] and max(memory["y"]) <= 50
    assert peak["y"] == [result.peak_memory]
    assert figures["R"]["data"][0]["z"] == result.schedule.R.astype(int).tolist()
    assert figures["S"]["data"][0]["z"] == result.schedule.S.astype(int).tolist()
    assert figures["recompute"]["data"][0]["y"] == (simulate(graph, result.plan).compute_counts - 1).tolist()
    assert stats.recomputations == sum(figures["recompute"]["data"][0]["y"])
    assert figures["recompute"]["layout"]["yaxis"]["dtick"] >= 1, "whole numbers of recomputations"


def test_big_schedules_are_downsampled_on_the_server():
    graph = benchmark_graph("rl1000")
    result = solve(graph, budget_ratio=0.8, strategy="checkpoint-all").document()
    figures, _ = job_figures(graph, result)
    z = figures["R"]["data"][0]["z"]
    assert len(graph) > 400 and len(z) <= 400 and len(z[0]) <= 400
    assert figures["R"]["data"][0]["dx"] > 1
    assert len(figures["memory"]["data"][0]["x"]) <= MAX_STEPS
