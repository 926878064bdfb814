"""The job page of a plan with transfers: its streams as lanes over time and device memory over time, from
the simulator, and small however long the plan."""

from __future__ import annotations

import json

import numpy as np
from factories import chain, offload_result, offloading_plan
from hypothesis import given
from hypothesis import strategies as st

from remat.report import job_figures
from remat.report._streams_view import MAX_LANE_BARS, busy_bars
from remat.schedules import Graph, Transfer, simulate
from remat.solvers import solve

SLOW = Transfer(bandwidth=2**19, latency=0.1)
"""A copy of 1 MiB lasts 2.1 cost units: longer than a compute of the chains below, so copies show."""


def test_lanes_and_memory_over_time_are_the_simulators():
    graph = chain(8, memory=2**20)
    result = offload_result(graph, SLOW)
    figures, stats = job_figures(graph, result)
    sim = simulate(graph, offloading_plan(graph), transfer=SLOW)
    assert set(figures) == {"streams", "memory", "recompute"}
    lanes = figures["streams"]["data"]
    assert [lane["y"][0] for lane in lanes] == ["compute", "offload", "reload"]
    for lane in lanes:
        spans = sim.timing.stream(lane["y"][0])
        assert lane["base"] == [s.start for s in spans]
        assert lane["x"] == [s.end - s.start for s in spans]
    assert lanes[1]["text"][0] == f"offload f0 (1.00 MiB): {spans_of(sim, 'offload')[0]}"
    assert figures["streams"]["layout"]["xaxis"]["range"] == [0, sim.cost] == [0, result.cost]
    memory, budget, peak = figures["memory"]["data"][:3]
    assert memory["x"] == [t for t, _ in sim.timing.memory] and memory["y"] == [m / 2**20 for _, m in sim.timing.memory]
    assert budget["y"] == [result.budget / 2**20] * 2 and peak["y"] == [sim.peak_memory / 2**20]
    assert (stats.offloads, stats.reloads, stats.host_peak_memory) == (7, 7, 7 * 2**20) and stats.timed
    assert stats.arena_size >= stats.activation_peak == result.peak_memory - graph.fixed_memory
    assert stats.peak_memory == result.peak_memory
    assert stats.peak_time == sim.timing.spans[sim.peak_step].start


def spans_of(sim, op: str) -> list[str]:
    return [f"{s.start:.6g} to {s.end:.6g}" for s in sim.timing.stream(op)]


def test_a_plan_without_transfers_is_drawn_over_its_steps_even_with_a_transfer():
    graph = chain(6, memory=10)
    result = solve(graph, budget=50, strategy="checkpoint-last", transfer=SLOW).document()
    figures, stats = job_figures(graph, result)
    assert set(figures) == {"memory", "recompute", "R", "S"} and not stats.timed and stats.arena_size is not None


@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10)), max_size=40), st.floats(-1, 5))
def test_bars_cover_every_interval_and_merge_only_across_small_gaps(pairs, min_gap):
    starts, ends, at = [], [], 0.0
    for gap, length in pairs:  # one stream: each interval starts once the one before has ended
        starts.append(at + gap)
        ends.append(at + gap + length)
        at = ends[-1]
    bars = busy_bars(np.array(starts), np.array(ends), min_gap)
    assert bars.count.sum() == len(starts) and bars.first.tolist() == (np.cumsum(bars.count) - bars.count).tolist()
    for start, end, count, first in zip(bars.start, bars.end, bars.count, bars.first, strict=True):
        assert start == starts[first] and end == ends[first + count - 1]
        assert all(starts[k + 1] - ends[k] <= min_gap for k in range(first, first + count - 1))
    assert all(s - e > min_gap for s, e in zip(bars.start[1:], bars.end[:-1], strict=True))


def test_a_10000_node_plan_with_transfers_is_drawn_in_well_under_a_megabyte():
    graph: Graph = chain(5000, memory=2**20)  # 10,001 nodes, 30,000 statements
    result = offload_result(graph, SLOW)
    figures, stats = job_figures(graph, result)
    assert stats.offloads == stats.reloads == 4999
    lanes = figures["streams"]["data"]
    assert all(len(lane["x"]) <= MAX_LANE_BARS + 1 for lane in lanes)
    assert sum(int(n) for lane in lanes for n in [lane["name"].split("(")[1].rstrip(")")]) == 10001 + 2 * 4999
    assert max(lane["base"][-1] + lane["x"][-1] for lane in lanes) == result.cost, "the last bar ends the plan"
    assert len(json.dumps(figures)) < 2**20
