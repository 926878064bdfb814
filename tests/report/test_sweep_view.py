"""The data behind the sweep chart and table: step curves, one trace per strategy, the grid."""

from __future__ import annotations

import math

from factories import benchmark_graph, result_document
from hypothesis import given
from hypothesis import strategies as st

from remat.report import SweepCell, SweepView, step_curve, strategy_color, sweep_figure, sweep_table
from remat.solvers import ResultDocument, solve

GiB = 2**30


def result(strategy: str, budget: int, peak: int | None, overhead: float | None, status: str = "feasible",
           **extra: object) -> ResultDocument:
    return result_document(strategy=strategy, budget=budget, peak_memory=peak, overhead=overhead, status=status,
                           cost=None if overhead is None else overhead * 10, **extra)


def view(cells: list[SweepCell], **kw: object) -> SweepView:
    strategies = tuple(dict.fromkeys(c.strategy for c in cells))
    budgets = tuple(sorted({c.budget for c in cells}))
    defaults = {"graph_name": "g", "min_feasible_budget": 2 * GiB, "checkpoint_all_peak": 10 * GiB,
                "strategies": strategies, "budgets": budgets, "cells": tuple(cells)}
    return SweepView(**{**defaults, **kw})


def cell(strategy: str, budget_gib: float, peak_gib: float | None, overhead: float | None, **kw: object) -> SweepCell:
    budget = int(budget_gib * GiB)
    peak = None if peak_gib is None else int(peak_gib * GiB)
    status = kw.pop("status", "feasible" if peak is not None and peak <= budget else "over_budget")
    return SweepCell(strategy, budget, "succeeded", result(strategy, budget, peak, overhead, status), f"job-{strategy}-"
                     f"{budget_gib}")


def value_at(curve: list[tuple[int, float]], memory: int) -> float:
    """The step function the curve's breakpoints describe, evaluated at ``memory``."""
    return min((o for p, o in curve if p <= memory), default=math.inf)


@given(st.lists(st.tuples(st.integers(0, 50), st.floats(1, 5, allow_nan=False)), max_size=30),
       st.integers(-1, 55))
def test_the_step_curve_is_the_prefix_minimum_of_the_points(points, memory):
    curve = step_curve(points)
    assert value_at(curve, memory) == min((o for p, o in points if p <= memory), default=math.inf)
    assert [p for p, _ in curve] == sorted({p for p, _ in curve})
    assert all(a[1] > b[1] for a, b in zip(curve, curve[1:], strict=False))


def test_one_trace_per_strategy_each_a_step_curve_over_the_plans_peaks():
    cells = [cell("a", 4, 3.5, 1.3), cell("a", 6, 5.0, 1.1), cell("a", 8, 5.5, 1.2), cell("a", 10, 9.0, 1.0),
             cell("b", 4, 4.0, 1.5), cell("b", 6, None, None, status="infeasible"),
             cell("c", 4, None, None, status="timeout")]
    fig = sweep_figure(view(cells))
    assert [t["name"] for t in fig["data"]] == ["a", "b", "c"]
    a, b, c = fig["data"]
    assert a["line"]["shape"] == "hv" and a["line"]["color"] == strategy_color("a")
    assert a["x"] == [3.5, 5.0, 9.0, 10.0] and a["y"] == [1.3, 1.1, 1.0, 1.0]
    assert a["marker"]["size"] == [9, 9, 9, 0], "the stretch to the right edge carries no marker"
    assert b["x"] == [4.0, 10.0] and b["y"] == [1.5, 1.5]
    assert c["x"] == [] and c["y"] == []
    assert "peak 3.50 GiB (asked 4.00 GiB)" in a["text"][0]
    assert fig["layout"]["xaxis"]["title"]["text"] == "Memory budget (GiB)"
    assert [s["x0"] for s in fig["layout"]["shapes"]] == [2.0, 10.0]


def test_an_over_budget_plan_still_counts_at_its_own_peak():
    fig = sweep_figure(view([cell("h", 3, 4.0, 1.2), cell("h", 5, 4.0, 1.2)]))
    assert fig["data"][0]["x"][0] == 4.0 and fig["data"][0]["y"][0] == 1.2


def test_natural_points_are_diamonds():
    cells = [cell("h", 4, 3.0, 1.4), cell("h", 7, 7.0, 1.0)]
    fig = sweep_figure(view(cells, natural={"h": 7 * GiB}))
    assert fig["data"][0]["marker"]["symbol"][:2] == ["circle", "diamond"]


def test_far_higher_overheads_leave_the_frame_and_are_named():
    cells = [cell("good", 4, 4.0, 1.2), cell("good", 10, 10.0, 1.0), cell("last", 4, 3.0, 11.0)]
    fig = sweep_figure(view(cells))
    low, high = fig["layout"]["yaxis"]["range"]
    assert low < 1.0 and 1.2 < high < 2.0
    assert "last (11.00)" in fig["layout"]["annotations"][-1]["text"]
    assert [t["zorder"] for t in fig["data"]] == [1, 0], "the lower curve is drawn on top"
    assert "range" not in sweep_figure(view(cells[:2]))["layout"]["yaxis"]


def test_the_table_has_a_row_per_budget_and_marks_the_best_fit():
    cells = [cell("a", 4, 3.5, 1.3), cell("a", 8, 5.5, 1.2), cell("b", 4, 4.0, 1.25), cell("b", 8, 9.0, 1.0),
             SweepCell("c", int(4 * GiB), "running"), SweepCell("c", int(8 * GiB), "failed")]
    rows = sweep_table(view(cells, natural={"a": 8 * GiB}))
    assert [r.label for r in rows] == ["4.00 GiB", "8.00 GiB"] and rows[0].ratio == 0.4
    assert [c.text for c in rows[0].cells] == ["1.300", "1.250", "running"]
    assert [c.best for c in rows[0].cells] == [False, True, False]
    assert [c.text for c in rows[1].cells] == ["1.200", "over budget", "failed"]
    assert [c.best for c in rows[1].cells] == [True, False, False]
    assert rows[1].natural == ("a",) and rows[0].natural == ()
    assert rows[1].cells[1].state == "over_budget" and "peaks at 9.00 GiB" in rows[1].cells[1].title
    assert rows[0].cells[0].job_id == "job-a-4"


def test_counts_follow_the_jobs():
    v = view([SweepCell("a", 1, "queued"), SweepCell("a", 2, "running"), SweepCell("b", 1, "succeeded")],
             status="running", done=False)
    assert dict(v.counts) == {"queued": 1, "running": 1, "succeeded": 1} and v.counts["failed"] == 0
    assert not v.done


def test_real_results_of_a_paper_graph():
    graph = benchmark_graph("vgg16")
    budgets = [graph.min_feasible_budget, graph.checkpoint_all_peak]
    cells = [SweepCell(s, b, "succeeded", solve(graph, budget=b, strategy=s).document())
             for s in ("checkpoint-all", "chen-sqrtn") for b in budgets]
    v = SweepView("vgg16", graph.min_feasible_budget, graph.checkpoint_all_peak, ("checkpoint-all", "chen-sqrtn"),
                  tuple(budgets), tuple(cells))
    every, sqrtn = sweep_figure(v)["data"]
    assert every["y"][0] == 1.0 and every["x"][0] == graph.checkpoint_all_peak / 2**30
    assert sqrtn["y"][0] > 1.0 and sqrtn["x"][0] * 2**30 <= graph.min_feasible_budget
    assert sweep_table(v)[0].cells[0].text == "over budget"


def test_a_graph_that_needs_no_memory_still_draws():
    cells = [SweepCell("a", 0, "succeeded", result("a", 0, 0, 1.0))]
    v = view(cells, min_feasible_budget=0, checkpoint_all_peak=0)
    assert sweep_table(v)[0].ratio == 1.0 and sweep_table(v)[0].cells[0].text == "1.000"
    assert sweep_figure(v)["data"][0]["x"] == [0.0]
