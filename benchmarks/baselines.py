"""Every baseline on every benchmark graph at several budget ratios, through the real CLI.

For each (graph, strategy, ratio) this runs ``remat solve GRAPH --budget-ratio R --strategy S --json``
in a subprocess, re-simulates the returned plan independently, and prints one Markdown table row:
status, overhead, peak / budget, the result's solve_time_s, and whether the plan is valid with the
cost and peak the result reports.

    python benchmarks/baselines.py                       # everything (a few minutes)
    python benchmarks/baselines.py --graphs vgg16 rl100 --ratios 0.8
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from remat.schedules import Graph, InvalidPlan, Plan, simulate

GRAPHS = Path(__file__).resolve().parent / "graphs"
BASELINES = ("checkpoint-all", "checkpoint-last", "chen-sqrtn", "chen-greedy", "griewank",
             "ap-sqrtn", "ap-greedy", "linearized-sqrtn", "linearized-greedy")
RATIOS = (1.0, 0.8, 0.6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", nargs="*", default=sorted(p.stem for p in GRAPHS.glob("*.json")))
    parser.add_argument("--strategies", nargs="*", default=BASELINES)
    parser.add_argument("--ratios", nargs="*", type=float, default=RATIOS)
    args = parser.parse_args()
    print(f"Machine: {os.cpu_count()} CPUs (nproc), {_cpu_model()}, Python {platform.python_version()}; "
          f"date {time.strftime('%Y-%m-%d %H:%M %Z')}; load average at start {os.getloadavg()[0]:.1f}.\n")
    print("| graph | strategy | ratio | status | overhead | peak / budget | solve time (s) | plan |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.graphs:
        graph = Graph.from_path(str(GRAPHS / f"{name}.json"))
        for strategy in args.strategies:
            for ratio in args.ratios:
                print(_row(name, graph, strategy, ratio), flush=True)
    print(f"\nLoad average at the end: {os.getloadavg()[0]:.1f} (solve times are wall clock).")


def _row(name: str, graph: Graph, strategy: str, ratio: float) -> str:
    cmd = [sys.executable, "-m", "remat.clients.cli", "solve", str(GRAPHS / f"{name}.json"),
           "--budget-ratio", str(ratio), "--strategy", strategy, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if not done.stdout.strip():
        reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        return f"| {name} | {strategy} | {ratio} | not applicable | | | | {_short(reason)} |"
    doc = json.loads(done.stdout)
    cells = [name, strategy, str(ratio), doc["status"], "", "", f"{doc['solve_time_s']:.3f}", _verdict(graph, doc)]
    if doc["plan"] is not None:
        cells[4] = f"{doc['overhead']:.3f}"
        cells[5] = f"{doc['peak_memory'] / doc['budget']:.3f}"
    return "| " + " | ".join(cells) + " |"


def _verdict(graph: Graph, doc: dict[str, Any]) -> str:
    """'valid' when the plan re-simulates to the reported cost and peak; why not otherwise."""
    if doc["plan"] is None:
        return "none (budget below the smallest feasible)" if doc["status"] == "infeasible" else "none"
    try:
        sim = simulate(graph, Plan.from_json(graph, doc["plan"]))
    except InvalidPlan as e:
        return f"INVALID: {e}"
    if sim.cost != doc["cost"] or sim.peak_memory != doc["peak_memory"]:
        return f"MISREPORTED: simulated cost {sim.cost}, peak {sim.peak_memory}"
    return "valid"


def _short(message: str) -> str:
    text = message.removeprefix("remat: error: ")
    return text.split(";")[0].replace("|", "/")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
