"""The data behind a job's page: its schedule as R/S heat maps, memory over the plan against the budget,
and the plan's statistics (recomputations per node, arena size); for a plan with transfers, its streams
and memory over time instead (:mod:`._streams_view`). For a graph from the PyTorch client, whose nodes say
which module and source line made them, the values live at the peak and those recomputed or offloaded, by
module (:class:`remat.schedules.PlanValues`, as ``m.explain()`` reads a plan).

Everything is recomputed from the result's plan by the simulator and :func:`remat.schedules.layout_plan`,
so the page shows what the plan does, not what a solver claimed. Big inputs are reduced on the server so
a page stays small: a heat map keeps at most ``MAX_SIDE`` rows and columns (each cell the fraction of set
entries in its block, summed from the schedule's entries without ever building its stages x nodes
matrices), and the memory line at most ``MAX_STEPS`` points (each the highest memory of its span of
steps, so the peak survives).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from remat.schedules import (
    Graph,
    InvalidResult,
    ModuleValues,
    Plan,
    PlanValues,
    ScheduleEntries,
    Simulation,
    Transfer,
    by_module,
    byte_unit,
    format_size,
    has_sources,
    layout_plan,
    simulate,
)
from remat.solvers import ResultDocument

from ._envelope import memory_envelope
from ._streams_view import memory_time_figure, streams_figure
from ._sweep_view import strategy_color

__all__ = ["MAX_SIDE", "Blocks", "PlanStats", "job_figures", "plan_stats", "run_blocks"]

MAX_SIDE = 400
"""Most rows or columns of a heat map sent to the browser."""
TOP_NODES = 12
"""Most recomputed nodes listed by name."""
LARGEST_FIRST_BUFFERS = 2000
"""Plans with more buffers are laid out in plan order (linear) for their page, not largest first (quadratic:
seconds of an API thread at 10,000 buffers: benchmarks/README.md, "The service under attack and at scale")."""


@dataclass(frozen=True)
class Blocks:
    """A boolean matrix reduced to blocks of ``row_step`` x ``col_step`` entries."""

    z: np.ndarray
    """Fraction of set entries in each block (edge blocks may be smaller)."""
    row_step: int
    col_step: int

    @property
    def exact(self) -> bool:
        """No reduction happened: each block is one entry and ``z`` holds 0 and 1."""
        return self.row_step == self.col_step == 1


def run_blocks(shape: tuple[int, int], cols: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               max_side: int = MAX_SIDE) -> Blocks:
    """The boolean matrix whose column ``cols[k]`` is set on rows ``starts[k]`` to ``ends[k] - 1`` (runs that do
    not overlap), reduced to at most ``max_side`` rows and columns, each cell the fraction of set entries in
    its block. Memory and time grow with the runs and the blocks, never with the matrix.

    >>> b = run_blocks((5, 5), np.arange(5), np.arange(5), np.arange(1, 6), 3)  # the identity
    >>> b.z.tolist(), (b.row_step, b.col_step)
    ([[0.5, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 1.0]], (2, 2))
    >>> run_blocks((2, 2), np.array([1]), np.array([0]), np.array([2])).z.tolist()
    [[0.0, 1.0], [0.0, 1.0]]
    """
    rows, columns = shape
    rs, cs = max(1, math.ceil(rows / max_side)), max(1, math.ceil(columns / max_side))
    nr, nc = math.ceil(rows / rs), math.ceil(columns / cs)
    col, a, b = np.asarray(cols) // cs, np.asarray(starts), np.asarray(ends)
    first, last = a // rs, (b - 1) // rs
    sums = np.zeros((nr + 1, nc))
    within = first == last
    np.add.at(sums, (first[within], col[within]), (b - a)[within])
    across = ~within
    np.add.at(sums, (first[across], col[across]), ((first + 1) * rs - a)[across])  # the head of a long run
    np.add.at(sums, (last[across], col[across]), (b - last * rs)[across])  # its tail
    whole = np.zeros((nr + 1, nc))  # the blocks strictly between: +rs from the head's next block, -rs at the tail
    np.add.at(whole, (first[across] + 1, col[across]), rs)
    np.add.at(whole, (last[across], col[across]), -rs)
    sums = (sums + np.cumsum(whole, axis=0))[:nr]
    row_sizes = np.minimum(rs, rows - rs * np.arange(nr))
    col_sizes = np.minimum(cs, columns - cs * np.arange(nc))
    return Blocks(sums / np.outer(row_sizes, col_sizes), rs, cs)


@dataclass(frozen=True)
class PlanStats:
    """What a plan does, from the simulator and the arena layout."""

    steps: int
    computes: int
    recomputations: int
    """Computes beyond the first of each node."""
    recomputed_nodes: int
    peak_memory: int
    peak_step: int
    arena_size: int
    """Bytes of one arena holding every activation at its layout offset."""
    activation_peak: int
    efficiency: float
    """activation peak / arena size (1.0: no byte lost to fragmentation)."""
    top: tuple[tuple[str, int, float], ...]
    """The most recomputed nodes: (id, extra computes, extra cost), by extra cost, then extra computes."""
    offloads: int = 0
    reloads: int = 0
    host_peak_memory: int = 0
    peak_time: float | None = None
    """When device memory reached its peak, for a plan with transfers (which runs in time)."""
    live_by_module: tuple[ModuleValues, ...] = ()
    """For a graph whose nodes say which module and source line made them (the PyTorch client's): the values live
    at the peak, by module, the most bytes first (as ``m.explain()`` reads the plan)."""
    again_by_module: tuple[ModuleValues, ...] = ()
    """For such a graph: the values recomputed or offloaded, by module."""

    @property
    def timed(self) -> bool:
        """Whether the plan copies values to host memory and back (its streams run in time)."""
        return self.offloads + self.reloads > 0


def plan_stats(graph: Graph, plan: Plan, sim: Simulation, transfer: Transfer | None = None) -> PlanStats:
    """Statistics of ``plan`` (already simulated as ``sim``, with ``transfer`` if it has copies): its copies, its
    arena layout and, for a graph that says which module made each value, its values by module."""
    extra = sim.compute_counts - 1
    extra_cost = extra * graph.cost
    order = sorted(np.flatnonzero(extra > 0).tolist(), key=lambda v: (-extra_cost[v], -extra[v]))[:TOP_NODES]
    layout = layout_plan(graph, plan, largest_first_limit=LARGEST_FIRST_BUFFERS, transfer=transfer)
    stats = PlanStats(steps=len(plan), computes=int(sim.compute_counts.sum()), recomputations=sim.recomputations,
                      recomputed_nodes=int((extra > 0).sum()), peak_memory=sim.peak_memory, peak_step=sim.peak_step,
                      arena_size=layout.arena_size, activation_peak=layout.activation_peak,
                      efficiency=layout.efficiency,
                      top=tuple((graph.nodes[v].id, int(extra[v]), float(extra_cost[v])) for v in order))
    if has_sources(graph):
        read = PlanValues.of(graph, plan, sim)
        stats = replace(stats, live_by_module=by_module(read.live_at_peak), again_by_module=by_module(read.again))
    if sim.timing is not None:
        return replace(stats, offloads=len(sim.timing.stream("offload")), reloads=len(sim.timing.stream("reload")),
                       host_peak_memory=sim.host_peak_memory, peak_time=sim.timing.spans[sim.peak_step].start)
    return stats


def job_figures(graph: Graph, result: ResultDocument) -> tuple[dict[str, Any], PlanStats]:
    """The Plotly figures of a result that has a plan (``memory``, ``recompute``, and ``R`` and ``S`` when it
    has a schedule) and its stats. A plan with transfers is simulated with the result's ``transfer`` and
    drawn in time: its ``streams`` as lanes, and ``memory`` over time."""
    if result.plan is None:
        raise InvalidResult("The result has no plan to draw.", field="plan")
    plan = Plan.from_json(graph, result.plan)
    transfer = result.transfer
    sim = simulate(graph, plan, transfer=transfer)
    color = strategy_color(result.strategy)
    budget = result.budget
    if sim.timing is None:
        figures = {"memory": _memory_figure(graph, plan, sim, budget, color)}
    else:
        figures = {"streams": streams_figure(graph, sim.timing, color),
                   "memory": memory_time_figure(graph, sim, budget, color)}
    figures["recompute"] = _recompute_figure(graph, sim, color)
    if result.schedule is not None:
        entries = ScheduleEntries.from_json(graph, result.schedule)
        shape = (entries.stages, graph.size)
        figures["R"] = _heatmap(run_blocks(shape, entries.compute_node, entries.compute_stage,
                                           entries.compute_stage + 1), color)
        figures["S"] = _heatmap(run_blocks(shape, entries.retain_node, entries.retain_start, entries.retain_end),
                                color)
    return figures, plan_stats(graph, plan, sim, transfer)


def _heatmap(blocks: Blocks, color: str) -> dict[str, Any]:
    z = blocks.z.astype(int).tolist() if blocks.exact else np.round(blocks.z, 3).tolist()
    what = "set" if blocks.exact else "fraction set"
    trace = {"type": "heatmap", "z": z, "x0": (blocks.col_step - 1) / 2, "dx": blocks.col_step,
             "y0": (blocks.row_step - 1) / 2, "dy": blocks.row_step, "zmin": 0, "zmax": 1, "showscale": False,
             "colorscale": [[0, "#ffffff"], [1, color]],
             "hovertemplate": f"stage %{{y}}, node %{{x}}: {what} %{{z}}<extra></extra>"}
    layout = {"xaxis": {"title": {"text": "node" if blocks.exact else f"node (blocks of {blocks.col_step})"},
                        "constrain": "domain"},
              "yaxis": {"title": {"text": "stage" if blocks.exact else f"stage (blocks of {blocks.row_step})"},
                        "autorange": "reversed", "scaleanchor": "x"},
              "margin": {"l": 55, "r": 10, "t": 10, "b": 45}}
    return {"data": [trace], "layout": layout}


def _memory_figure(graph: Graph, plan: Plan, sim: Simulation, budget: int, color: str) -> dict[str, Any]:
    steps, memory = memory_envelope(sim.timeline)
    unit, scale = byte_unit(max(budget, sim.peak_memory))
    ids = graph.ids
    text = [f"step {k}: {plan.steps[k][0]} {ids[plan.steps[k][1]]}<br>{format_size(int(m))} resident"
            for k, m in zip(steps.tolist(), memory.tolist(), strict=True)]
    last = max(len(plan) - 1, 0)
    data = [
        {"type": "scatter", "mode": "lines", "name": "resident memory", "x": steps.tolist(),
         "y": (memory / scale).tolist(), "text": text, "hovertemplate": "%{text}<extra></extra>",
         "line": {"shape": "hv", "color": color}},
        {"type": "scatter", "mode": "lines", "name": f"budget {format_size(budget)}", "x": [0, last],
         "y": [budget / scale] * 2, "hoverinfo": "skip", "line": {"dash": "dash", "color": "#d62728"}},
        {"type": "scatter", "mode": "markers", "name": f"peak {format_size(sim.peak_memory)}",
         "x": [sim.peak_step], "y": [sim.peak_memory / scale], "hoverinfo": "skip",
         "marker": {"color": "#000", "size": 9, "symbol": "x"}},
    ]
    if graph.fixed_memory:
        data.append({"type": "scatter", "mode": "lines", "name": f"fixed {format_size(graph.fixed_memory)}",
                     "x": [0, last], "y": [graph.fixed_memory / scale] * 2, "hoverinfo": "skip",
                     "line": {"dash": "dot", "color": "#7f7f7f"}})
    layout = {"xaxis": {"title": {"text": "plan step"}}, "yaxis": {"title": {"text": f"memory ({unit})"},
                                                                    "rangemode": "tozero"},
              "hovermode": "closest", "margin": {"l": 70, "r": 20, "t": 20, "b": 50},
              "legend": {"orientation": "h", "y": -0.25}}
    return {"data": data, "layout": layout}


def _recompute_figure(graph: Graph, sim: Simulation, color: str) -> dict[str, Any]:
    extra = (sim.compute_counts - 1).tolist()
    text = [f"{n.id} ({n.kind}): computed {k + 1} times" for n, k in zip(graph.nodes, extra, strict=True)]
    trace = {"type": "bar", "x": list(range(graph.size)), "y": extra, "text": text, "textposition": "none",
             "hovertemplate": "node %{x}: %{text}<extra></extra>", "marker": {"color": color}}
    whole_ticks = {"tick0": 0, "dtick": max(1, math.ceil(max(extra, default=0) / 8))}
    layout = {"xaxis": {"title": {"text": "node"}},
              "yaxis": {"title": {"text": "recomputations"}, "rangemode": "tozero", **whole_ticks},
              "margin": {"l": 60, "r": 20, "t": 20, "b": 50}, "bargap": 0}
    return {"data": [trace], "layout": layout}
