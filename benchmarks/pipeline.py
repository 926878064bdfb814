"""remat in a 1F1B pipeline against uniform per-block checkpointing at the same per-rank budget.

A GPT of 8 blocks (tests/torch_models.py, no dropout) is cut into 4 stages of 2 blocks, one per gloo
process on the CPU, and trained with ``torch.distributed.pipelining``'s ``Schedule1F1B`` over 8
micro-batches, as a training loop runs it: ``return_outputs=False`` (with the default, the last stage
keeps every micro-batch's output until the step ends, which no plan of one micro-batch sees). First
every block runs under ``torch.utils.checkpoint`` (the uniform policy); the per-rank budget is 1.5
times (``--budget-scale``) the largest step peak of its ranks (one device size for all). Then each
stage is ``rematerialize()``-d with that budget and ``in_flight`` = 4 - stage (the micro-batches 1F1B
has it hold at once); the last stage's budget leaves room for the peak of the schedule's loss function,
which runs outside the stage's graph. Per rank: the step peak (the stage's parameters and the receive buffers
the pipeline keeps from step to step, plus what the step allocates, counted to the byte by
:class:`remat.clients.torch.LiveBytes`, and as the CPU allocator counts it), the step's median CPU
time (one intra-op thread per process) and, for remat, the plans it made, their overhead and their peak
with the other micro-batches' saved values; a stage remat refuses runs without it (its row says so), so
that the other stages can still be measured.

    python benchmarks/pipeline.py                       # 4 ranks, a budget of 1.5x checkpointing's peak
    python benchmarks/pipeline.py --budget-scale 1      # at checkpointing's peak
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from torch_models import GPT  # noqa: E402

from remat.clients.torch import LiveBytes, activation_peak, allocator_peak, rematerialize, time_call  # noqa: E402
from remat.clients.torch._in_flight import micro_batch_bytes  # noqa: E402
from remat.schedules import RematError, format_size  # noqa: E402

STAGES, BLOCKS, WIDTH, HEADS, VOCAB, CONTEXT, BATCH, MICRO_BATCHES = 4, 8, 128, 4, 512, 128, 32, 8


class Stage(nn.Module):
    """Blocks of the GPT, with its embeddings before the first and its head after the last."""

    def __init__(self, gpt: GPT, stage: int, checkpointed: bool) -> None:
        super().__init__()
        per = BLOCKS // STAGES
        self.embeddings = nn.ModuleList([gpt.tok, gpt.pos]) if stage == 0 else None
        self.blocks = nn.ModuleList(gpt.blocks[stage * per:(stage + 1) * per])
        self.head = nn.Sequential(gpt.ln, gpt.head) if stage == STAGES - 1 else None
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embeddings is not None:
            tok, pos = self.embeddings
            x = tok(x) + pos(torch.arange(x.shape[1]))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return self.head(x) if self.head is not None else x


def _stage(rank: int, checkpointed: bool) -> Stage:
    torch.manual_seed(0)
    return Stage(GPT(VOCAB, CONTEXT, WIDTH, HEADS, BLOCKS, 0.0), rank, checkpointed)


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def _measure(rank: int, module: nn.Module, params: nn.Module, steps: int) -> dict[str, Any]:
    """One warm-up step, one counted to the byte, ``steps`` timed."""
    ids = torch.randint(0, VOCAB, (BATCH, CONTEXT), generator=torch.Generator().manual_seed(0))
    stage = PipelineStage(module, rank, STAGES, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=MICRO_BATCHES, loss_fn=_loss)

    def step() -> None:
        params.zero_grad(set_to_none=True)
        if rank == 0:
            schedule.step(ids, return_outputs=False)
        elif rank == STAGES - 1:
            schedule.step(target=torch.roll(ids, -1, dims=1), return_outputs=False)
        else:
            schedule.step(return_outputs=False)

    step()
    params.zero_grad(set_to_none=True)
    with LiveBytes() as live:
        step()
    params.zero_grad(set_to_none=True)
    allocated = allocator_peak(step)
    held = sum(p.numel() * p.element_size() for p in params.parameters()) + _receive_buffers(stage)
    time = time_call(step, device=torch.device("cpu"), repeats=steps, warmup=0, cpu_time=True)
    return {"peak": held + live.peak, "allocated": held + allocated, "time": time.median_s}


def _receive_buffers(stage: PipelineStage) -> int:
    """Bytes of the buffers the stage allocated in its first step to receive activations and gradients, one per
    micro-batch, which it keeps from step to step (LiveBytes counts only what a step allocates)."""
    received = [*stage.args_recv_info.values(), *stage.grad_recv_info.values()]
    return sum(r.buffer.numel() * r.buffer.element_size() for infos in received for r in infos if r.buffer is not None)


def _rank(rank: int, out: str, steps: int, scale: float) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=STAGES)
    uniform = _stage(rank, checkpointed=True)
    rows = {"checkpointing": _measure(rank, uniform, uniform, steps)}
    peaks = [None] * STAGES
    dist.all_gather_object(peaks, rows["checkpointing"]["peak"])
    budget = int(scale * max(peaks))
    model = _stage(rank, checkpointed=False)
    micro_batch = torch.randint(0, VOCAB, (BATCH // MICRO_BATCHES, CONTEXT)) if rank == 0 else \
        torch.randn(BATCH // MICRO_BATCHES, CONTEXT, WIDTH, requires_grad=True)
    room = 0
    if rank == STAGES - 1:  # the schedule's loss_fn runs outside the stage's graph: leave room for it
        logits = torch.randn(BATCH // MICRO_BATCHES, CONTEXT, VOCAB, requires_grad=True)
        targets = torch.zeros(BATCH // MICRO_BATCHES, CONTEXT, dtype=torch.long)
        # less the gradient it returns: the stage's plan counts that (the tangent its backward starts from)
        room = activation_peak(lambda: _loss(logits, targets).backward(), [logits]) - logits.numel() * 4
    try:
        planned = rematerialize(model, (micro_batch,), budget=budget - room, in_flight=STAGES - rank,
                                progress=False, cache=False, time_limit_s=10)
        rows["remat"] = {**_measure(rank, planned, model, steps),
                         "plans": [{"overhead": p.result.overhead, "source": p.source,
                                    "planned": p.simulation.peak_memory + (STAGES - rank - 1) * micro_batch_bytes(
                                        p.joint, p.graph, p.plan, p.simulation)} for p in planned.plans]}
    except RematError as refused:  # a stage refused still takes part in the pipeline: without remat
        rows["remat"] = {**_measure(rank, model, model, steps), "refused": str(refused)}
    rows["budget"] = budget
    Path(out, f"rank-{rank}.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant")
    parser.add_argument("--budget-scale", type=float, default=1.5,
                        help="the per-rank budget as a multiple of checkpointing's largest peak")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_rank, args=(out, args.steps, args.budget_scale), nprocs=STAGES)
        ranks = [json.loads(Path(out, f"rank-{r}.json").read_text()) for r in range(STAGES)]
    print(f"# 1F1B, {STAGES} gloo ranks: GPT {BLOCKS} x {WIDTH}, batch {BATCH} x {CONTEXT} in {MICRO_BATCHES} "
          f"micro-batches ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__})")
    print("| stage | in flight | variant | step peak | / budget | by the allocator | / budget | step time | "
          "/ checkpointing | plans: overhead (planned peak, the micro-batches in flight included) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rank, rows in enumerate(ranks):
        budget, base = rows.pop("budget"), rows["checkpointing"]["time"]
        for name, row in rows.items():
            plans = ", ".join(f"{p['overhead']:.3f} ({format_size(p['planned'])})" for p in row.get("plans", [])) \
                or (f"refused, run without remat: {row['refused']}" if "refused" in row else "")
            print(f"| {rank} | {STAGES - rank} | {name} | {format_size(row['peak'])} | {row['peak'] / budget:.3f} "
                  f"| {format_size(row['allocated'])} | {row['allocated'] / budget:.3f} "
                  f"| {1e3 * row['time']:.1f} ms | {row['time'] / base:.3f} | {plans} |")


if __name__ == "__main__":
    main()
