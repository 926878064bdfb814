"""What ``torch.distributed.pipelining`` holds beside each step of a stage: its receive buffers.

A :class:`~torch.distributed.pipelining.PipelineStage` allocates, in its schedule's first step, a buffer per
micro-batch for the activations it receives (every stage but the first) and one per micro-batch for the gradients
it receives (every stage but the last), and keeps them from step to step. The stage's graph counts the micro-batch
that runs: its inputs are one activation buffer and its tangents one gradient buffer. The others are held beside
it, and so, for a moment, is the gradient of the inputs of the micro-batch before, until its send completes.

The stage is found on the call stack while it runs the module: only the frames of the stage's own methods are
read (reading a frame's locals keeps them alive until the frame reads them again, which in a training loop's frame
would hold tensors it has dropped). Its buffers exist once the schedule has prepared the stage, after the shape
inference that first calls the module; from then on a module from ``rematerialize()`` is planned again with them,
as under a DistributedDataParallel (:mod:`._data_parallel`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import FrameType

__all__ = ["StageRole", "pipeline_buffer_bytes", "running_stage"]

_STAGE_SOURCE = "torch/distributed/pipelining/stage.py"
"""The file of the pipeline stage's methods, whose frames are read for the stage that calls the module."""


@dataclass(frozen=True)
class StageRole:
    """Where a stage sits in its pipeline: how many micro-batches it has buffers for, and whether it is the first
    stage (it receives no activations) and the last (it receives no gradients)."""

    micro_batches: int
    first: bool
    last: bool


def running_stage() -> StageRole | None:
    """The role of the pipeline stage running the module on this thread's stack, once the stage has its buffers
    (None outside a stage, or before its schedule prepared it)."""
    if "torch.distributed.pipelining" not in sys.modules:
        return None
    from torch.distributed.pipelining.stage import _PipelineStageBase

    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.replace("\\", "/").endswith(_STAGE_SOURCE):
            stage = frame.f_locals.get("self")
            if isinstance(stage, _PipelineStageBase) and stage.args_recv_info:
                return StageRole(len(stage.args_recv_info), bool(stage.is_first), bool(stage.is_last))
            return None
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
