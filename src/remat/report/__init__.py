"""remat.report: sweeps, plans and max-batch searches as charts, tables and HTML pages, with no web framework.

The data behind every chart is computed here in plain Python (:mod:`._sweep_view`: each strategy's
overhead-against-budget step curve and the result grid; :mod:`._job_view`: R/S heat maps, memory over
the plan, plan statistics; :mod:`._max_batch_view`: the largest batch of each strategy as bars),
rendered with Jinja2 (:mod:`._render`) and drawn in the browser by the vendored Plotly bundle
(:mod:`._assets`). The service's dashboard (:mod:`remat.service.dashboard`) serves these pages live;
``remat compare`` prints the table and writes the offline report. :mod:`._svg` draws memory over a step as
one SVG file, with no browser (the PyTorch client's ``Explanation.plot``).
"""

from ._assets import ASSETS, PLOTLY_VERSION, Asset
from ._envelope import MAX_STEPS, memory_envelope
from ._job_view import MAX_SIDE, Blocks, PlanStats, job_figures, plan_stats, run_blocks
from ._max_batch_view import MaxBatchRow, max_batch_figure, max_batch_rows
from ._render import (
    job_update,
    max_batch_update,
    render_index,
    render_job,
    render_login,
    render_max_batch,
    render_report,
    render_root,
    render_sweep,
    sweep_update,
)
from ._svg import memory_svg
from ._sweep_view import (
    SweepCell,
    SweepView,
    TableCell,
    TableRow,
    step_curve,
    strategy_color,
    sweep_figure,
    sweep_table,
)

__all__ = [
    "ASSETS",
    "MAX_SIDE",
    "MAX_STEPS",
    "PLOTLY_VERSION",
    "Asset",
    "Blocks",
    "MaxBatchRow",
    "PlanStats",
    "SweepCell",
    "SweepView",
    "TableCell",
    "TableRow",
    "job_figures",
    "job_update",
    "max_batch_figure",
    "max_batch_rows",
    "max_batch_update",
    "memory_envelope",
    "memory_svg",
    "plan_stats",
    "render_index",
    "render_job",
    "render_login",
    "render_max_batch",
    "render_report",
    "render_root",
    "render_sweep",
    "run_blocks",
    "step_curve",
    "strategy_color",
    "sweep_figure",
    "sweep_table",
    "sweep_update",
]
