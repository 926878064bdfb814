"""Offloading against rematerialization on paper and captured graphs, over an H100's, an A100's and a GH200's host link.

For each graph and budget (a ratio of the checkpoint-all peak, or the graph's floor: the smallest budget
any plan meets, with or without transfers), and each device (its FLOP rate and its
host link profile), one row: the overhead (cost / base cost of the returned, simulated plan), status,
peak / budget, host peak memory and solve time of

- ``checkmate`` (remat only: no transfers, so one solve serves both devices), with a short time limit
  and ``convergence=Convergence()``, as the PyTorch client runs it;
- ``offload-all`` and ``offload-window``;
- ``checkmate-offload`` when the registry has it (same limits as ``checkmate``);

and a lower bound on the overhead of any plan that recomputes nothing (:func:`copy_bound`), to say how
much of what the offloading strategies pay the link itself imposes.

Costs become seconds as follows (``seconds_per_cost_unit``). fcn8's costs are FLOPs (its block1_conv2
costs 2 * 9 * 64 * 64 FLOPs per output element), taken at an assumed sustained rate: the device's dense
TF32 peak (the graphs hold fp32 values) derated to :data:`UTILIZATION`. The other graphs' units cannot be
converted (``profiled`` readings of unknown unit, ``unit`` costs, or roofline seconds for remat's small
``cpu`` profile), so each is scaled to make its step produce its values (the bytes of all its nodes) at
the rate fcn8's does on the same device: what decides whether copies hide is that rate against the
link's, and it is then the same for every graph, which differ by their structure only.

    python benchmarks/offload.py                 # 6 graphs x 4 budgets x 3 devices: about 15 minutes
    python benchmarks/offload.py --quick         # 2 graphs, 2 ratios, 3 s limits
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from remat.schedules import TRANSFER_PROFILES, Graph, Transfer, checkpoint_all_plan, resolve_budget, simulate
from remat.solvers import STRATEGIES, Convergence, Result, solve

GRAPHS = Path(__file__).resolve().parent / "graphs"
DEFAULT_GRAPHS = "resnet50,mobilenet,vgg_unet,segnet,captured/resnet-8x3,captured/gpt-12"
QUICK_GRAPHS = "mobilenet,captured/gpt-12"

UTILIZATION = 0.4
"""The fraction of a device's dense TF32 peak a training step sustains (assumed)."""

CALIBRATION = "fcn8"
"""The graph whose costs are FLOPs, from which every other graph's time scale is derived."""


@dataclass(frozen=True)
class Device:
    name: str
    tf32_flops_per_s: float
    """Dense TF32 tensor-core peak from the datasheet (no sparsity)."""
    link: str

    @property
    def flops_per_s(self) -> float:
        return self.tf32_flops_per_s * UTILIZATION


DEVICES = (Device("H100 SXM", 494.7e12, "pcie5-x16"), Device("A100 SXM", 156e12, "pcie4-x16"),
           Device("GH200", 494.7e12, "nvlink-c2c"))
"""An H100 and an A100 on PCIe hosts, and the H100 of a Grace Hopper superchip on NVLink-C2C."""


def seconds_per_byte(device: Device) -> float:
    """Seconds of compute per byte of values produced: fcn8's step at the device's sustained rate."""
    fcn8 = Graph.from_path(str(GRAPHS / f"{CALIBRATION}.json"))
    return fcn8.base_cost / device.flops_per_s / float(fcn8.memory.sum())


def seconds_per_cost_unit(graph: Graph, device: Device) -> float:
    """How long one of ``graph``'s cost units lasts on ``device`` (module docstring)."""
    if graph.name == CALIBRATION:
        return 1 / device.flops_per_s
    return float(graph.memory.sum()) * seconds_per_byte(device) / graph.base_cost


def copy_bound(graph: Graph, budget: int, transfer: Transfer) -> float:
    """A lower bound on cost / base cost for plans that compute each node once, in the graph's order.

    While node v is computed, every value that checkpoint-all holds is still to be read (or is v's dep or
    v); what exceeds the budget must have been copied out before v starts, one copy stream, and copied back
    after v ends, the other: at least twice that many bytes' copy time plus v's cost, and never less than
    the computes themselves.
    """
    plan = checkpoint_all_plan(graph)
    held = simulate(graph, plan).timeline.tolist()
    cost = graph.cost.tolist()
    worst = max((2 * transfer.duration(held[k] - budget) + cost[v]
                 for k, (op, v) in enumerate(plan.steps) if op == "compute" and held[k] > budget), default=0.0)
    return max(graph.base_cost, worst) / graph.base_cost


def budget_at(graph: Graph, ratio: str) -> int:
    """The budget a ``--ratios`` entry names: a fraction of the checkpoint-all peak, or ``floor``."""
    return graph.min_feasible_budget if ratio == "floor" else resolve_budget(graph, budget_ratio=float(ratio))


def ratio_label(graph: Graph, ratio: str) -> str:
    """The table's r column: the fraction, with the floor's own in parentheses."""
    return f"floor ({graph.min_feasible_budget / graph.checkpoint_all_peak:.3f})" if ratio == "floor" else ratio


def cell(result: Result, with_host: bool) -> str:
    """One strategy's outcome: overhead, status, peak / budget, host peak and solve time."""
    if result.simulation is None:
        return f"{result.status.value} ({result.solve_time_s:.1f} s)"
    host = f", host {result.host_peak_memory / 1e9:.2f} GB" if with_host else ""
    return (f"{result.overhead:.3f} {result.status.value} (peak {result.peak_memory / result.budget:.2f}{host}, "
            f"{result.solve_time_s:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", help=f"comma-separated, under benchmarks/graphs (default: {DEFAULT_GRAPHS})")
    parser.add_argument("--ratios", default="0.5,0.3,0.2,floor",
                        help="fractions of the checkpoint-all peak; 'floor' is the graph's min_feasible_budget")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds for checkmate (and checkmate-offload)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_GRAPHS} at 0.5 and 0.3, 3 s limits")
    args = parser.parse_args()
    if args.quick:
        args.graphs, args.ratios, args.time_limit = args.graphs or QUICK_GRAPHS, "0.5,0.3", 3.0
    names = (args.graphs or DEFAULT_GRAPHS).split(",")
    ratios = args.ratios.split(",")
    offloading = [s for s in ("offload-all", "offload-window", "checkmate-offload") if s in STRATEGIES]
    limits = {"time_limit_s": args.time_limit, "threads": args.threads, "convergence": Convergence()}
    print(f"{platform.node()}, {os.cpu_count()} CPUs, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; checkmate time limit "
          f"{args.time_limit:g} s with Convergence(), {args.threads} threads; load average at start "
          f"{os.getloadavg()[0]:.1f}\n")
    for device in DEVICES:
        link = TRANSFER_PROFILES[device.link].bandwidth_bytes_per_s
        print(f"- {device.name}: {device.tf32_flops_per_s / 1e12:g} TFLOP/s dense TF32 x {UTILIZATION} = "
              f"{device.flops_per_s / 1e12:g} TFLOP/s; values produced at "
              f"{1 / seconds_per_byte(device) / 1e9:.0f} GB/s of compute; link {device.link}, "
              f"{link / 1e9:g} GB/s each way")
    print()
    print(f"| graph | nodes | r | device | checkmate (remat only) | no-recompute bound | {' | '.join(offloading)} |")
    print(f"|---|---|---|---|---|---|{'---|' * len(offloading)}")
    started = time.monotonic()
    for name in names:
        graph = Graph.from_path(str(GRAPHS / f"{name}.json"))
        for ratio in ratios:
            budget = budget_at(graph, ratio)
            head = f"| {Path(name).name} | {graph.size} | {ratio_label(graph, ratio)} |"
            if budget < graph.min_feasible_budget:
                print(f"{head} all | infeasible: under the smallest feasible budget "
                      f"({graph.min_feasible_budget / graph.checkpoint_all_peak:.3f} of the peak) | |"
                      f"{' |' * len(offloading)}", flush=True)
                continue
            remat_only = cell(solve(graph, budget=budget, strategy="checkmate", **limits), with_host=False)
            for device in DEVICES:
                unit = seconds_per_cost_unit(graph, device)
                transfer = Transfer.from_profile(device.link, seconds_per_cost_unit=unit)
                cells = [cell(solve(graph, budget=budget, strategy=s, transfer=transfer, **limits), with_host=True)
                         for s in offloading]
                bound = copy_bound(graph, budget, transfer)
                print(f"{head} {device.name} | {remat_only} | {bound:.3f} | {' | '.join(cells)} |", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}; {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
