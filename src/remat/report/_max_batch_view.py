"""The data behind a max-batch page: the largest batch of each strategy as bars, as in the Checkmate paper's Figure 6.

The page reads a remat.max-batch/v1 document (docs/api.md): per strategy its batch so far, the
overhead and peak of that batch's plan, and its batch over checkpoint-all's and over the best other
baseline's. The chart draws one bar per strategy, labelled with its batch and its ratio to
checkpoint-all's, with the ceiling no strategy can pass (the largest batch whose smallest feasible
budget fits the device) as a dotted line when it is near; the table has the numbers and links to each plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remat.schedules import format_size

from ._sweep_view import strategy_color

__all__ = ["MaxBatchRow", "max_batch_figure", "max_batch_rows"]

CEILING_VIEW = 3
"""The ceiling is drawn as a line when it is at most this many times the tallest bar, else only named."""


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def max_batch_figure(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A Plotly bar chart: each strategy's largest batch so far, its ratio to checkpoint-all's above its bar."""
    rows = doc["strategies"]
    labels = [f"{s['batch']}" + (f" ({_ratio(s['vs_checkpoint_all'])})" if s["vs_checkpoint_all"] is not None else "")
              for s in rows]
    hover = [_hover(s) for s in rows]
    bars = {"type": "bar", "x": [s["strategy"] for s in rows], "y": [s["batch"] for s in rows], "text": labels,
            "textposition": "outside", "cliponaxis": False, "hovertext": hover,
            "hovertemplate": "%{hovertext}<extra></extra>",
            "marker": {"color": [strategy_color(s["strategy"]) for s in rows],
                       "opacity": [1.0 if s["status"] == "succeeded" else 0.45 for s in rows]}}
    layout: dict[str, Any] = {
        "xaxis": {"title": {"text": "Strategy"}, "type": "category"},
        "yaxis": {"title": {"text": "Largest batch that fits"}, "rangemode": "tozero"},
        "margin": {"l": 70, "r": 20, "t": 40, "b": 90}, "showlegend": False, "shapes": [], "annotations": [],
    }
    ceiling = doc.get("ceiling")
    if ceiling:
        text = f"ceiling {ceiling}: no plan fits a larger batch"
        if ceiling <= CEILING_VIEW * max(max(s["batch"] for s in rows), 1):
            layout["shapes"].append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": ceiling,
                                     "y1": ceiling, "line": {"dash": "dot", "color": "#999", "width": 1}})
            where = {"yref": "y", "y": ceiling}
        else:  # far above the bars: said, not drawn
            where = {"yref": "paper", "y": 1}
        layout["annotations"].append({"xref": "paper", "x": 1, "xanchor": "right", "yanchor": "bottom",
                                      "showarrow": False, "font": {"size": 11, "color": "#666"}, "text": text,
                                      **where})
    return {"data": [bars], "layout": layout}


def _hover(s: Mapping[str, Any]) -> str:
    lines = [f"<b>{s['strategy']}</b>: batch {s['batch']} ({s['status']})"]
    if s["overhead"] is not None:
        lines.append(f"overhead {s['overhead']:.4f}, peak {format_size(s['peak_memory'])}")
    lines.append(f"vs checkpoint-all {_ratio(s['vs_checkpoint_all'])}, "
                 f"vs best baseline {_ratio(s['vs_best_baseline'])}")
    lines.append(f"{len(s['trials'])} batches tried")
    return "<br>".join(lines)


@dataclass(frozen=True)
class MaxBatchRow:
    """One strategy in the page's table."""

    strategy: str
    status: str
    batch: int
    vs_checkpoint_all: str
    vs_best_baseline: str
    overhead: str
    peak: str
    tried: str
    """The batches tried, in order, each marked as fitting or not (the one being solved last)."""
    job_id: str | None
    """The job whose plan the batch is."""
    best: bool
    """The largest batch of the search."""
    error: str | None


def max_batch_rows(doc: Mapping[str, Any]) -> list[MaxBatchRow]:
    """A row per strategy, in the search's order, the largest batch marked."""
    top = max((s["batch"] for s in doc["strategies"]), default=0)
    return [MaxBatchRow(
        strategy=s["strategy"], status=s["status"], batch=s["batch"],
        vs_checkpoint_all=_ratio(s["vs_checkpoint_all"]), vs_best_baseline=_ratio(s["vs_best_baseline"]),
        overhead=f"{s['overhead']:.4f}" if s["overhead"] is not None else "-",
        peak=format_size(s["peak_memory"]) if s["peak_memory"] is not None else "-",
        tried=" ".join(_tried(t) for t in s["trials"]), job_id=s["job_id"], best=top > 0 and s["batch"] == top,
        error=s["error"] if s["status"] != "cancelled" else None) for s in doc["strategies"]]


def _tried(trial: Mapping[str, Any]) -> str:
    """``48+`` fit, ``106-`` did not, ``77…`` being solved."""
    mark = {True: "+", False: "-", None: "\u2026"}[trial["ok"]]
    return f"{trial['batch']}{mark}"
