"""Every baseline on every benchmark graph at several budget ratios, through the real CLI.

For each (graph, strategy, ratio) this runs ``remat solve GRAPH --budget-ratio R --strategy S --json``
in a subprocess, re-simulates the returned plan independently, and prints one Markdown table row:
status, overhead, peak / budget, the result's solve_time_s, and whether the plan is valid with the
cost and peak the result reports.

    python benchmarks/baselines.py                       # everything (a few minutes)
    python benchmarks/baselines.py --graphs vgg16 rl100 --ratios 0.8

With ``--timing GRAPH.json ...`` it measures instead how long each baseline's ``solve()`` takes and the
peak resident memory of the process that runs it (one fresh process per cell), and with ``--before REV``
the same cells on the sources of git revision REV too, side by side in one run (so both see the same
machine load), with the ratios and whether the two plans are the same statement for statement:

    python benchmarks/captured_graphs.py gpt-128 --out /tmp            # the 128-block GPT (about a minute)
    python benchmarks/baselines.py --timing benchmarks/graphs/captured/gpt-12.json /tmp/gpt-128.json \
        --ratios 0.8 --before 7df44c6
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from remat.schedules import Graph, InvalidPlan, Plan, StrategyNotApplicable, simulate
from remat.solvers import solve

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "benchmarks" / "graphs"
PACKAGES = ("schedules", "solvers", "report", "service", "clients")
"""remat's packages: top-level folders before the src layout, ``src/remat/<package>`` since."""
MEASURE_LIMIT_S = 3600.0
"""The time limit of a timed solve: long enough that no knob search is cut short on a loaded machine."""
BASELINES = ("checkpoint-all", "checkpoint-last", "chen-sqrtn", "chen-greedy", "griewank",
             "ap-sqrtn", "ap-greedy", "linearized-sqrtn", "linearized-greedy")
RATIOS = (1.0, 0.8, 0.6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", nargs="*", default=sorted(p.stem for p in GRAPHS.glob("*.json")))
    parser.add_argument("--strategies", nargs="*", default=BASELINES)
    parser.add_argument("--ratios", nargs="*", type=float, default=RATIOS)
    parser.add_argument("--timing", nargs="+", metavar="GRAPH.json", help="time each baseline on these graph files")
    parser.add_argument("--before", metavar="REV", help="with --timing, also time the sources of this git revision")
    parser.add_argument("--measure", nargs=3, metavar=("GRAPH.json", "STRATEGY", "RATIO"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure_here(args.measure[0], args.measure[1], float(args.measure[2]))))
        return
    print(_machine())
    if args.timing:
        _timing(args.timing, args.strategies, args.ratios, args.before)
        return
    print("| graph | strategy | ratio | status | overhead | peak / budget | solve time (s) | plan |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.graphs:
        graph = Graph.from_path(str(GRAPHS / f"{name}.json"))
        for strategy in args.strategies:
            for ratio in args.ratios:
                print(_row(name, graph, strategy, ratio), flush=True)
    print(f"\nLoad average at the end: {os.getloadavg()[0]:.1f} (solve times are wall clock).")


def _machine() -> str:
    return (f"Machine: {os.cpu_count()} CPUs (nproc), {_cpu_model()}, Python {platform.python_version()}; "
            f"date {time.strftime('%Y-%m-%d %H:%M %Z')}; load average at start {os.getloadavg()[0]:.1f}.\n")


def _timing(paths: list[str], strategies: list[str], ratios: list[float], before: str | None) -> None:
    """One row per (graph, strategy, ratio): wall and CPU seconds of solve() and the process's peak RSS,
    after (the installed sources) and, with ``before``, on that revision's sources, measured one after
    the other."""
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"after": None} if before is None else {"before": source_tree(before, Path(scratch)), "after": None}
        labels = list(trees)
        head = ["graph", "nodes", "strategy", "ratio", "status"]
        head += [f"{label}: {what}" for label in labels for what in ("wall / CPU (s)", "peak RSS (MB)")]
        head += ["wall, CPU ratio", "RSS ratio", "same plan"] if before else ["plan length"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for path in paths:
            size = Graph.from_path(path).size
            for strategy in strategies:
                for ratio in ratios:
                    cells = {label: _measure(path, strategy, ratio, tree) for label, tree in trees.items()}
                    print(_timing_row(Path(path).stem, size, strategy, ratio, cells), flush=True)
    print(f"\nLoad average at the end: {os.getloadavg()[0]:.1f}.")


def _timing_row(name: str, size: int, strategy: str, ratio: float, cells: dict[str, dict[str, Any]]) -> str:
    after = cells["after"]
    row = [name, f"{size:,}", strategy, str(ratio)]
    if not after["applicable"]:
        return "| " + " | ".join([*row, "not applicable"]) + " |"
    row.append(after["status"])
    for cell in cells.values():
        row += [f"{cell['wall_s']:.3f} / {cell['cpu_s']:.3f}", f"{cell['rss_peak_mb']:,.0f}"]
    if "before" in cells:
        old = cells["before"]
        row += [f"{_ratio(old['wall_s'], after['wall_s'])}, {_ratio(old['cpu_s'], after['cpu_s'])}",
                _ratio(old["rss_peak_mb"], after["rss_peak_mb"]),
                "yes" if old["plan_sha256"] == after["plan_sha256"] else f"NO ({old['status']}, {old['cost']})"]
    else:
        row.append(f"{after['plan_length']:,}")
    return "| " + " | ".join(row) + " |"


def _ratio(before: float, after: float) -> str:
    """before / after, or '-' where the time after is too short to divide by (under 10 ms)."""
    return f"{before / after:.1f}x" if after >= 0.01 else "-"


def _measure(path: str, strategy: str, ratio: float, tree: Path | None) -> dict[str, Any]:
    """Time one solve in a fresh process, on the sources in ``tree`` (None: the installed ones)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    done = subprocess.run([sys.executable, __file__, "--measure", path, strategy, str(ratio)], env=env,
                          capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _measure_here(path: str, strategy: str, ratio: float) -> dict[str, Any]:
    """What ``--measure`` prints: solve()'s wall and CPU seconds, this process's peak RSS, and the plan's digest."""
    graph = Graph.from_path(path)
    loaded = _peak_rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        result = solve(graph, budget_ratio=ratio, strategy=strategy, time_limit_s=MEASURE_LIMIT_S)
    except StrategyNotApplicable:
        return {"applicable": False}
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = _peak_rss_mb()
    plan = result.plan
    return {"applicable": True, "wall_s": wall, "cpu_s": cpu, "rss_loaded_mb": loaded, "rss_peak_mb": peak,
            "status": result.status.value, "cost": result.cost, "peak_memory": result.peak_memory,
            "plan_length": 0 if plan is None else len(plan), "plan_sha256": None if plan is None else _digest(plan)}


def _digest(plan: Plan) -> str:
    """sha256 of the plan's statements (op and node index), without writing its JSON."""
    codes = {"compute": 0, "free": 1, "offload": 2, "reload": 3}
    flat = np.fromiter((4 * v + codes[op] for op, v in plan.steps), dtype=np.int64, count=len(plan))
    return hashlib.sha256(flat.tobytes()).hexdigest()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def source_tree(rev: str, into: Path) -> Path:
    """remat's packages as of git revision ``rev``, laid out under ``into`` to be imported with PYTHONPATH."""
    src = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}:src/remat"], capture_output=True)
    for package in PACKAGES:
        target = into / "remat" / package
        target.mkdir(parents=True)
        folder = f"src/remat/{package}" if src.returncode == 0 else package
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, folder], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(target), f"--strip-components={folder.count('/') + 1}"],
                       input=archive.stdout, check=True)
    (into / "remat" / "__init__.py").write_text("")  # a regular package, found before the installed one
    return into


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
