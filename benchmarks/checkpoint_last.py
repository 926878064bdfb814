"""Where checkpoint-last's time goes on a large graph, phase by phase, and what bounds it from below.

checkpoint-last keeps only the newest value, so each stage recomputes the ancestors of what it
needs: its plan has O(n^2) statements. This prints, for each graph file, the seconds of each phase of
``solve(strategy="checkpoint-last")``: building the schedule (as entries), making its plan,
simulating it; the process's peak RSS at the end; then what the same numbers cost with array
operations (``plan_peak_and_cost``: the simulator's peak and cost without a plan), and how long merely
making that many plan statements and writing them as remat.plan/v1 JSON take.

    python benchmarks/captured_graphs.py gpt-128 --out /tmp
    python benchmarks/checkpoint_last.py benchmarks/graphs/captured/gpt-12.json /tmp/gpt-128.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from collections.abc import Callable
from typing import Any

from remat.schedules import Graph, plan_from_schedule, plan_peak_and_cost, simulate
from remat.solvers.baselines import checkpoint_last_schedule

JSON_SAMPLE = 100_000
"""Statements written to JSON to estimate the size of the whole plan's JSON."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", nargs="+", metavar="GRAPH.json")
    args = parser.parse_args()
    print(f"Machine: {os.cpu_count()} CPUs (nproc), Python {platform.python_version()}, {platform.machine()}; "
          f"date {time.strftime('%Y-%m-%d %H:%M %Z')}; load average at start {os.getloadavg()[0]:.1f}.\n")
    print("| graph | nodes | computes | plan statements | schedule (s) | plan (s) | simulate (s) | "
          "peak and cost by arrays (s) | statements alone (s) | plan JSON (est. MB, s) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.graphs:
        print(_row(Graph.from_path(path)), flush=True)
    print(f"\nLoad average at the end: {os.getloadavg()[0]:.1f}.")


def _row(graph: Graph) -> str:
    schedule, build_s = _timed(lambda: checkpoint_last_schedule(graph))
    plan, plan_s = _timed(lambda: plan_from_schedule(graph, schedule))
    sim, simulate_s = _timed(lambda: simulate(graph, plan))
    measured, arrays_s = _timed(lambda: plan_peak_and_cost(graph, schedule))
    assert measured == (sim.peak_memory, sim.cost), "plan_peak_and_cost disagrees with the simulator"
    _, statements_s = _timed(lambda: tuple((op, v) for op, v in plan.steps))
    sample = plan.steps[:JSON_SAMPLE]
    text, json_s = _timed(lambda: json.dumps([{"op": op, "node": graph.ids[v]} for op, v in sample]))
    scale = len(plan) / max(len(sample), 1)
    cells = [graph.name or "graph", f"{graph.size:,}", f"{schedule.compute_count:,}", f"{len(plan):,}",
             *(f"{s:.2f}" for s in (build_s, plan_s, simulate_s, arrays_s, statements_s)),
             f"{len(text) * scale / 2**20:,.0f} MB, {json_s * scale:.1f} s", f"{_peak_rss_mb():,.0f}"]
    return "| " + " | ".join(cells) + " |"


def _timed(step: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = step()
    return value, time.perf_counter() - started


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


if __name__ == "__main__":
    main()
