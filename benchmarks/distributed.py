"""remat under DistributedDataParallel and FSDP2, side by side with the engines' own ways, per rank: peak, step
time, solves.

A GPT-2 of 8 blocks (transformers, from its config, random weights) trains on two gloo processes on
the CPU, each rank on batches of its own.

DDP, per rank, in one run: DDP over the eager model; DDP over the model with transformers' checkpointing
(``gradient_checkpointing_enable()``); and remat asked with the bytes that checkpointing reaches on that rank and
nothing else, both ways in: ``DDP(rematerialize(model, batch, budget=...))`` and ``torch.compile(DDP(model),
backend=backend(budget=...))``. The peak is the rank's step memory, counted to the byte
(:class:`remat.clients.torch.LiveBytes`): parameters, DDP's gradient buckets and the batch, resident, plus what the
step allocates above them.

FSDP2, per rank: the model sharded with ``fully_shard`` per block and then whole (as torchtitan and accelerate
shard), eager; the same with transformers' checkpointing per block (non-reentrant, its default); and
``torch.compile(model, backend=backend(budget=...))`` asked with the bytes checkpointing reaches on that rank and
twice as many (FSDP2's hooks split the step into a graph per block, which share the budget), and with
``activation_budget`` fractions (each graph's own activations). The peak counts the rank's
shards and the batch, resident, plus what the step allocates, FSDP2's gathered parameters included (LiveBytes sees
the storages FSDP2 resizes); ``plan`` is the most any graph's plan peaks at plus what the graphs before it hold.

Times are medians of the CPU time of each rank's process (one intra-op thread each), which leaves out
the time a rank waits for the other's collectives. ``solves`` counts the plans each rank solved
(against plans followed from another source); ``graphs`` the graphs planned for the step.

    python benchmarks/distributed.py              # two ranks, DDP then FSDP2, 5 timed steps per variant
    python benchmarks/distributed.py --engines fsdp2 --steps 3
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

from remat.clients.torch import LiveBytes, activation_peak, backend, rematerialize, time_call
from remat.schedules import RematError, format_size

WORLD = 2
WRAPPED = "DDP(rematerialize()) at checkpointing's bytes"
COMPILED = "torch.compile(DDP(), backend=remat) at the same bytes"
SHARDED = "torch.compile(FSDP2, backend=remat) at {scale:g} x checkpointing's bytes"
SHARDED_SCALES = (1.0, 2.0)
"""The FSDP2 byte budgets remat is asked for, in checkpointing's bytes: its graphs, a block each, share the budget in
the order they run, each planned within what the ones before it leave."""
SHARDED_FRACTION = "torch.compile(FSDP2, backend=remat), activation_budget={fraction:g}"
SHARDED_FRACTIONS = (0.25, 0.5)
"""The FSDP2 activation budgets remat is asked for: a fraction of each graph's own activations."""
BLOCKS, WIDTH, HEADS, VOCAB, CONTEXT, BATCH = 8, 128, 4, 1024, 128, 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant")
    parser.add_argument("--engines", nargs="+", choices=sorted(ENGINES), default=["ddp", "fsdp2"])
    args = parser.parse_args()
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    for engine in args.engines:
        with tempfile.TemporaryDirectory() as out:
            mp.spawn(_rank, args=(engine, out, args.steps), nprocs=WORLD)
            ranks = [json.loads(Path(out, f"rank-{r}.json").read_text()) for r in range(WORLD)]
        _table(engine, ranks, machine)


def _table(engine: str, ranks: list[list[dict[str, Any]]], machine: str) -> None:
    print(f"# {ENGINES[engine][0]}, {WORLD} gloo ranks: GPT-2 {BLOCKS} x {WIDTH}, batch {BATCH} x {CONTEXT} per rank "
          f"({machine})")
    print("| rank | variant | step peak | / checkpointing | plan | budget | step time | / eager | graphs | solves |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rank, rows in enumerate(ranks):
        eager, checkpointing = rows[0], rows[1]
        for row in rows:
            if "refused" in row:
                print(f"| {rank} | {row['variant']}: refused ({row['refused']}) | | | | | | | | |")
                continue
            plan, budget = (format_size(row[k]) if k in row else "" for k in ("planned", "budget"))
            print(f"| {rank} | {row['variant']} | {format_size(row['peak'])} | "
                  f"{row['peak'] / checkpointing['peak']:.4f} | {plan} | {budget} | {row['time_s'] * 1e3:.1f} ms | "
                  f"{row['time_s'] / eager['time_s']:.3f} | {row.get('graphs', '')} | {row.get('solves', '')} |")
    solves = sum(row.get("solves", 0) for rows in ranks for row in rows)
    print(f"\nsolves across ranks: {solves}\n")


def _model(checkpointing: bool = False) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=BLOCKS, n_embd=WIDTH, n_head=HEADS, vocab_size=VOCAB,
                                     n_positions=CONTEXT, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    return model


def _sharded(checkpointing: bool = False) -> nn.Module:
    """The model sharded per block, then whole, as torchtitan and accelerate shard it."""
    from torch.distributed.fsdp import fully_shard

    model = _model(checkpointing)
    for block in model.transformer.h:
        fully_shard(block)
    return fully_shard(model)


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
    # parameters and DDP's buckets (a gradient's worth), the batch, the step
    peak = 2 * state + _batch_bytes(batch) + above
    time = time_call(step, device=torch.device("cpu"), repeats=steps, warmup=0, cpu_time=True)
    return {"variant": variant, "peak": peak, "time_s": time.median_s, **extra}


def _batch_bytes(batch: dict[str, torch.Tensor]) -> int:
    """Bytes of the batch's storages, each once (the labels are the input ids)."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in batch.values()}.values())


def _shared_budget_peak(planned: Any, budget: int) -> int:
    """The step's planned peak when its graphs share ``budget``: the most any graph's plan peaks at plus what the
    graphs planned before it hold (the budget less what it left that graph)."""
    return max(p.simulation.peak_memory + budget - p.asked for p in planned)


def _solves(plans: Any) -> dict[str, int]:
    plans = list(plans)
    return {"graphs": len(plans), "solves": sum(p.source == "solved" for p in plans)}


def _rank(rank: int, engine: str, out: str, steps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=WORLD)
    rows = ENGINES[engine][1](_batch(rank), steps)
    Path(out, f"rank-{rank}.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def _data_parallel(batch: dict[str, torch.Tensor], steps: int) -> list[dict[str, Any]]:
    rows = []
    for variant, make in _baselines().items():
        model = make()
        rows.append(_row(variant, DDP(model), model, batch, steps))
    checkpointing = rows[-1]["peak"]
    rows.append(_refused_or(WRAPPED, lambda: _wrapped(batch, checkpointing, steps)))
    rows.append(_refused_or(COMPILED, lambda: _compiled(batch, checkpointing, steps)))
    return rows


def _fully_sharded(batch: dict[str, torch.Tensor], steps: int) -> list[dict[str, Any]]:
    rows = []
    for variant, checkpointing in (("FSDP2, eager", False), ("FSDP2, transformers' checkpointing per block", True)):
        model = _sharded(checkpointing)
        rows.append(_sharded_row(variant, model, model, batch, steps))
    for scale in SHARDED_SCALES:
        budget = round(scale * rows[1]["peak"])
        variant = SHARDED.format(scale=scale)
        rows.append(_refused_or(variant, lambda v=variant, b=budget: _sharded_planned(v, batch, steps, budget=b)))
    for fraction in SHARDED_FRACTIONS:
        variant = SHARDED_FRACTION.format(fraction=fraction)
        rows.append(_refused_or(variant, lambda v=variant, f=fraction: _sharded_planned(v, batch, steps,
                                                                                         activation_budget=f)))
    return rows


def _sharded_planned(variant: str, batch: dict[str, torch.Tensor], steps: int, *, budget: int | None = None,
                     activation_budget: float | None = None) -> dict[str, Any]:
    """The step through remat's backend: under a byte budget, its planned peak beside the measured one (under a
    fraction each graph's plan is its own, with no peak of the step's)."""
    torch._dynamo.reset()  # each block's forward was compiled per block for the last budget: under the limit again
    model = _sharded()
    remat = backend(budget=budget, activation_budget=activation_budget, progress=False, cache=False)
    row = _sharded_row(variant, torch.compile(model, backend=remat, dynamic=False), model, batch, steps)
    planned = {} if budget is None else {"planned": _shared_budget_peak(remat.planned, budget), "budget": budget}
    return {**row, **planned, **_solves(remat.planned)}


def _sharded_row(variant: str, module: nn.Module, model: nn.Module, batch: dict[str, torch.Tensor],
                 steps: int) -> dict[str, Any]:
    """One FSDP2 variant on this rank: its step peak (its shards and the batch, plus what the step allocates,
    gathered parameters included) and time."""
    def step() -> None:
        model.zero_grad(set_to_none=True)
        module(**batch).loss.backward()

    for _ in range(3):  # compiled, planned, and FSDP2's all-gather and reduce-scatter buffers made
        step()
    model.zero_grad(set_to_none=True)
    with LiveBytes() as live:
        module(**batch).loss.backward()
    resident = sum(p.to_local().untyped_storage().nbytes() for p in model.parameters()) + _batch_bytes(batch)
    time = time_call(step, device=torch.device("cpu"), repeats=steps, warmup=0, cpu_time=True)
    return {"variant": variant, "peak": resident + live.peak, "time_s": time.median_s}


def _wrapped(batch: dict[str, torch.Tensor], budget: int, steps: int) -> dict[str, Any]:
    model = _model()
    module = rematerialize(model, batch, budget=budget, progress=False, cache=False)
    wrapped = DDP(module)
    row = _row(WRAPPED, wrapped, model, batch, steps)
    return {**row, "planned": module.simulation.peak_memory, "budget": budget, **_solves(module.plans)}


def _compiled(batch: dict[str, torch.Tensor], budget: int, steps: int) -> dict[str, Any]:
    model = _model()
    remat = backend(budget=budget, progress=False, cache=False)
    compiled = torch.compile(DDP(model), backend=remat, dynamic=False)
    row = _row(COMPILED, compiled, model, batch, steps)
    return {**row, "planned": _shared_budget_peak(remat.planned, budget), "budget": budget, **_solves(remat.planned)}


def _refused_or(label: str, variant: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The variant's row, or the first sentence of remat's refusal in its place."""
    try:
        return variant()
    except RematError as e:
        return {"variant": label, "refused": str(e).split(". ")[0]}


def _baselines() -> dict[str, Callable[[], nn.Module]]:
    return {"DDP, eager": _model, "DDP, transformers' checkpointing": lambda: _model(checkpointing=True)}


ENGINES: dict[str, tuple[str, Callable[[dict[str, torch.Tensor], int], list[dict[str, Any]]]]] = {
    "ddp": ("DDP", _data_parallel), "fsdp2": ("FSDP2 per block", _fully_sharded)}
"""The engines compared: the heading of each one's table and the rows of one rank."""


if __name__ == "__main__":
    sys.exit(main())
