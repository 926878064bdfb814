"""The checkmate strategy on real-size graphs against the published numbers.

For every graph of benchmarks/graphs (the Checkmate paper's and Moccasin's) and of
benchmarks/graphs/captured (real PyTorch training steps, see captured_graphs.py), at each budget
ratio: ``solve(strategy="checkmate")`` with the default path choice (``anneal`` above 100 nodes,
``anneal-milp`` below), a time limit and a thread count, as a user gets it. Each row gives the
overhead of the returned (simulated) plan, the proved lower bound as an overhead, the status, when
the first plan that fits and the final plan were reported (progress events, seconds since the
start), when the plan came within 1 % and 0.1 % of the final one, the best baseline's overhead and
the published Checkmate-MILP and Moccasin results; then the same solve stopping on convergence
(:class:`remat.solvers.Convergence`, the PyTorch client's default): its overhead, bound and time, and
how many points its plan lies above the one run to the limit.

    python benchmarks/large.py                                   # everything: about 45 minutes
    python benchmarks/large.py --graphs rl1000,resnet50 --ratios 0.8 --time-limit 60
    python benchmarks/large.py --extra /tmp/generated --graphs lstm-96,moe-8   # graphs captured on request
    python benchmarks/large.py --limit-from OUT.md               # the converged solves against an earlier output's

The run to the limit does not depend on the convergence rule: ``--limit-from`` takes its columns from an
earlier output of this script (its table rows) and solves only with the rule.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

from published import PUBLISHED

from remat.schedules import Graph, resolve_budget
from remat.solvers import Convergence, Progress, SolveContext, solve
from remat.solvers.baselines import best_baseline

GRAPHS = Path(__file__).resolve().parent / "graphs"


def graph_paths(names: list[str] | None, extra: Path | None = None) -> list[Path]:
    paths = sorted(GRAPHS.glob("*.json"), key=lambda p: Graph.from_path(str(p)).size) \
        + sorted((GRAPHS / "captured").glob("*.json")) + (sorted(extra.glob("*.json")) if extra else [])
    return [p for p in paths if names is None or p.stem in names]


def percent(value: float | None, base: float) -> str:
    return "-" if value is None else f"{100 * (value / base - 1):.3f} %"


def run(path: Path, ratio: float, time_limit_s: float, threads: int, earlier: dict[tuple[str, str], list[str]]) -> str:
    g = Graph.from_path(str(path))
    budget = resolve_budget(g, budget_ratio=ratio)
    published = PUBLISHED.get((path.stem, ratio), ("", ""))
    head = f"| {path.stem} | {g.size} | {ratio} |"
    if budget < g.min_feasible_budget:
        return f"{head} infeasible (under the smallest feasible budget) {'| ' * 13}{' | '.join(published)} |"
    limit = earlier.get((path.stem, str(ratio))) or to_the_limit(g, budget, time_limit_s, threads)
    converged = solve(g, budget=budget, strategy="checkmate", time_limit_s=time_limit_s, threads=threads,
                      convergence=Convergence())
    above = "-" if limit[0] == "-" or converged.cost is None else \
        f"{100 * (converged.cost / g.base_cost - 1) - float(limit[0].rstrip(' %')):+.2f}"
    return (f"{head} {' | '.join(limit)} | {percent(converged.cost, g.base_cost)} | "
            f"{percent(converged.lower_bound, g.base_cost)} | {converged.solve_time_s:.1f} | {above} | "
            f"{' | '.join(published)} |")


def to_the_limit(g: Graph, budget: int, time_limit_s: float, threads: int) -> list[str]:
    """The columns of the solve run to its limit: overhead, bound, status, when plans came, the best baseline."""
    events: list[Progress] = []
    result = solve(g, budget=budget, strategy="checkmate", time_limit_s=time_limit_s, threads=threads,
                   on_progress=events.append, convergence=None)
    fitting = [p for p in events if p.incumbent_cost is not None]
    first = f"{fitting[0].elapsed_s:.2f}" if fitting else "-"
    within = [reached(fitting, result.cost, tolerance) for tolerance in (1e-9, 1e-2, 1e-3)]
    best = best_baseline(g, budget, SolveContext())
    status = result.status.value + (f" ({result.fallback})" if result.fallback else "")
    return [percent(result.cost, g.base_cost), percent(result.lower_bound, g.base_cost), status, first, *within[1:],
            within[0], f"{result.solve_time_s:.1f}",
            percent(best.cost, g.base_cost) if best is not None else "none fits"]


def earlier_runs(path: Path | None) -> dict[tuple[str, str], list[str]]:
    """The run-to-the-limit columns of an earlier output's rows, by graph and ratio."""
    rows: dict[tuple[str, str], list[str]] = {}
    for line in path.read_text().splitlines() if path else []:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 18 and cells[3].endswith("%"):
            rows[(cells[0], cells[2])] = cells[3:12]
    return rows


def reached(fitting: list[Progress], final: float | None, tolerance: float) -> str:
    """When the incumbent first came within ``tolerance`` (a fraction) of the final cost, in seconds."""
    at = next((p.elapsed_s for p in fitting if final is not None and p.incumbent_cost is not None
               and p.incumbent_cost <= final * (1 + tolerance) + 1e-9), None)
    return "-" if at is None else f"{at:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", help="comma-separated graph names (default: all)")
    parser.add_argument("--ratios", default="0.9,0.8,0.6")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--extra", type=Path, help="a folder of more graphs (captured_graphs.py --out DIR)")
    parser.add_argument("--limit-from", type=Path, help="take the runs to the limit from this earlier output")
    args = parser.parse_args()
    names = args.graphs.split(",") if args.graphs else None
    ratios = [float(r) for r in args.ratios.split(",")]
    print(f"{platform.node()}, {os.cpu_count()} CPUs, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
          f"time limit {args.time_limit:g} s, {args.threads} threads; load average at start "
          f"{os.getloadavg()[0]:.1f}\n")
    print("| graph | nodes | r | overhead | lower bound | status | first plan (s) | within 1 % (s) | within 0.1 % (s) "
          "| final plan (s) | time (s) | best baseline | converged | its bound | converged (s) | converged - limit "
          "(points) | Checkmate MILP (published) | Moccasin (published) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    started = time.monotonic()
    earlier = earlier_runs(args.limit_from)
    for path in graph_paths(names, args.extra):
        for ratio in ratios:
            print(run(path, ratio, args.time_limit, args.threads, earlier), flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}; {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
