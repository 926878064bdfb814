"""The dashboard's HTML, rendered with Jinja2: the live pages the service serves and the offline report.

A page carries its figures as JSON in a ``<script type="application/json" id="page-data">`` block;
``dashboard.js`` draws them with Plotly and, on a live page, polls the page's ``/data`` URL until the
work behind it has ended, swapping in the figures and the HTML fragments (rendered by the same
templates) it gets back. A report is the sweep page with every asset inlined: one file, offline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, pass_context, select_autoescape
from jinja2.runtime import Context
from markupsafe import Markup

from remat.schedules import format_size
from remat.solvers import RESULT_BULK, ResultDocument

from ._assets import ASSETS
from ._job_view import PlanStats
from ._max_batch_view import max_batch_figure, max_batch_rows
from ._sweep_view import SweepView, strategy_color, sweep_figure, sweep_table

__all__ = ["TEMPLATE_DIR", "job_update", "max_batch_update", "render_index", "render_job", "render_login",
           "render_max_batch", "render_report", "render_root", "render_sweep", "sweep_update"]

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


@pass_context
def _script(ctx: Context, name: str) -> Markup:
    asset = ASSETS[name]
    if ctx.get("inline"):
        return Markup(f"<script>{asset.inline_text()}</script>")  # noqa: S704 - our own vendored file
    return Markup(f'<script src="{asset.url}"></script>')  # noqa: S704


@pass_context
def _style(ctx: Context, name: str) -> Markup:
    asset = ASSETS[name]
    if ctx.get("inline"):
        return Markup(f"<style>{asset.inline_text()}</style>")  # noqa: S704
    return Markup(f'<link rel="stylesheet" href="{asset.url}">')  # noqa: S704


@pass_context
def _icon(ctx: Context) -> Markup:
    asset = ASSETS["favicon.svg"]
    href = asset.data_uri() if ctx.get("inline") else asset.url
    return Markup(f'<link rel="icon" type="image/svg+xml" href="{href}">')  # noqa: S704


def _when(moment: datetime | str | None) -> str:
    """A moment (or its ISO 8601 text, as documents on the wire carry it) as the pages write it."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


_ENV = Environment(loader=FileSystemLoader(TEMPLATE_DIR), autoescape=select_autoescape(("html",)),
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_ENV.globals.update(script=_script, style=_style, icon=_icon, color=strategy_color, inline=False)
_ENV.filters.update(size=format_size, when=_when)
_ENV.policies["json.dumps_kwargs"] = {"separators": (",", ":")}


def _render(template: str, **context: Any) -> str:
    return _ENV.get_template(template).render(**context)


def render_root(*, version: str) -> str:
    """``/`` for a browser: where the dashboard and the API documentation are."""
    return _render("root.html", version=version)


def render_index(*, sweeps: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]],
                 summaries: Mapping[str, ResultDocument], max_batches: Sequence[Mapping[str, Any]] = ()) -> str:
    """``/dashboard``: recent sweeps (with their jobs' counts), max-batch searches, and recent jobs (with their
    results' numbers)."""
    return _render("index.html", sweeps=sweeps, jobs=jobs, summaries=summaries, max_batches=max_batches)


def _sweep_fragments(view: SweepView, *, links: bool) -> dict[str, str]:
    return {"sweep-progress": _render("_sweep_progress.html", view=view),
            "sweep-table": _render("_sweep_table.html", view=view, rows=sweep_table(view), links=links)}


def sweep_update(view: SweepView, *, poll: str | None) -> dict[str, Any]:
    """What a live sweep page swaps in: the chart, the table, the progress; ``poll`` again unless None."""
    return {"figures": {"curves": sweep_figure(view)}, "html": _sweep_fragments(view, links=True), "poll": poll}


def render_sweep(view: SweepView, *, sweep_id: str, poll: str | None) -> str:
    """``/dashboard/sweeps/{id}``: the chart, progress and table, live while ``poll`` is set."""
    data = {"figures": {"curves": sweep_figure(view)}, "poll": poll}
    return _render("sweep.html", view=view, sweep_id=sweep_id, data=data,
                   fragments=_sweep_fragments(view, links=True))


def render_report(view: SweepView, *, generated: datetime, source: str) -> str:
    """The sweep page as one self-contained HTML file (Plotly, script, style and data inlined)."""
    data = {"figures": {"curves": sweep_figure(view)}, "poll": None}
    return _render("sweep.html", view=view, sweep_id=None, data=data, inline=True,
                   fragments=_sweep_fragments(view, links=False), generated=generated, source=source)


def job_update(job: Mapping[str, Any], *, poll: str | None) -> dict[str, Any]:
    """What a live job page swaps in while the job runs (``poll`` set); once it has ended (``poll`` None)
    the page reloads to draw the plan."""
    return {"figures": {}, "html": {"job-progress": _render("_job_progress.html", job=job)}, "poll": poll,
            "reload": poll is None}


def render_job(job: Mapping[str, Any], result: ResultDocument | None, *, figures: Mapping[str, Any],
               stats: PlanStats | None, poll: str | None, notice: str | None = None) -> str:
    """``/dashboard/jobs/{id}``: the job, its result's numbers, its plan's figures and statistics."""
    data = {"figures": dict(figures), "poll": poll}
    return _render("job.html", job=job, result=result, stats=stats, data=data, notice=notice)


def _max_batch_fragments(doc: Mapping[str, Any]) -> dict[str, str]:
    return {"max-batch-progress": _render("_max_batch_progress.html", doc=doc),
            "max-batch-table": _render("_max_batch_table.html", rows=max_batch_rows(doc)),
            "max-batch-chosen": _render("_max_batch_chosen.html", doc=doc, result=_chosen_result(doc))}


def _chosen_result(doc: Mapping[str, Any]) -> ResultDocument | None:
    """The chosen plan's result in a remat.max-batch/v1 document, whole or summarized; None before one is chosen."""
    chosen = doc["chosen"]
    result = None if chosen is None else chosen["result"]
    if result is None:
        return None
    return ResultDocument.from_json(result, summary=not set(RESULT_BULK) <= result.keys())


def max_batch_update(doc: Mapping[str, Any], *, poll: str | None) -> dict[str, Any]:
    """What a live max-batch page swaps in: the bars, the table, the progress; ``poll`` again unless None."""
    return {"figures": {"batches": max_batch_figure(doc)}, "html": _max_batch_fragments(doc), "poll": poll}


def render_max_batch(doc: Mapping[str, Any], *, poll: str | None) -> str:
    """``/dashboard/max-batch/{id}``: a remat.max-batch/v1 document as bars (the Checkmate paper's Figure 6), a
    table and the plan to use, live while ``poll`` is set."""
    data = {"figures": {"batches": max_batch_figure(doc)}, "poll": poll}
    return _render("max_batch.html", doc=doc, data=data, fragments=_max_batch_fragments(doc))


def render_login(*, next_url: str, message: str, csrf: str) -> str:
    """The page that asks for a bearer token when authentication is on; ``csrf`` is the form's one-time value,
    which the sign-in must send back with the cookie issued beside it."""
    return _render("login.html", next_url=next_url, message=message, csrf=csrf)
