"""The data behind a sweep's chart and table: each strategy's overhead against budget, and the result grid.

A sweep is a grid of cells, one per (strategy, budget), each holding its job's status and, once
solved, its remat.result/v1. A simulated plan whose peak memory is p fits every budget of at least
p, so the best overhead a strategy reaches within budget B is the least overhead among its plans
whose peak is at most B: a non-increasing step function of B, the prefix minimum of its plans
ordered by peak. The chart draws one such curve per strategy, as the Checkmate paper's Figure 4
does; the table shows every cell as it was asked.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from remat.schedules import byte_unit, format_size
from remat.solvers import STRATEGIES, ResultDocument

__all__ = ["SweepCell", "SweepView", "TableCell", "TableRow", "step_curve", "strategy_color",
           "sweep_figure", "sweep_table"]

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39")
"""Line colours, given to strategies in the registry's order so a strategy keeps its colour everywhere."""

OVERHEAD_VIEW = 2.0
"""The chart first shows overheads up to this (when some lie above it): zooming out shows the rest."""


def strategy_color(name: str) -> str:
    """The colour of strategy ``name`` on every chart (unregistered names share the last colours)."""
    order = list(STRATEGIES)
    index = order.index(name) if name in order else len(order) + sum(map(ord, name))
    return PALETTE[index % len(PALETTE)]


@dataclass(frozen=True)
class SweepCell:
    """One (strategy, budget) of a sweep: its job's status and, once solved, its result (a summary will do)."""

    strategy: str
    budget: int
    status: str
    """The job's status: queued, running, succeeded, failed or cancelled."""
    result: ResultDocument | None = None
    job_id: str | None = None

    @property
    def point(self) -> tuple[int, float] | None:
        """(peak memory, overhead) of the cell's simulated plan; None when it has none."""
        r = self.result
        if r is None or r.peak_memory is None or r.overhead is None:
            return None
        return r.peak_memory, float(r.overhead)

    @property
    def fits(self) -> bool:
        """The cell has a plan within its budget."""
        point = self.point
        return point is not None and point[0] <= self.budget

    @property
    def state(self) -> str:
        """What the cell shows: its result's status once there is one, else its job's."""
        return self.result.status.value if self.result is not None else self.status


@dataclass(frozen=True)
class SweepView:
    """A sweep as its page and its report show it: the graph's bounds, the grid, and how far it has got."""

    graph_name: str
    min_feasible_budget: int
    checkpoint_all_peak: int
    strategies: tuple[str, ...]
    budgets: tuple[int, ...]
    cells: tuple[SweepCell, ...]
    natural: Mapping[str, int] = field(default_factory=dict)
    """Each heuristic's own peak when unconstrained (a budget the sweep added for it)."""
    status: str = "succeeded"
    """The sweep's status, a job status."""
    done: bool = True
    """The sweep has ended: no cell will change any more."""

    @cached_property
    def grid(self) -> dict[tuple[str, int], SweepCell]:
        return {(c.strategy, c.budget): c for c in self.cells}

    @property
    def counts(self) -> Counter[str]:
        """How many cells' jobs are in each status (0 for a status no cell is in)."""
        return Counter(c.status for c in self.cells)


def step_curve(points: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    """The breakpoints of the prefix-minimum step function of (peak, overhead) points.

    At memory m the function's value is the least overhead among points whose peak is at most m;
    the breakpoints are the points that lower it, by ascending peak.

    >>> step_curve([(5, 1.2), (3, 1.5), (4, 1.6), (7, 1.2), (8, 1.0), (3, 1.4)])
    [(3, 1.4), (5, 1.2), (8, 1.0)]
    """
    best = math.inf
    curve = []
    for peak, overhead in sorted(points):
        if overhead < best:
            curve.append((peak, overhead))
            best = overhead
    return curve


def sweep_figure(view: SweepView) -> dict[str, Any]:
    """A Plotly figure: overhead against memory, one trace per strategy (its step curve), with the
    smallest feasible budget and the checkpoint-all peak marked."""
    peaks = [c.point[0] for c in view.cells if c.point is not None]
    right = max([*view.budgets, *peaks, view.checkpoint_all_peak])
    unit, scale = byte_unit(right)
    traces = [_strategy_trace(view, s, right, scale) for s in view.strategies]
    marks = ((view.min_feasible_budget, "smallest feasible"), (view.checkpoint_all_peak, "checkpoint-all peak"))
    layout = {
        "xaxis": {"title": {"text": f"Memory budget ({unit})"}, "zeroline": False},
        "yaxis": {"title": {"text": "Overhead (cost / base cost)"}, "zeroline": False},
        "hovermode": "closest",
        "legend": {"title": {"text": "strategy (click to hide)"}},
        "margin": {"l": 70, "r": 20, "t": 30, "b": 60},
        "shapes": [{"type": "line", "xref": "x", "yref": "paper", "x0": x / scale, "x1": x / scale, "y0": 0,
                    "y1": 1, "line": {"dash": "dot", "color": "#999", "width": 1}} for x, _ in marks],
        "annotations": [{"x": x / scale, "y": 1, "xref": "x", "yref": "paper", "text": text, "showarrow": False,
                         "yanchor": "bottom", "font": {"size": 11, "color": "#666"}} for x, text in marks],
    }
    _clip_overheads(traces, layout)
    _stack(traces)
    return {"data": traces, "layout": layout}


def _clip_overheads(traces: list[dict[str, Any]], layout: dict[str, Any]) -> None:
    """Frame the y axis on overheads up to OVERHEAD_VIEW when higher ones would flatten the rest, and
    name the strategies whose curves lie wholly above the frame."""
    ys = [y for t in traces for y in t["y"]]
    shown = [y for y in ys if y <= OVERHEAD_VIEW]
    if not shown or max(ys) <= OVERHEAD_VIEW:
        return
    low, high = min(shown), max(shown)
    pad = max((high - low) * 0.06, 0.01)
    layout["yaxis"]["range"] = [low - pad, high + pad]
    above = [f"{t['name']} ({min(t['y']):.2f})" for t in traces if t["y"] and min(t["y"]) > high]
    if above:
        layout["annotations"].append({"x": 1.02, "y": 0, "xref": "paper", "yref": "paper", "xanchor": "left",
                                      "yanchor": "bottom", "align": "left", "showarrow": False,
                                      "font": {"size": 11, "color": "#666"},
                                      "text": "<br>".join(["above the frame:", *above, "(zoom out to see)"])})


def _stack(traces: list[dict[str, Any]]) -> None:
    """Draw lower curves over higher ones (``zorder``), so the best strategies stay visible where curves meet;
    the legend keeps the traces' order."""
    def mean(t: dict[str, Any]) -> float:
        return sum(t["y"]) / len(t["y"]) if t["y"] else math.inf

    for rank, t in enumerate(sorted(traces, key=mean, reverse=True)):
        t["zorder"] = rank


def _strategy_trace(view: SweepView, strategy: str, right: int, scale: int) -> dict[str, Any]:
    """One strategy's step curve; markers on its breakpoints (diamonds for its natural point)."""
    cells = sorted((c for c in view.cells if c.strategy == strategy and c.point is not None), key=lambda c: c.budget)
    behind: dict[tuple[int, float], SweepCell] = {}
    for c in cells:
        assert c.point is not None
        behind.setdefault(c.point, c)
    curve = step_curve(behind)
    x = [peak / scale for peak, _ in curve]
    y = [overhead for _, overhead in curve]
    text = [_hover(behind[p], view.natural.get(strategy)) for p in curve]
    symbols = ["diamond" if behind[p].budget == view.natural.get(strategy) else "circle" for p in curve]
    sizes = [9] * len(curve)
    if curve and curve[-1][0] < right:
        x.append(right / scale)
        y.append(curve[-1][1])
        text.append(f"{text[-1]}<br><i>the best {strategy} plan up to here</i>")
        symbols.append("circle")
        sizes.append(0)
    color = strategy_color(strategy)
    return {"type": "scatter", "mode": "lines+markers", "name": strategy, "x": x, "y": y, "text": text,
            "hovertemplate": "%{text}<extra></extra>", "line": {"shape": "hv", "color": color, "width": 2},
            "marker": {"color": color, "size": sizes, "symbol": symbols}}


def _hover(cell: SweepCell, natural: int | None) -> str:
    r = cell.result
    assert r is not None and cell.point is not None
    peak, overhead = cell.point
    lines = [f"<b>{cell.strategy}</b>: overhead {overhead:.4f}",
             f"peak {format_size(peak)} (asked {format_size(cell.budget)})",
             f"{r.status.value}{', natural point' if cell.budget == natural else ''}"
             f"{', plan of ' + r.fallback if r.fallback else ''}, {r.solve_time_s:.2f} s"]
    return "<br>".join(lines)


@dataclass(frozen=True)
class TableCell:
    """One cell of the table: the overhead of a plan that fits, else what happened."""

    text: str
    state: str
    """The result's status, or the job's while it has none; ``optimal`` and ``feasible`` cells fit."""
    job_id: str | None
    best: bool
    """The least overhead of its row."""
    title: str


@dataclass(frozen=True)
class TableRow:
    """One budget of the sweep and its cell for every strategy (in the view's order)."""

    budget: int
    label: str
    ratio: float
    """The budget as a fraction of the checkpoint-all peak."""
    natural: tuple[str, ...]
    """The strategies whose natural point this budget is."""
    cells: tuple[TableCell, ...]


def sweep_table(view: SweepView) -> list[TableRow]:
    """The grid behind the chart: a row per budget, a column per strategy, the best cell of each row marked."""
    rows = []
    for budget in view.budgets:
        cells = [view.grid.get((s, budget)) for s in view.strategies]
        fitting = [c.point[1] for c in cells if c is not None and c.fits and c.point is not None]
        best = min(fitting, default=None)
        rows.append(TableRow(
            budget=budget, label=format_size(budget),
            ratio=budget / view.checkpoint_all_peak if view.checkpoint_all_peak else 1.0,
            natural=tuple(s for s in view.strategies if view.natural.get(s) == budget),
            cells=tuple(_table_cell(c, best) for c in cells)))
    return rows


def _table_cell(cell: SweepCell | None, best: float | None) -> TableCell:
    if cell is None:
        return TableCell("", "absent", None, False, "not part of this sweep")
    if not cell.fits or cell.point is None:
        title = f"{cell.strategy} at {format_size(cell.budget)}: {cell.state.replace('_', ' ')}"
        if cell.point is not None:
            title += f" (its plan peaks at {format_size(cell.point[0])})"
        return TableCell(cell.state.replace("_", " "), cell.state, cell.job_id, False, title)
    peak, overhead = cell.point
    title = (f"{cell.strategy} at {format_size(cell.budget)}: {cell.state}, overhead {overhead:.4f}, "
             f"peak {format_size(peak)}")
    is_best = best is not None and overhead <= best * (1 + 1e-9)
    return TableCell(f"{overhead:.3f}", cell.state, cell.job_id, is_best, title)
