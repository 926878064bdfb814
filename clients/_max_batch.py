"""``remat max-batch``: the largest batch each strategy fits on a device, from graphs captured at known batch sizes."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from remat.schedules import BatchedGraph, Graph, InvalidRequest, format_size
from remat.solvers import BatchTrial, Convergence, MaxBatch, max_batch, sweep_strategies

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Search every strategy asked for, each batch tried on stderr; print a table (or JSON); exit 1 when the
    first strategy fits no batch."""
    batched = _batched(args.graphs)
    names = sweep_strategies(batched.template, None if args.strategies == ["all"] else args.strategies)
    answers = []
    for name in names:
        options: dict[str, Any] = {"time_limit_s": args.time_limit}
        if name == "checkmate":
            options["convergence"] = Convergence()
        answers.append(max_batch(batched, args.budget, strategy=name, max_overhead=args.max_overhead,
                                 on_trial=lambda trial, name=name: _report(name, trial), **options))
    if args.json:
        print(json.dumps([a.to_json() for a in answers]))
    else:
        cap = f"at most {args.max_overhead:g}x the base cost" if args.max_overhead else "at most one extra forward pass"
        print(f"{batched.template.name or 'graph'} on {format_size(args.budget)}, {cap}:")
        print(_table(answers))
    return 0 if answers and answers[0].batch else 1


def _report(strategy: str, trial: BatchTrial) -> None:
    overhead = f"overhead {trial.overhead:.4f}" if trial.overhead is not None else "no plan"
    verdict = "fits" if trial.ok else "does not fit"
    print(f"{strategy}: batch {trial.batch} {verdict} ({trial.status}, {overhead}, cap {trial.max_overhead:.4f})",
          file=sys.stderr, flush=True)


def _table(answers: list[MaxBatch]) -> str:
    """One row per strategy: its batch, the overhead and peak of its plan, and its batch against checkpoint-all's."""
    reference = next((a.batch for a in answers if a.strategy == "checkpoint-all"), None)
    rows = [f"{'strategy':20s} {'batch':>8s} {'overhead':>9s} {'peak':>11s} {'vs checkpoint-all':>18s}"]
    for a in answers:
        r = a.result
        overhead = f"{r.overhead:.4f}" if r and r.overhead is not None else "-"
        peak = format_size(r.peak_memory) if r and r.peak_memory is not None else "-"
        ratio = f"{a.batch / reference:.2f}x" if reference else "-"
        rows.append(f"{a.strategy:20s} {a.batch:8d} {overhead:>9s} {peak:>11s} {ratio:>18s}")
    return "\n".join(rows)


def _batched(specs: list[str]) -> BatchedGraph:
    """Graphs named ``FILE@BATCH``: one is taken as proportional to its batch, two or more are fitted."""
    graphs: dict[int, Graph] = {}
    for spec in specs:
        path, at, size = spec.rpartition("@")
        if not at or not size.isdigit() or int(size) < 1:
            raise InvalidRequest(f"{spec!r}: name each graph with the batch size it was captured at, as FILE@BATCH "
                                 "(gpt-b8.json@8).", field="graphs")
        if int(size) in graphs:
            raise InvalidRequest(f"Two graphs at batch {size}: give each batch size once.", field="graphs")
        graphs[int(size)] = Graph.from_path(path)
    if len(graphs) == 1:
        ((batch, graph),) = graphs.items()
        return BatchedGraph.proportional(graph, batch=batch)
    return BatchedGraph.from_graphs(graphs)
