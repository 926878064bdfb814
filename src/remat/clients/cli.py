"""The ``remat`` command line: solve, validate, strategies, compare, max-batch, profile, serve, worker and healthcheck.

Every command reports failure as one line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from remat.schedules import Graph, RematError, ScheduleEntries, format_size, parse_size
from remat.solvers import DEFAULT_TIME_LIMIT_S, FITTING_STATUSES, STRATEGIES, ResultDocument, solve

from ._limit_args import add_time_options, convergence_of
from ._offload_args import add_offload_options, check_offloading, transfer_of

__all__ = ["main"]

Command = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``remat`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except RematError as e:
        print(f"remat: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"remat: error: {e.strerror or e}: {getattr(e, 'filename', '') or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("remat: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="remat", description="Memory-bounded training schedules.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("solve", help="find a plan for a graph under a memory budget")
    p.add_argument("graph", help="remat.graph/v1 JSON file")
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--budget", type=_size, help="bytes, fixed memory included; units allowed (12GiB)")
    budget.add_argument("--budget-ratio", type=float, help="fraction of the checkpoint-all peak")
    p.add_argument("--strategy", default="checkmate", help="strategy name (remat strategies lists them)")
    p.add_argument("--backend", default="auto", help="solver backend for checkmate")
    add_time_options(p, default=DEFAULT_TIME_LIMIT_S, what="solve")
    p.add_argument("--mip-gap", type=float, default=None, help="relative gap that counts as optimal")
    p.add_argument("--option", type=_option, action="append", default=[], metavar="KEY=VALUE", dest="options",
                   help="a strategy option (remat strategies lists them), repeatable; VALUE is read as JSON "
                        "when it parses (5, false), else as text (milp)")
    p.add_argument("--output", "-o", help="write the remat.result/v1 JSON here")
    p.add_argument("--full-schedule", action="store_true",
                   help="write the schedule with every stage's whole retained set, not only what changes")
    p.add_argument("--server", help="solve on a remat service at this URL instead of in-process")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of a summary")
    add_offload_options(p, size=_size)
    p.set_defaults(run=_solve)

    p = sub.add_parser("validate", help="check a graph file and print its key numbers")
    p.add_argument("graph", help="remat.graph/v1 JSON file")
    p.set_defaults(run=_validate)

    p = sub.add_parser("strategies", help="list the strategies and their backends")
    p.set_defaults(run=_strategies)

    p = sub.add_parser("serve", help="run the HTTP service (embedded executor, or a Redis queue with --queue)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1; REMAT_HOST)")
    p.add_argument("--port", type=int, help="port (default 8000; REMAT_PORT)")
    p.add_argument("--data-dir", help="where the embedded job store lives (default ~/.local/share/remat)")
    p.add_argument("--queue", metavar="URL", help="redis://HOST:PORT/DB: cluster mode, solves run on `remat worker`s")
    p.add_argument("--slots", type=int, help="solves the embedded executor runs at once (REMAT_SLOTS)")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="serve without tokens on an address other machines can reach (REMAT_INSECURE)")
    p.set_defaults(run=_serve)

    p = sub.add_parser("worker", help="run solves from a Redis queue (cluster mode)")
    p.add_argument("--queue", metavar="URL", help="redis://HOST:PORT/DB (REMAT_QUEUE_URL)")
    p.add_argument("--name", help="worker name (default: random)")
    p.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    p.set_defaults(run=_worker)

    p = sub.add_parser("healthcheck", help="exit 0 while this container's serve or worker runs its maintenance")
    p.add_argument("--max-age", type=float, default=60.0,
                   help="seconds the heartbeat file (REMAT_HEARTBEAT_FILE) may be old (default 60)")
    p.set_defaults(run=_healthcheck)

    p = sub.add_parser("compare", help="every strategy over a budget sweep: a table, and an HTML report with --html")
    p.add_argument("graph", help="remat.graph/v1 JSON file")
    p.add_argument("--strategies", type=_names, help="comma-separated (default: every one that applies)")
    p.add_argument("--budgets", type=_sizes, help="comma-separated sizes (default: about a dozen from the smallest "
                                                  "feasible budget to the checkpoint-all peak, plus natural points)")
    p.add_argument("--points", type=int, help="evenly spaced budgets in the default sweep (in-process; default 12)")
    p.add_argument("--backend", default="auto", help="solver backend for the strategies that use one")
    add_time_options(p, default=None, what=f"point (in-process {DEFAULT_TIME_LIMIT_S:g}, else the server's default)")
    p.add_argument("--server", help="run the sweep as jobs on a remat service at this URL")
    p.add_argument("--html", metavar="FILE", help="write the chart and table as one self-contained HTML file")
    add_offload_options(p, size=_size)
    p.set_defaults(run=_compare)

    p = sub.add_parser("max-batch", help="the largest batch each strategy fits in a device's memory")
    p.add_argument("graphs", nargs="+", metavar="FILE@BATCH",
                   help="the model's graph at one batch size (activations taken as proportional to it), or at "
                        "two or more (memory and cost fitted as lines in the batch, and checked)")
    p.add_argument("--budget", type=_size, required=True, help="the device's bytes, fixed memory included (16GiB)")
    p.add_argument("--strategies", type=_names, default=["checkmate", "checkpoint-all"],
                   help="comma-separated, or all (default: checkmate,checkpoint-all)")
    p.add_argument("--max-overhead", type=float,
                   help="largest cost over the base cost a plan may have (default: one extra forward pass)")
    add_time_options(p, default=30.0, what="batch tried")
    p.add_argument("--server", help="search as jobs on a remat service at this URL (graphs at two or more batch "
                                    "sizes)")
    p.add_argument("--json", action="store_true", help="print each strategy's answer as JSON (with --server, the "
                                                       "remat.max-batch/v1 document)")
    p.set_defaults(run=_max_batch)

    p = sub.add_parser("profile", help="capture a PyTorch model's training step as a remat.graph/v1 (needs torch)")
    p.add_argument("factory", metavar="MODULE:FACTORY",
                   help="FACTORY([batch_size=N]) returns (model, example_inputs[, loss_fn]); MODULE is a module "
                        "name or a .py file")
    p.add_argument("--batch-size", type=int, help="passed to the factory as batch_size")
    p.add_argument("--cost-model", default="flops", help="flops (roofline estimate) or measured (timed per node)")
    p.add_argument("--device", help="flops model's device: cpu, v100, a100, h100, h200; default: the model's")
    p.add_argument("--output", "-o", help="write the graph JSON here (default: stdout)")
    p.set_defaults(run=_profile)
    return parser


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except RematError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as (key, value): the value as JSON when it parses, else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _sizes(text: str) -> list[int]:
    return [_size(size) for size in _names(text)]


def _compare(args: argparse.Namespace) -> int:
    from remat.clients._compare import run

    return run(args)


def _max_batch(args: argparse.Namespace) -> int:
    from remat.clients._max_batch import run

    return run(args)


def _profile(args: argparse.Namespace) -> int:
    try:
        from remat.clients.torch._profile import run
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise RematError("remat profile needs PyTorch: pip install 'remat[torch]'.") from None
    return run(args)


def _solve(args: argparse.Namespace) -> int:
    graph = Graph.from_path(args.graph)
    options: dict[str, Any] = {"strategy": args.strategy, "backend": args.backend, "time_limit_s": args.time_limit,
                               "convergence": convergence_of(args)}
    if args.mip_gap is not None:
        options["mip_gap"] = args.mip_gap
    if args.options:
        options["options"] = dict(args.options)
    transfer = transfer_of(args)
    check_offloading([args.strategy], transfer, dict(args.options))
    if args.host_budget is not None:
        options["host_budget"] = args.host_budget
    budget = {"budget": args.budget} if args.budget is not None else {"budget_ratio": args.budget_ratio}
    if args.server:
        from remat.clients.http import Client

        with Client(args.server) as client:
            doc = client.solve(graph, **budget, **options, transfer=transfer)
    else:
        doc = solve(graph, **budget, **options, transfer=transfer).document()
    if args.full_schedule and doc.schedule is not None:
        doc = replace(doc, schedule=ScheduleEntries.from_json(graph, doc.schedule).to_json(graph, full=True))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(doc.to_json(), f)
    print(json.dumps(doc.to_json()) if args.json else summary_line(doc))
    return 0 if doc.status in FITTING_STATUSES else 1


def summary_line(doc: ResultDocument) -> str:
    """One line about a remat.result/v1: status, overhead, peak against budget, time."""
    parts = [f"{doc.graph_name or 'graph'}: {doc.strategy}", doc.status.value]
    if doc.overhead is not None:
        parts.append(f"overhead {doc.overhead:.4f}")
    if doc.peak_memory is not None:
        share = f" ({doc.peak_memory / doc.budget:.3f})" if doc.budget else ""
        parts.append(f"peak {format_size(doc.peak_memory)} / budget {format_size(doc.budget)}{share}")
    else:
        parts.append(f"budget {format_size(doc.budget)}")
    if doc.smallest_peak is not None:
        parts.append(f"no plan fits it; the leanest found peaks at {format_size(doc.smallest_peak)}")
    if doc.transfer is not None and doc.host_peak_memory is not None:
        host = f" / host budget {format_size(doc.host_budget)}" if doc.host_budget is not None else ""
        parts.append(f"host peak {format_size(doc.host_peak_memory)}{host}")
    if doc.fallback:
        parts.append(f"fallback {doc.fallback}")
    parts.append(f"{doc.solve_time_s:.2f} s")
    return ", ".join(parts)


def _validate(args: argparse.Namespace) -> int:
    g = Graph.from_path(args.graph)
    ratio = (f"; smallest feasible ratio {g.min_feasible_budget / g.checkpoint_all_peak:.3f}"
             if g.checkpoint_all_peak else "")  # a graph of size 0 has no ratio
    print(f"{args.graph}: valid remat.graph/v1 {g.name!r}: {g.size} nodes, {g.edge_count} edges, "
          f"{len(g.forward_nodes)} forward; base cost {g.base_cost:g}; fixed {format_size(g.fixed_memory)}; "
          f"min feasible budget {format_size(g.min_feasible_budget)} ({g.min_feasible_budget} B); "
          f"checkpoint-all peak {format_size(g.checkpoint_all_peak)} ({g.checkpoint_all_peak} B){ratio}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from remat.service import load_settings, serve

    serve(load_settings(host=args.host, port=args.port, data_dir=args.data_dir, queue_url=args.queue,
                        slots=args.slots, insecure=args.insecure))
    return 0


def _worker(args: argparse.Namespace) -> int:
    from remat.service import load_settings, work

    work(load_settings(queue_url=args.queue), burst=args.burst, name=args.name)
    return 0


def _healthcheck(args: argparse.Namespace) -> int:
    from remat.service import check_heartbeat, load_settings

    age = check_heartbeat(load_settings().heartbeat_file, max_age_s=args.max_age)
    print(f"healthy: the last maintenance pass was {age:.0f} s ago")
    return 0


def _strategies(args: argparse.Namespace) -> int:
    for s in STRATEGIES.values():
        backends = f" [backends: {', '.join(s.backends)}]" if s.backends else ""
        offloads = " [offloads: needs --transfer or --bandwidth]" if s.offloads else ""
        largest = f" [graphs of at most {s.node_limit.nodes:,} nodes]" if s.node_limit else ""
        print(f"{s.name:20s} {s.summary}{backends}{offloads}{largest}")
        for name, option in s.options.items():
            print(f"{'':20s}   --option {name}=...: {option.summary}; {option.accepts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
