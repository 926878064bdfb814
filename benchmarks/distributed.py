"""remat under DistributedDataParallel, side by side with DDP's own ways, per rank: peak, step time, solves.

A GPT-2 of 8 blocks (transformers, from its config, random weights) trains on two gloo processes on
the CPU, each rank on batches of its own. Per rank, in one run: DDP over the eager model; DDP over
the model with transformers' checkpointing (``gradient_checkpointing_enable()``); and remat asked
with the bytes that checkpointing reaches on that rank and nothing else, both ways in:
``DDP(rematerialize(model, batch, budget=...))`` and ``torch.compile(DDP(model), backend=backend(budget=...))``.

The peak is the rank's step memory, counted to the byte (:class:`remat.clients.torch.LiveBytes`):
parameters, DDP's gradient buckets and the batch, resident, plus what the step allocates above them.
Times are medians of the CPU time of each rank's process (one intra-op thread each), which leaves out
the time a rank waits for the other's all-reduce. ``solves`` counts the plans each rank solved
(against plans followed from another source); ``graphs`` the graphs planned for the step.

    python benchmarks/distributed.py              # two ranks, 5 timed steps per variant
    python benchmarks/distributed.py --steps 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from remat.clients.torch import activation_peak, backend, rematerialize, time_call
from remat.schedules import RematError, format_size

WORLD = 2
WRAPPED = "DDP(rematerialize()) at checkpointing's bytes"
COMPILED = "torch.compile(DDP(), backend=remat) at the same bytes"
BLOCKS, WIDTH, HEADS, VOCAB, CONTEXT, BATCH = 8, 128, 4, 1024, 128, 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_rank, args=(out, args.steps), nprocs=WORLD)
        ranks = [json.loads(Path(out, f"rank-{r}.json").read_text()) for r in range(WORLD)]
    print(f"# DDP, {WORLD} gloo ranks: GPT-2 {BLOCKS} x {WIDTH}, batch {BATCH} x {CONTEXT} per rank "
          f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__})")
    print("| rank | variant | step peak | / checkpointing | step time | / eager | graphs | solves |")
    print("|---|---|---|---|---|---|---|---|")
    for rank, rows in enumerate(ranks):
        eager, checkpointing = rows[0], rows[1]
        for row in rows:
            if "refused" in row:
                print(f"| {rank} | {row['variant']}: refused ({row['refused']}) | | | | | | |")
                continue
            print(f"| {rank} | {row['variant']} | {format_size(row['peak'])} | "
                  f"{row['peak'] / checkpointing['peak']:.4f} | {row['time_s'] * 1e3:.1f} ms | "
                  f"{row['time_s'] / eager['time_s']:.3f} | {row.get('graphs', '')} | {row.get('solves', '')} |")
    solves = sum(row.get("solves", 0) for rows in ranks for row in rows)
    print(f"\nsolves across ranks: {solves}")


def _model(checkpointing: bool = False) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=BLOCKS, n_embd=WIDTH, n_head=HEADS, vocab_size=VOCAB,
                                     n_positions=CONTEXT, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    return model


def _batch(rank: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (BATCH, CONTEXT), generator=torch.Generator().manual_seed(rank))
    return {"input_ids": ids, "labels": ids}


def _row(variant: str, module: nn.Module, model: nn.Module, batch: dict[str, torch.Tensor], steps: int,
         **extra: Any) -> dict[str, Any]:
    """One variant on this rank: its step peak (resident state and batch, plus what the step allocates) and time."""
    def step() -> None:
        model.zero_grad(set_to_none=True)
        module(**batch).loss.backward()

    for _ in range(3):  # compiled, planned, and DDP's buckets rebuilt in the order gradients come
        step()
    model.zero_grad(set_to_none=True)
    above = activation_peak(lambda: module(**batch).loss.backward(), model.parameters())
    state = sum(p.numel() * p.element_size() for p in model.parameters())
    inputs = sum(t.numel() * t.element_size() for t in batch.values())
    peak = 2 * state + inputs + above  # parameters and DDP's buckets (a gradient's worth), the batch, the step
    time = time_call(step, device=torch.device("cpu"), repeats=steps, warmup=0, cpu_time=True)
    return {"variant": variant, "peak": peak, "time_s": time.median_s, **extra}


def _solves(plans: Any) -> dict[str, int]:
    plans = list(plans)
    return {"graphs": len(plans), "solves": sum(p.source == "solved" for p in plans)}


def _rank(rank: int, out: str, steps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=WORLD)
    batch = _batch(rank)
    rows = []
    for variant, make in _baselines().items():
        model = make()
        rows.append(_row(variant, DDP(model), model, batch, steps))
    checkpointing = rows[-1]["peak"]

    rows.append(_refused_or(WRAPPED, lambda: _wrapped(batch, checkpointing, steps)))
    rows.append(_refused_or(COMPILED, lambda: _compiled(batch, checkpointing, steps)))
    Path(out, f"rank-{rank}.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def _wrapped(batch: dict[str, torch.Tensor], budget: int, steps: int) -> dict[str, Any]:
    model = _model()
    module = rematerialize(model, batch, budget=budget, progress=False, cache=False)
    wrapped = DDP(module)
    return {**_row(WRAPPED, wrapped, model, batch, steps), **_solves(module.plans)}


def _compiled(batch: dict[str, torch.Tensor], budget: int, steps: int) -> dict[str, Any]:
    model = _model()
    remat = backend(budget=budget, progress=False, cache=False)
    compiled = torch.compile(DDP(model), backend=remat, dynamic=False)
    return {**_row(COMPILED, compiled, model, batch, steps), **_solves(remat.planned)}


def _refused_or(label: str, variant: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The variant's row, or the first sentence of remat's refusal in its place."""
    try:
        return variant()
    except RematError as e:
        return {"variant": label, "refused": str(e).split(". ")[0]}


def _baselines() -> dict[str, Callable[[], nn.Module]]:
    return {"DDP, eager": _model, "DDP, transformers' checkpointing": lambda: _model(checkpointing=True)}


if __name__ == "__main__":
    sys.exit(main())
