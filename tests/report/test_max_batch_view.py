"""The data behind the max-batch page: a bar per strategy with its batch and ratio, the ceiling, the table."""

from __future__ import annotations

from typing import Any

from factories import chain

from remat.report import max_batch_figure, max_batch_rows, render_max_batch, strategy_color
from remat.schedules import format_size
from remat.solvers import solve


def row(strategy: str, batch: int, *, status: str = "succeeded", vs_all: float | None = None,
        trials: tuple[tuple[int, bool | None], ...] = (), **extra: Any) -> dict[str, Any]:
    return {"strategy": strategy, "backend": "auto", "status": status, "batch": batch,
            "overhead": 1.2 if batch else None, "peak_memory": 15 * 2**30 if batch else None,
            "job_id": f"job-{strategy}" if batch else None, "vs_checkpoint_all": vs_all, "vs_best_baseline": None,
            "error": None, "progress": None,
            "trials": [{"batch": b, "ok": ok, "job_id": f"j{b}", "status": "succeeded", "result_status": "feasible",
                        "overhead": 1.2, "peak_memory": 1, "max_overhead": 1.5} for b, ok in trials], **extra}


def doc(rows: list[dict[str, Any]], ceiling: int | None = 300) -> dict[str, Any]:
    return {"id": "f" * 64, "status": "succeeded", "graph_name": "vgg16", "batches": [128, 256],
            "budget": 16 * 2**30, "max_overhead": None, "created_at": "2026-11-24T07:03:53.007374Z",
            "finished_at": None, "ceiling": ceiling, "checkpoint_all": None, "best_baseline": None, "chosen": None,
            "strategies": rows}


def test_a_bar_per_strategy_in_its_colour_with_its_batch_and_ratio():
    rows = [row("checkpoint-all", 100, vs_all=1.0), row("chen-greedy", 150, vs_all=1.5),
            row("checkmate", 0, status="running")]
    figure = max_batch_figure(doc(rows))
    (bars,) = figure["data"]
    assert bars["x"] == ["checkpoint-all", "chen-greedy", "checkmate"] and bars["y"] == [100, 150, 0]
    assert bars["text"] == ["100 (1.00x)", "150 (1.50x)", "0"]
    assert bars["marker"]["color"] == [strategy_color(s) for s in bars["x"]]
    assert bars["marker"]["opacity"] == [1.0, 1.0, 0.45], "a strategy still searching is faded"
    assert "overhead 1.2000" in bars["hovertext"][0]
    (line,) = figure["layout"]["shapes"]
    assert line["y0"] == line["y1"] == 300 and "ceiling 300" in figure["layout"]["annotations"][0]["text"]


def test_a_ceiling_far_above_the_bars_is_named_not_drawn():
    figure = max_batch_figure(doc([row("checkpoint-all", 10, vs_all=1.0)], ceiling=10_000))
    assert figure["layout"]["shapes"] == []
    (note,) = figure["layout"]["annotations"]
    assert note["yref"] == "paper" and "ceiling 10000" in note["text"]
    assert max_batch_figure(doc([row("checkpoint-all", 0)], ceiling=None))["layout"]["annotations"] == []


def test_the_table_marks_the_largest_batch_and_the_batches_tried():
    rows = max_batch_rows(doc([row("checkpoint-all", 100, vs_all=1.0, trials=((100, True), (200, False))),
                               row("checkmate", 180, vs_all=1.8, trials=((100, True), (200, False), (150, None)),
                                   status="running")]))
    assert [(r.strategy, r.best) for r in rows] == [("checkpoint-all", False), ("checkmate", True)]
    assert rows[0].tried == "100+ 200-" and rows[1].tried == "100+ 200- 150\u2026"
    assert rows[1].vs_checkpoint_all == "1.80x" and rows[1].vs_best_baseline == "-"
    html = render_max_batch(doc([row("checkpoint-all", 100, vs_all=1.0)]), poll=None)
    assert 'href="/dashboard/jobs/job-checkpoint-all"' in html and "one extra forward pass" in html


def test_the_plan_to_use_shows_the_chosen_results_numbers_whole_or_summarized():
    result = solve(chain(8), budget_ratio=0.8, strategy="chen-greedy").document()
    for form in (result.to_json(), result.to_json(summary=True)):
        chosen = {"strategy": "chen-greedy", "batch": 100, "job_id": "job-chen-greedy", "result": form}
        html = render_max_batch({**doc([row("chen-greedy", 100, vs_all=1.0)]), "chosen": chosen}, poll=None)
        assert f'<span class="badge {result.status.value}">{result.status.value}</span>' in html
        assert f"{result.overhead:.4f} &times; base cost" in html
        assert f"{format_size(result.peak_memory)} of {format_size(result.budget)}" in html
