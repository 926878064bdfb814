"""``remat max-batch``: the largest batch each strategy fits on a device, from graphs captured at known batch sizes,
in-process or as a search on a remat service (``--server``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

from remat.schedules import BatchedGraph, Graph, InvalidRequest, format_size
from remat.solvers import BatchTrial, max_batch, sweep_strategies

from ._limit_args import convergence_of
from .http import Client

__all__ = ["run"]

Row = tuple[str, int, float | None, int | None]
"""A strategy, its batch, and the overhead and peak of that batch's plan (None when it fits none)."""


def run(args: argparse.Namespace) -> int:
    """Search every strategy asked for, each batch tried on stderr; print a table (or JSON); exit 1 when the
    first strategy fits no batch."""
    graphs = _graphs(args.graphs)
    strategies = None if args.strategies == ["all"] else args.strategies
    if args.server:
        rows, doc = _on_server(args.server, graphs, strategies, args)
    else:
        rows, doc = _here(graphs, strategies, args)
    if args.json:
        print(json.dumps(doc))
    else:
        template = graphs[min(graphs)]
        cap = f"at most {args.max_overhead:g}x the base cost" if args.max_overhead else "at most one extra forward pass"
        print(f"{template.name or 'graph'} on {format_size(args.budget)}, {cap}:")
        print(_table(rows))
    return 0 if rows and rows[0][1] else 1


def _here(graphs: dict[int, Graph], strategies: list[str] | None, args: argparse.Namespace) -> tuple[list[Row], Any]:
    """Every strategy's search in this process; the JSON is each one's answer (MaxBatch.to_json)."""
    batched = _batched(graphs)
    answers = []
    for name in sweep_strategies(batched.template, strategies):
        answers.append(max_batch(batched, args.budget, strategy=name, max_overhead=args.max_overhead,
                                 on_trial=partial(_report, name), time_limit_s=args.time_limit,
                                 convergence=convergence_of(args)))
    rows = [(a.strategy, a.batch, a.result.overhead if a.result else None,
             a.result.peak_memory if a.result else None) for a in answers]
    return rows, [a.to_json() for a in answers]


def _on_server(url: str, graphs: dict[int, Graph], strategies: list[str] | None,
               args: argparse.Namespace) -> tuple[list[Row], Any]:
    """The search as jobs on the service at ``url``; the JSON is its remat.max-batch/v1 document."""
    reported: set[tuple[str, int]] = set()

    def progress(doc: dict[str, Any]) -> None:
        for s in doc["strategies"]:
            for t in s["trials"]:
                if t["ok"] is not None and (s["strategy"], t["batch"]) not in reported:
                    reported.add((s["strategy"], t["batch"]))
                    _report(s["strategy"], BatchTrial(t["batch"], t["result_status"], t["overhead"],
                                                      t["max_overhead"], t["ok"]))

    with Client(url) as client:
        started = client.max_batch(graphs, budget=args.budget, max_overhead=args.max_overhead, strategies=strategies,
                                   time_limit_s=args.time_limit, convergence=convergence_of(args))
        print(f"max-batch {started['id']} submitted; dashboard: {url.rstrip('/')}/dashboard/max-batch/{started['id']}",
              file=sys.stderr, flush=True)
        doc = client.wait_max_batch(started["id"], timeout_s=None, on_poll=progress)
    for s in doc["strategies"]:
        if s["error"] and s["status"] != "cancelled":
            print(f"{s['strategy']}: {s['status']}: {s['error']}", file=sys.stderr, flush=True)
    return [(s["strategy"], s["batch"], s["overhead"], s["peak_memory"]) for s in doc["strategies"]], doc


def _report(strategy: str, trial: BatchTrial) -> None:
    overhead = f"overhead {trial.overhead:.4f}" if trial.overhead is not None else "no plan"
    verdict = "fits" if trial.ok else "does not fit"
    print(f"{strategy}: batch {trial.batch} {verdict} ({trial.status}, {overhead}, cap {trial.max_overhead:.4f})",
          file=sys.stderr, flush=True)


def _table(rows: Sequence[Row]) -> str:
    """One row per strategy: its batch, the overhead and peak of its plan, and its batch against checkpoint-all's."""
    reference = next((batch for strategy, batch, _, _ in rows if strategy == "checkpoint-all"), None)
    lines = [f"{'strategy':20s} {'batch':>8s} {'overhead':>9s} {'peak':>11s} {'vs checkpoint-all':>18s}"]
    for strategy, batch, overhead, peak in rows:
        ratio = f"{batch / reference:.2f}x" if reference else "-"
        lines.append(f"{strategy:20s} {batch:8d} {f'{overhead:.4f}' if overhead is not None else '-':>9s} "
                     f"{format_size(peak) if peak is not None else '-':>11s} {ratio:>18s}")
    return "\n".join(lines)


def _graphs(specs: list[str]) -> dict[int, Graph]:
    """Graphs named ``FILE@BATCH``, by batch."""
    graphs: dict[int, Graph] = {}
    for spec in specs:
        path, at, size = spec.rpartition("@")
        if not at or not size.isdigit() or int(size) < 1:
            raise InvalidRequest(f"{spec!r}: name each graph with the batch size it was captured at, as FILE@BATCH "
                                 "(gpt-b8.json@8).", field="graphs")
        if int(size) in graphs:
            raise InvalidRequest(f"Two graphs at batch {size}: give each batch size once.", field="graphs")
        graphs[int(size)] = Graph.from_path(path)
    return graphs


def _batched(graphs: dict[int, Graph]) -> BatchedGraph:
    """One graph is taken as proportional to its batch, two or more are fitted."""
    if len(graphs) == 1:
        ((batch, graph),) = graphs.items()
        return BatchedGraph.proportional(graph, batch=batch)
    return BatchedGraph.from_graphs(graphs)
