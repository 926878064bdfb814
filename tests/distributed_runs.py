"""remat in torch.distributed jobs on gloo, one process per rank: ``python tests/distributed_runs.py RUN WORLD OUT``
writes each rank's findings to OUT/rank-K.json.

``ddp``: training steps of a small GPT-2 under DistributedDataParallel, with and without remat. Each rank
trains on a batch of its own; the gradients DDP averages are compared with those of DDP over the same model
without remat, through both ways in: ``DDP(rematerialize(model, ...))`` (whose plans say where each came from:
solved, taken from another rank, or followed from the plan made before DDP held its buckets) and
``torch.compile(DDP(model), backend=backend(...))`` with buckets small enough that TorchDynamo splits the step at
their boundaries. The step is then measured (on the CPU, to the byte) against its plan.

``fsdp``: a step of the GPT-2 sharded with FSDP2's ``fully_shard`` per block, through ``backend()`` with a byte
budget (FSDP2's hooks split the step into a graph per block), against the same step without remat; then a step
measured to the byte (gathered parameters included) against the plans' peak: the most any graph's plan peaks at
plus what the graphs before it hold.

``plans``: every rank plans a small MLP's step with ``rematerialize()``, the last rank on a batch of
another size: the ranks with the same graph solve it once, the last rank solves its own.

``pipeline``: a 1F1B pipeline of ``torch.distributed.pipelining``, one stage per rank, each stage a
``rematerialize()``-d MLP, against the same pipeline without remat: the losses and every stage's gradients.
The stages plan different graphs at different times (the first stage's forward, the last stage's
metadata inference and its steps that accumulate over micro-batches).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers
from torch.nn.parallel import DistributedDataParallel as DDP

from remat.clients.torch import LiveBytes, activation_peak, backend, rematerialize

VOCAB = 256
BUCKET_MB = 1
FSDP_BATCH = (8, 64)
"""The FSDP2 run's batch, in tokens, whose activations outweigh what FSDP2 holds."""
MICRO_BATCHES = 4
"""The pipeline run's micro-batches per step."""
FSDP_BUDGET = 16_500_000
"""The FSDP2 run's budget per rank: 1.07 times the 15.39 MB per-block checkpointing (transformers') measures on this
run, where each block is planned to leave the blocks after it room for as much as it keeps, and every block
rematerializes."""


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=VOCAB, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config).train()


def _batch(rank: int, step: int, shape: tuple[int, int] = (2, 32)) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(100 * rank + step))
    return {"input_ids": ids, "labels": ids}


def _train(module: torch.nn.Module, model: torch.nn.Module, rank: int, steps: int) -> list[dict[str, torch.Tensor]]:
    """The gradients of ``steps`` steps of ``module`` (which runs ``model``), from None each step."""
    seen = []
    for step in range(steps):
        model.zero_grad(set_to_none=True)
        module(**_batch(rank, step)).loss.backward()
        seen.append({n: p.grad.clone() for n, p in model.named_parameters()})
    return seen


def _largest_difference(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> float:
    return max((x[n] - y[n]).abs().max().item() for x, y in zip(a, b, strict=True) for n in x)


def _measured(module: torch.nn.Module, model: torch.nn.Module, rank: int, plan: Any) -> dict[str, int]:
    model.zero_grad(set_to_none=True)
    batch = _batch(rank, 9)  # made before the step: the plan counts the inputs as resident
    peak = activation_peak(lambda: module(**batch).loss.backward(), model.parameters())
    return {"measured": plan.joint.resident_memory + peak, "planned": plan.simulation.peak_memory,
            "budget": plan.budget, "buckets": plan.joint.fixed["data_parallel_buckets"]}


def _plans(rank: int, world: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh()) for _ in range(6)])
    rows = 256 if rank < world - 1 else 512
    x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(rank))
    module = rematerialize(model, (x,), activation_budget=0.7, loss_fn=_sum, progress=False, cache=False)
    planned = module.plans[-1]
    return {"source": planned.source, "graph": planned.graph.sha256}


def _sum(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).sum()


def _ddp(rank: int, world: int) -> dict[str, Any]:
    bucket_bytes = sum(p.numel() * p.element_size() for p in _model().parameters())
    reference = _model()
    expected = _train(DDP(reference, bucket_cap_mb=BUCKET_MB), reference, rank, 3)

    model = _model()
    wrapped = DDP(rematerialize(model, _batch(rank, 0), activation_budget=0.8, progress=False, cache=False),
                  bucket_cap_mb=BUCKET_MB)
    module_grads = _train(wrapped, model, rank, 3)
    planned = wrapped.module.plans[-1]

    model = _model()
    remat = backend(activation_budget=0.9, progress=False, cache=False)
    compiled = torch.compile(DDP(model, bucket_cap_mb=BUCKET_MB), backend=remat, dynamic=False)
    compiled_grads = _train(compiled, model, rank, 3)

    return {
        "bucket_bytes": bucket_bytes,
        "module": {"difference": _largest_difference(expected, module_grads),
                   "sources": [p.source for p in wrapped.module.plans],
                   **_measured(wrapped, wrapped.module.model, rank, planned)},
        "compiled": {"difference": _largest_difference(expected, compiled_grads), "graphs": len(remat.planned),
                     "buckets": [p.joint.fixed["data_parallel_buckets"] for p in remat.planned]},
    }


def _fsdp(rank: int, world: int) -> dict[str, Any]:
    from torch.distributed.fsdp import fully_shard

    def sharded() -> torch.nn.Module:
        model = _model()
        for block in model.transformer.h:  # per block, then the rest, as torchtitan and accelerate shard
            fully_shard(block)
        return fully_shard(model)

    def step(module: torch.nn.Module, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> None:
        model.zero_grad(set_to_none=True)
        module(**batch).loss.backward()

    batches = [_batch(rank, s, FSDP_BATCH) for s in range(3)]
    reference = sharded()
    step(reference, reference, batches[0])
    model = sharded()
    remat = backend(budget=FSDP_BUDGET, progress=False, cache=False)
    compiled = torch.compile(model, backend=remat, dynamic=False)
    step(compiled, model, batches[0])
    difference = max((p.grad.full_tensor() - q.grad.full_tensor()).abs().max().item()
                     for p, q in zip(model.parameters(), reference.parameters(), strict=True))
    step(compiled, model, batches[1])  # the FSDP2 step warmed up: its all-gather and reduce-scatter buffers made
    model.zero_grad(set_to_none=True)
    batch = batches[2]  # made before the step: resident, as the sharded parameters are
    with LiveBytes() as live:  # sees FSDP2 gather parameters into storages it resizes
        compiled(**batch).loss.backward()
    resident = sum(p.to_local().untyped_storage().nbytes() for p in model.parameters()) \
        + sum(t.untyped_storage().nbytes() for t in batch.values())
    # each graph plans within what the graphs before it in the step leave it
    planned = max(p.simulation.peak_memory + FSDP_BUDGET - p.asked for p in remat.planned)
    return {"difference": difference, "graphs": len(remat.planned), "measured": resident + live.peak,
            "planned": planned, "budget": FSDP_BUDGET, "fully_sharded": [p.joint.fixed["fully_sharded"]
                                                                     for p in remat.planned],
            "rematerialized": sum(p.simulation.cost > p.graph.base_cost for p in remat.planned)}


def _pipeline(rank: int, world: int) -> dict[str, Any]:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    def stage_module() -> torch.nn.Module:
        torch.manual_seed(rank)
        return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh()) for _ in range(6)])

    inputs, targets = (torch.randn(512, 64, generator=torch.Generator().manual_seed(k)) for k in (0, 1))
    micro_batch = torch.randn(128, 64, requires_grad=rank > 0)  # a later stage's input carries a gradient

    def train(module: torch.nn.Module) -> tuple[list[float], list[torch.Tensor], dict[str, int]]:
        stage = PipelineStage(module, rank, world, torch.device("cpu"))
        schedule = Schedule1F1B(stage, n_microbatches=MICRO_BATCHES, loss_fn=lambda out, y: ((out - y) ** 2).mean())
        losses: list[torch.Tensor] = []
        if rank == 0:
            schedule.step(inputs)
        elif rank == world - 1:
            schedule.step(target=targets, losses=losses)
        else:
            schedule.step()
        received = {"activations": stage.args_recv_info, "gradients": stage.grad_recv_info}
        buffers = {name: sum(r.buffer.numel() * r.buffer.element_size() for infos in by_micro_batch.values()
                             for r in infos if r.buffer is not None) for name, by_micro_batch in received.items()}
        return [float(loss) for loss in losses], [p.grad.clone() for p in module.parameters()], buffers

    expected_losses, expected, _ = train(stage_module())
    model = stage_module()
    planned = rematerialize(model, (micro_batch,), activation_budget=0.8, time_limit_s=5, progress=False, cache=False)
    losses, gradients, buffers = train(planned)
    remat = backend(activation_budget=0.8, time_limit_s=5, progress=False, cache=False)
    compiled_model = stage_module()
    _, compiled_gradients, _ = train(torch.compile(compiled_model, backend=remat, fullgraph=True, dynamic=False))
    return {"losses": losses, "expected_losses": expected_losses, "plans": len(planned.plans),
            "difference": max((g - e).abs().max().item() for g, e in zip(gradients, expected, strict=True)),
            "compiled_difference": max((g - e).abs().max().item()
                                       for g, e in zip(compiled_gradients, expected, strict=True)),
            "compiled_buffers": [p.joint.fixed["pipeline_buffers"] for p in remat.planned],
            "micro_batches": MICRO_BATCHES, "stage_buffers": buffers, "sources": [p.source for p in planned.plans],
            "planned_buffers": [p.joint.fixed["pipeline_buffers"] for p in planned.plans],
            "planned_inputs": [p.joint.fixed["inputs"] for p in planned.plans]}


RUNS = {"ddp": _ddp, "plans": _plans, "fsdp": _fsdp, "pipeline": _pipeline}


def _rank(rank: int, run: str, world: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=world)
    Path(out, f"rank-{rank}.json").write_text(json.dumps(RUNS[run](rank, world)))
    dist.destroy_process_group()


if __name__ == "__main__":
    run, world, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    mp.spawn(_rank, args=(run, world, out), nprocs=world)
