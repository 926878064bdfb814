"""The figures of a plan with transfers: its compute, offload and reload streams as lanes over time, and
device memory over time (docs/plans.md, "Offload").

Both come from the simulator's :class:`~remat.schedules.Timing`, in the graph's cost unit. A lane is a row
of horizontal bars, one per statement while a stream has at most ``MAX_LANE_BARS`` of them; beyond, the
statements closer together than the chart can show (``makespan / MAX_LANE_BARS``) share one bar, so a
lane never has more than about ``MAX_LANE_BARS`` bars however long the plan. Memory over time keeps at
most ``MAX_STEPS`` points, each the highest of its span, so the peak survives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from remat.schedules import Graph, Op, Simulation, Timing, byte_unit, format_size

from ._envelope import memory_envelope

__all__ = ["LANES", "MAX_LANE_BARS", "Bars", "busy_bars", "memory_time_figure", "streams_figure"]

LANES: tuple[tuple[Op, str | None], ...] = (("compute", None), ("offload", "#ff7f0e"), ("reload", "#2ca02c"))
"""The streams drawn, top to bottom, with their colours (None: the strategy's)."""
MAX_LANE_BARS = 1000
"""Most bars of one lane sent to the browser."""
ID_CHARS = 40
"""Longest node id written in a bar's hover text."""


@dataclass(frozen=True)
class Bars:
    """One stream's busy intervals: each bar's start and end, how many statements it holds, and the index of
    its first one among the stream's."""

    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    first: np.ndarray


def busy_bars(starts: np.ndarray, ends: np.ndarray, min_gap: float) -> Bars:
    """The intervals ``[starts[k], ends[k])`` of one stream (in order, one after the other) as bars: two
    neighbours share a bar when the gap between them is ``min_gap`` or less (a negative ``min_gap``
    keeps every interval its own bar).

    >>> b = busy_bars(np.array([0.0, 1.0, 5.0]), np.array([1.0, 2.0, 6.0]), 0.5)
    >>> b.start.tolist(), b.end.tolist(), b.count.tolist(), b.first.tolist()
    ([0.0, 5.0], [2.0, 6.0], [2, 1], [0, 2])
    """
    starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    opens = np.concatenate([[True], starts[1:] - ends[:-1] > min_gap])[:len(starts)]
    first = np.flatnonzero(opens)
    last = np.append(first[1:], len(starts))[:len(first)] - 1
    return Bars(starts[first], ends[last], last - first + 1, first)


def _short(node_id: str) -> str:
    return node_id if len(node_id) <= ID_CHARS else f"{node_id[:ID_CHARS - 1]}\u2026"


def _lane(graph: Graph, timing: Timing, op: Op, color: str) -> dict[str, Any]:
    """One stream's bars, with a hover text naming the statement (or the first and last of a shared bar)."""
    spans = timing.stream(op)
    starts = np.array([s.start for s in spans], dtype=float)
    ends = np.array([s.end for s in spans], dtype=float)
    bars = busy_bars(starts, ends, -1.0 if len(spans) <= MAX_LANE_BARS else timing.makespan / MAX_LANE_BARS)
    ids = graph.ids
    text = []
    for start, end, count, first in zip(bars.start.tolist(), bars.end.tolist(), bars.count.tolist(),
                                        bars.first.tolist(), strict=True):
        node = spans[first].node
        size = "" if op == "compute" else f" ({format_size(graph.nodes[node].memory)})"
        what = (f"{op} {_short(ids[node])}{size}" if count == 1 else
                f"{count} {op}s, {_short(ids[node])} to {_short(ids[spans[first + count - 1].node])}")
        text.append(f"{what}: {start:.6g} to {end:.6g}")
    return {"type": "bar", "orientation": "h", "name": f"{op} ({len(spans)})", "y": [op] * len(text),
            "base": bars.start.tolist(), "x": (bars.end - bars.start).tolist(), "text": text,
            "textposition": "none", "hovertemplate": "%{text}<extra></extra>", "marker": {"color": color},
            "width": 0.6}


def _time_axis(graph: Graph, timing: Timing) -> dict[str, Any]:
    unit = graph.cost_unit or "cost units"
    return {"title": {"text": f"time ({unit})"}, "range": [0, timing.makespan or 1]}


def streams_figure(graph: Graph, timing: Timing, color: str) -> dict[str, Any]:
    """The compute, offload and reload streams as lanes over time: gaps in the compute lane are time spent
    waiting for a reload."""
    data = [_lane(graph, timing, op, lane_color or color) for op, lane_color in LANES]
    layout = {"barmode": "overlay", "xaxis": _time_axis(graph, timing),
              "yaxis": {"type": "category", "categoryorder": "array",
                        "categoryarray": [op for op, _ in reversed(LANES)]},
              "hovermode": "closest", "showlegend": False, "margin": {"l": 70, "r": 20, "t": 10, "b": 45}}
    return {"data": data, "layout": layout}


def memory_time_figure(graph: Graph, sim: Simulation, budget: int, color: str) -> dict[str, Any]:
    """Device memory over time (fixed memory included) against the budget, its peak marked."""
    assert sim.timing is not None, "a plan with transfers"
    timing = sim.timing
    times = np.array([t for t, _ in timing.memory], dtype=float)
    memory = np.array([m for _, m in timing.memory], dtype=np.int64)
    where, highest = memory_envelope(memory)
    unit, scale = byte_unit(max(budget, sim.peak_memory))
    text = [f"time {t:.6g}: {format_size(int(m))} on the device" for t, m in
            zip(times[where].tolist(), highest.tolist(), strict=True)]
    end = timing.makespan
    peak_time = float(times[int(memory.argmax())]) if len(memory) else 0.0
    data = [
        {"type": "scatter", "mode": "lines", "name": "device memory", "x": times[where].tolist(),
         "y": (highest / scale).tolist(), "text": text, "hovertemplate": "%{text}<extra></extra>",
         "line": {"shape": "hv", "color": color}},
        {"type": "scatter", "mode": "lines", "name": f"budget {format_size(budget)}", "x": [0, end],
         "y": [budget / scale] * 2, "hoverinfo": "skip", "line": {"dash": "dash", "color": "#d62728"}},
        {"type": "scatter", "mode": "markers", "name": f"peak {format_size(sim.peak_memory)}", "x": [peak_time],
         "y": [sim.peak_memory / scale], "hoverinfo": "skip", "marker": {"color": "#000", "size": 9, "symbol": "x"}},
    ]
    if graph.fixed_memory:
        data.append({"type": "scatter", "mode": "lines", "name": f"fixed {format_size(graph.fixed_memory)}",
                     "x": [0, end], "y": [graph.fixed_memory / scale] * 2, "hoverinfo": "skip",
                     "line": {"dash": "dot", "color": "#7f7f7f"}})
    layout = {"xaxis": _time_axis(graph, timing),
              "yaxis": {"title": {"text": f"memory ({unit})"}, "rangemode": "tozero"},
              "hovermode": "closest", "margin": {"l": 70, "r": 20, "t": 20, "b": 50},
              "legend": {"orientation": "h", "y": -0.25}}
    return {"data": data, "layout": layout}
