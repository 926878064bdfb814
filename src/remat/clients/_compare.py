"""``remat compare``: every strategy over a budget sweep of one graph, in-process or on a remat service.

In-process, the sweep's points come from :func:`remat.solvers.plan_sweep` (the service chooses them
the same way) and each is solved by :func:`remat.solvers.solve`; against a server, the sweep runs as
jobs there. Either way the outcome is a :class:`~remat.report.SweepView`, printed as a table and, on
request, written as the dashboard's sweep page in one offline HTML file (:mod:`remat.report`, which
imports no web framework).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remat.report import SweepCell, SweepView, render_report, sweep_table
from remat.schedules import Graph, InvalidRequest, Transfer, format_size
from remat.solvers import (
    DEFAULT_CONVERGENCE,
    DEFAULT_TIME_LIMIT_S,
    SWEEP_POINTS,
    Convergence,
    ResultDocument,
    ResultStatus,
    get_strategy,
    plan_sweep,
    solve,
)

from ._limit_args import convergence_of
from ._offload_args import check_offloading, transfer_of
from .http import TERMINAL, Client

__all__ = ["compare_here", "compare_on", "table_text", "write_report"]

Report = Callable[[str], None]

def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def compare_here(graph: Graph, *, strategies: Sequence[str] | None = None, budgets: Sequence[int] | None = None,
                 points: int = SWEEP_POINTS, backend: str = "auto", time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                 transfer: Transfer | None = None, host_budget: int | None = None,
                 convergence: Convergence | None = DEFAULT_CONVERGENCE, report: Report = _stderr) -> SweepView:
    """Solve every (strategy, budget) of the sweep in this process, one after the other (with ``transfer``,
    the strategies that offload too)."""
    plan = plan_sweep(graph, strategies=strategies, budgets=budgets, points=points, time_limit_s=time_limit_s,
                      transfer=transfer)
    cells = []
    for k, (strategy, budget) in enumerate(plan.points, 1):
        uses_backend = backend if get_strategy(strategy).backends else "auto"
        result = solve(graph, budget=budget, strategy=strategy, backend=uses_backend, time_limit_s=time_limit_s,
                       transfer=transfer, host_budget=host_budget, convergence=convergence).document()
        # in-process nothing cancels a point: it fails when its solve errs, else it succeeded
        cells.append(SweepCell(strategy, budget, "failed" if result.status is ResultStatus.ERROR else "succeeded",
                               result))
        report(f"[{k}/{len(plan.points)}] {_point_line(result)}")
    return SweepView(graph.name, graph.min_feasible_budget, graph.checkpoint_all_peak, plan.strategies,
                     tuple(sorted(plan.budgets)), tuple(cells), dict(plan.natural))


def compare_on(client: Client, graph: Graph, *, strategies: Sequence[str] | None = None,
               budgets: Sequence[int] | None = None, backend: str = "auto", time_limit_s: float | None = None,
               transfer: Transfer | None = None, host_budget: int | None = None,
               convergence: Convergence | None = DEFAULT_CONVERGENCE, poll_s: float = 1.0,
               report: Report = _stderr) -> tuple[str, SweepView]:
    """Run the sweep as jobs on the service behind ``client``; returns the sweep's id and its final view."""
    started = client.sweep(graph, strategies=strategies, budgets=budgets, backend=backend, time_limit_s=time_limit_s,
                           transfer=transfer, host_budget=host_budget, convergence=convergence)
    report(f"sweep {started['id']} submitted: {sum(started['counts'].values())} points")
    said = ""

    def progress(doc: dict[str, Any]) -> None:
        nonlocal said
        line = ", ".join(f"{n} {status}" for status, n in doc["counts"].items() if n)
        if line != said:
            report(f"sweep {doc['id'][:12]}: {line}")
            said = line

    # remat compare prints the progress of every poll: it may wait for as long as the sweep takes
    doc = client.wait_sweep(started["id"], poll_s=poll_s, summary=True, timeout_s=None, on_poll=progress)
    return doc["id"], _view_of(graph, doc)


def _view_of(graph: Graph, doc: dict[str, Any]) -> SweepView:
    """The view of a ``GET /v1/sweeps/{id}`` document; results are matched to jobs by (strategy, budget)."""
    parsed = (ResultDocument.from_json(r, summary=True) for r in doc["results"])
    results = {(r.strategy, r.budget): r for r in parsed}
    cells = tuple(SweepCell(j["strategy"], j["budget"], j["status"], results.get((j["strategy"], j["budget"])),
                            j["id"]) for j in doc["jobs"])
    return SweepView(graph.name, graph.min_feasible_budget, graph.checkpoint_all_peak,
                     tuple(dict.fromkeys(c.strategy for c in cells)), tuple(sorted({c.budget for c in cells})),
                     cells, doc["natural_budgets"], doc["status"], doc["status"] in TERMINAL)


def _point_line(result: ResultDocument) -> str:
    line = f"{result.strategy} at {format_size(result.budget)}: {result.status.value.replace('_', ' ')}"
    if result.overhead is not None and result.peak_memory is not None:
        line += f", overhead {result.overhead:.4f}, peak {format_size(result.peak_memory)}"
    return f"{line} ({result.solve_time_s:.2f} s)"


def table_text(view: SweepView) -> str:
    """The sweep's grid as aligned text: a row per budget, a column per strategy, ``*`` on each row's best."""
    rows = sweep_table(view)
    header = ["budget", "of peak", *view.strategies]
    body = [[row.label, f"{row.ratio:.3f}", *(c.text + ("*" if c.best else "") for c in row.cells)] for row in rows]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = [f"{view.graph_name or 'graph'}: {len(view.strategies)} strategies x {len(view.budgets)} budgets; "
             f"smallest feasible budget {format_size(view.min_feasible_budget)}, "
             f"checkpoint-all peak {format_size(view.checkpoint_all_peak)}",
             "overhead (cost / base cost) of each strategy's plan at each budget; * the least in its row", ""]
    for r in [header, *body]:
        cells = (cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True)))
        lines.append("  ".join(cells))
    natural = [f"{s} {format_size(b)}" for s, b in view.natural.items() if s in view.strategies]
    if natural:
        lines += ["", f"natural points (each heuristic's own peak): {', '.join(natural)}"]
    return "\n".join(lines)


def write_report(view: SweepView, path: str | Path, *, source: str) -> None:
    """The dashboard's sweep page for ``view``, with Plotly and everything else inlined, at ``path``."""
    Path(path).write_text(render_report(view, generated=datetime.now(UTC), source=source), encoding="utf-8")


def run(args: Any) -> int:
    """``remat compare``: sweep, print the table, write the report; 1 when a point failed."""
    graph = Graph.from_path(args.graph)
    transfer = transfer_of(args)
    check_offloading(args.strategies or [], transfer)
    options = {"strategies": args.strategies, "budgets": args.budgets, "backend": args.backend,
               "transfer": transfer, "host_budget": args.host_budget, "convergence": convergence_of(args)}
    if args.server:
        if args.points is not None:
            raise InvalidRequest("--points applies in-process only; with --server, give --budgets.", field="points")
        with Client(args.server) as client:
            sweep_id, view = compare_on(client, graph, time_limit_s=args.time_limit, **options)
        _stderr(f"dashboard: {args.server.rstrip('/')}/dashboard/sweeps/{sweep_id}")
    else:
        view = compare_here(graph, points=SWEEP_POINTS if args.points is None else args.points,
                            time_limit_s=DEFAULT_TIME_LIMIT_S if args.time_limit is None else args.time_limit,
                            **options)
    print(table_text(view))
    if args.html:
        write_report(view, args.html, source=f"remat compare {Path(args.graph).name}")
        _stderr(f"report: {args.html}")
    return 1 if any(c.status == "failed" for c in view.cells) else 0
