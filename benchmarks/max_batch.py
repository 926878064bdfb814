"""The largest batch that fits one device, as in the Checkmate paper's Figure 6.

For the paper's VGG-16, MobileNet, U-Net and ResNet-50 graphs (activations proportional to the
batch they were measured at; they carry no parameter memory), on a 16 GiB and an 80 GiB device,
with a step costing at most one extra forward pass: the largest batch of checkpoint-all, of each
baseline and of ``checkmate`` (its default settings, 20 s per batch tried), the ratios of
checkmate's batch to checkpoint-all's and to the best baseline's, and the search's wall time.

    python benchmarks/max_batch.py                      # about 20 minutes
    python benchmarks/max_batch.py --models vgg16 --devices 16GiB
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

from remat.schedules import BatchedGraph, Graph, format_size, parse_size
from remat.solvers import BASELINES, Convergence, MaxBatch, max_batch, sweep_strategies

GRAPHS = Path(__file__).resolve().parent / "graphs"

MODELS = {"vgg16": 256, "mobilenet": 512, "vgg_unet": 32, "resnet50": 256}
"""The batch each paper graph was measured at (its first layer's bytes over one sample's)."""


def recomputing_baselines(graph: Graph) -> list[str]:
    """The baselines that apply to ``graph`` but checkpoint-all (shown on its own) and checkpoint-last."""
    names = {s.name for s in BASELINES} - {"checkpoint-all", "checkpoint-last"}
    return [name for name in sweep_strategies(graph) if name in names]


def timed(batched: BatchedGraph, budget: int, strategy: str, time_limit_s: float) -> tuple[MaxBatch, float]:
    started = time.monotonic()
    options = {"convergence": Convergence()} if strategy == "checkmate" else {}
    answer = max_batch(batched, budget, strategy=strategy, time_limit_s=time_limit_s, **options)
    return answer, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--devices", default="16GiB,80GiB")
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds per batch tried")
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {args.time_limit:g} s per batch tried")
    print("| model | device | checkpoint-all | best baseline | checkmate (overhead) | vs checkpoint-all "
          "| vs best baseline | checkmate search |")
    print("|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        graph = Graph.from_path(str(GRAPHS / f"{model}.json"))
        batched = BatchedGraph.proportional(graph, batch=MODELS[model])
        for device in args.devices.split(","):
            budget = parse_size(device)
            everything, _ = timed(batched, budget, "checkpoint-all", args.time_limit)
            baselines = [timed(batched, budget, name, args.time_limit)[0] for name in recomputing_baselines(graph)]
            best = max(baselines, key=lambda a: a.batch)
            ours, took = timed(batched, budget, "checkmate", args.time_limit)
            overhead = f"{ours.result.overhead:.3f}" if ours.result and ours.result.overhead else "-"
            print(f"| {model} | {format_size(budget)} | {everything.batch} | {best.batch} ({best.strategy}) "
                  f"| {ours.batch} ({overhead}) | {ours.batch / max(everything.batch, 1):.2f}x "
                  f"| {ours.batch / max(best.batch, 1):.2f}x | {took:.0f} s, {len(ours.trials)} batches |", flush=True)


if __name__ == "__main__":
    main()
