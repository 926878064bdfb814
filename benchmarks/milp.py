"""Checkmate MILP backends on the paper graphs: time to first plan, time to proof, overhead, bound.

    python benchmarks/milp.py [--graphs fcn8,rl100] [--ratios 0.9,0.8] [--backends highs,cbc,cpsat,scip,gurobi]
                              [--time-limit 300] [--threads 2] [--lp]

Every cell is one ``solve(strategy="checkmate", options={"path": "milp"})`` (the full MILP, warm-started
from the best baseline) in this process; the engine runs in its own solver process, whose CPU time is
reported next to the wall time because the machine may be shared (an engine killed at its time limit
is not counted: CPU time is read from reaped processes). ``--lp`` adds a checkmate-lp row per graph
and ratio. Overheads are cost / base cost - 1, as in the published table next to them.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from factories import benchmark_graph  # noqa: E402
from published import PUBLISHED  # noqa: E402

from remat.schedules import RematError  # noqa: E402
from remat.solvers import Progress, solve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="fcn8,rl100")
    parser.add_argument("--ratios", default="0.9,0.8")
    parser.add_argument("--backends", default="highs,cbc,cpsat,scip,gurobi")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lp", action="store_true", help="add a checkmate-lp row (highs) per graph and ratio")
    args = parser.parse_args()
    print(f"Machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{datetime.datetime.now().isoformat(timespec='minutes')}; time limit {args.time_limit:g} s, "
          f"{args.threads} threads\n")
    print("| graph | n | r | strategy / backend | status | first plan: s (overhead) | proof s | wall s | "
          "solver CPU s | load | overhead | lower bound | published (Gurobi / Moccasin) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.graphs.split(","):
        graph = benchmark_graph(name)
        for ratio in (float(r) for r in args.ratios.split(",")):
            cells = [("checkmate", b) for b in args.backends.split(",")]
            if args.lp:
                cells.append(("checkmate-lp", "highs"))
            for strategy, backend in cells:
                row = run(graph, ratio, strategy, backend, args.time_limit, args.threads)
                print("| " + " | ".join([name, str(graph.size), f"{ratio:g}", *row,
                                         " / ".join(PUBLISHED.get((name, ratio), ()))]) + " |", flush=True)


def run(graph: Any, ratio: float, strategy: str, backend: str, time_limit: float, threads: int) -> list[str]:
    first: list[tuple[float, float]] = []
    started = time.monotonic()
    load = os.getloadavg()[0]
    cpu_before = _children_cpu()

    def on_progress(progress: Progress) -> None:
        if progress.incumbent_cost is not None and not first:
            first.append((time.monotonic() - started, progress.incumbent_cost))

    options = {"path": "milp"} if strategy == "checkmate" else {}
    try:
        result = solve(graph, budget_ratio=ratio, strategy=strategy, backend=backend, time_limit_s=time_limit,
                       threads=threads, options=options, on_progress=on_progress, convergence=None)
    except RematError as e:
        return [f"{strategy} / {backend}", f"refused: {str(e).split(';')[0]}", "", "", "", "", f"{load:.1f}", "", ""]
    wall = time.monotonic() - started
    cpu = _children_cpu() - cpu_before
    base = graph.base_cost
    first_text = f"{first[0][0]:.1f} ({_pct(first[0][1] / base - 1)})" if first else "none"
    status = result.status.value + (f" (fallback {result.fallback})" if result.fallback else "")
    return [
        f"{strategy} / {result.backend or backend}",
        status,
        first_text,
        f"{wall:.1f}" if result.status.value == "optimal" else "-",
        f"{wall:.1f}",
        f"{cpu:.1f}",
        f"{load:.1f}",
        _pct(result.overhead - 1) if result.overhead is not None else "-",
        _pct(result.lower_bound / base - 1) if result.lower_bound is not None else "-",
    ]


def _pct(x: float) -> str:
    return f"{100 * x:.3f} %"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
