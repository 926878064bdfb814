"""checkmate on large captured graphs as users get it: the default solve, which stops once converged, and the
same solve run to its time limit, each in a fresh process.

Each row gives the status, the overhead of the returned (simulated) plan, the lower bound as an overhead,
when the first plan that fits was reported, how long the solve took and the peak resident memory of its
processes (the solve's own and its helpers'); an answer without a plan gives the peak of the leanest plan
its search reached, as a share of checkpoint-all's peak. With ``--before REV`` the same cells run on the sources of
git revision REV too, one right after the other, so that both see the same load; ``--repeat K`` runs each
cell K times, alternating the revisions.

    python benchmarks/captured_graphs.py gpt-128 --out /tmp            # the 128-block GPT (about a minute)
    python benchmarks/scale.py /tmp/gpt-128.json --ratios 0.8 0.5 --time-limit 30 --before HEAD~1
    python benchmarks/scale.py benchmarks/graphs/captured/*.json --modes converged --repeat 3 --before HEAD~1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from baselines import source_tree
from deepen import LIMITS

from remat.schedules import Graph
from remat.solvers import DEFAULT_CONVERGENCE, Progress, solve

MODES = {"converged": DEFAULT_CONVERGENCE, "to the limit": None}
"""The solve's convergence rule in each mode: the default, and none."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", nargs="*", metavar="GRAPH.json")
    parser.add_argument("--ratios", nargs="+", type=float, default=[0.8, 0.5])
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--before", metavar="REV", help="also solve on the sources of this git revision")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="which solves to run")
    parser.add_argument("--repeat", type=int, default=1, help="rows per cell and revision (the chains differ by run)")
    parser.add_argument("--measure", nargs=4, metavar=("GRAPH.json", "RATIO", "MODE", "LIMIT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        path, ratio, mode, limit = args.measure
        print(json.dumps(_measure_here(path, float(ratio), mode, float(limit))))
        return
    print(f"vm, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M %Z')}; time limit {args.time_limit:g} s; "
          f"load average at start {os.getloadavg()[0]:.1f}\n")
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"after": None} if args.before is None else {"before": source_tree(args.before, Path(scratch)),
                                                              "after": None}
        head = ["graph", "nodes", "r", "solve", "revision", "status", "overhead", "lower bound", "first plan (s)",
                "time (s)", "peak RSS (MB)", "leanest plan (of the peak)"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for path in args.graphs:
            graph = Graph.from_path(path, limits=LIMITS)
            for ratio in args.ratios:
                for mode in args.modes:
                    for _ in range(args.repeat):
                        for label, tree in trees.items():
                            cell = _measure(path, ratio, mode, args.time_limit, tree)
                            print(_row(Path(path).stem, graph, ratio, mode, label, cell), flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


def _row(name: str, graph: Graph, ratio: float, mode: str, label: str, cell: dict[str, Any]) -> str:
    def overhead(cost: float | None) -> str:
        return "-" if cost is None else f"{100 * (cost / graph.base_cost - 1):.3f} %"

    first = "-" if cell["first_s"] is None else f"{cell['first_s']:.2f}"
    leanest = "-" if cell["smallest_peak"] is None else f"{cell['smallest_peak'] / graph.checkpoint_all_peak:.3f}"
    return (f"| {name} | {graph.size:,} | {ratio} | {mode} | {label} | {cell['status']} | {overhead(cell['cost'])} | "
            f"{overhead(cell['lower_bound'])} | {first} | {cell['time_s']:.1f} | {cell['rss_mb']:,.0f} | {leanest} |")


def _measure(path: str, ratio: float, mode: str, limit: float, tree: Path | None) -> dict[str, Any]:
    """One solve in a fresh process, on the sources in ``tree`` (None: the installed ones)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    done = subprocess.run([sys.executable, __file__, "--measure", path, str(ratio), mode, str(limit)], env=env,
                          capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _measure_here(path: str, ratio: float, mode: str, limit: float) -> dict[str, Any]:
    """What ``--measure`` prints: the result's numbers, the first fitting plan's time, the processes' peak RSS."""
    graph = Graph.from_path(path, limits=LIMITS)
    events: list[Progress] = []
    result = solve(graph, budget_ratio=ratio, strategy="checkmate", time_limit_s=limit, threads=os.cpu_count(),
                   on_progress=events.append, convergence=MODES[mode])
    first = next((p.elapsed_s for p in events if p.incumbent_cost is not None), None)
    rss_kb = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return {"status": result.status.value, "cost": result.cost, "lower_bound": result.lower_bound,
            "first_s": first, "time_s": result.solve_time_s, "rss_mb": rss_kb / 1024,
            "smallest_peak": result.smallest_peak}


if __name__ == "__main__":
    main()
