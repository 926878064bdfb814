"""What ``torch.distributed.pipelining`` holds beside each step of a stage: its receive buffers.

A :class:`~torch.distributed.pipelining.PipelineStage` allocates, when its schedule first runs, a buffer per
micro-batch for the activations it receives (every stage but the first) and one per micro-batch for the gradients
it receives (every stage but the last), and keeps them from step to step. The stage's graph counts the micro-batch
that runs: its inputs are one activation buffer and its tangents one gradient buffer. The others are held beside
it, and so, for a moment, is the gradient of the inputs of the micro-batch before, until its send completes.

The stage is found on the call stack while it runs the module (its first call, the schedule's shape inference,
comes before any buffer is allocated), so a module from ``rematerialize()`` is planned again the first time a
stage runs it, as under a DistributedDataParallel (:mod:`._data_parallel`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import FrameType

import torch

__all__ = ["StageRole", "pipeline_buffer_bytes", "running_stage"]


@dataclass(frozen=True)
class StageRole:
    """Where a stage sits in its pipeline: how many micro-batches its schedule runs a step in, and whether it is the
    first stage (it receives no activations) and the last (it receives no gradients)."""

    micro_batches: int
    first: bool
    last: bool


def running_stage() -> StageRole | None:
    """The role of the pipeline stage whose schedule is running on this thread's stack (None outside one)."""
    if not torch.distributed.is_available():
        return None
    from torch.distributed.pipelining.schedules import _PipelineSchedule
    from torch.distributed.pipelining.stage import _PipelineStageBase

    stage: _PipelineStageBase | None = None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if stage is None and isinstance(owner, _PipelineStageBase):
            stage = owner
        elif stage is not None and isinstance(owner, _PipelineSchedule):
            return StageRole(int(owner._n_microbatches), bool(stage.is_first), bool(stage.is_last))
        frame = frame.f_back
    return None


def pipeline_buffer_bytes(role: StageRole | None, *, inputs: int, tangents: int) -> int:
    """Bytes a stage in ``role`` holds beside its graph, whose inputs (the activations it receives) take ``inputs``
    bytes and whose tangents (the gradients it receives) ``tangents``: the other micro-batches' receive buffers,
    and the inputs' gradient of the micro-batch before."""
    if role is None:
        return 0
    others = role.micro_batches - 1
    received = 0 if role.first else (others + 1) * inputs
    return received + (0 if role.last else others * tangents)
