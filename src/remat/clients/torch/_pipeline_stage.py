"""What ``torch.distributed.pipelining`` holds beside each step of a stage: its receive buffers.

A :class:`~torch.distributed.pipelining.PipelineStage` allocates, when its schedule prepares it, a buffer per
micro-batch for the activations it receives (every stage but the first) and one per micro-batch for the gradients
it receives (every stage but the last), and keeps them from step to step. The stage's graph counts the micro-batch
that runs: its tangents are one gradient buffer, and its inputs one activation buffer. Every micro-batch's inputs
are held so for the whole step, not by the micro-batch while it is in flight: they count with the buffers, not with
what a micro-batch saves (:mod:`._in_flight`). The first stage's inputs are chunks of the batch the caller passes
the schedule (views, which allocate nothing; the schedule's shape inference may run on a copy of one, which would
make its graph another): they count nothing, so that its steps before and after the first backward plan one graph.
The other gradient buffers are held beside it, and so, for a moment, is the gradient of the inputs of the
micro-batch before, until its send completes.

The stage is found on the call stack while it runs the module, from the frames of its own methods only (reading a
frame's locals keeps them alive until the frame reads them again, which in a training loop's frame would hold
tensors it has dropped): the stage itself, and while the schedule prepares it (its shape inference is the first
call of the module, before any buffer exists) the number of micro-batches it prepares for. A module from
``rematerialize()`` is planned again the first time a stage runs it, as under a DistributedDataParallel
(:mod:`._data_parallel`); one compiled with the backend is compiled then.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from types import FrameType

from ._joint import JointGraph

__all__ = ["StageRole", "pipeline_buffer_bytes", "running_stage", "with_pipeline_buffers"]

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
    """The role of the pipeline stage running the module on this thread's stack (None outside one)."""
    if "torch.distributed.pipelining" not in sys.modules:
        return None
    from torch.distributed.pipelining.stage import _PipelineStageBase

    stage: _PipelineStageBase | None = None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.replace("\\", "/").endswith(_STAGE_SOURCE):
            if stage is not None:
                return None  # past the stage's frames: not being prepared
        else:
            found = frame.f_locals
            if stage is None and isinstance(found.get("self"), _PipelineStageBase):
                stage = found["self"]
            if stage is not None and (stage.args_recv_info or "num_microbatches" in found):
                count = len(stage.args_recv_info) or int(found["num_microbatches"])
                return StageRole(count, bool(stage.is_first), bool(stage.is_last))
        frame = frame.f_back
    return None


def with_pipeline_buffers(joint: JointGraph) -> JointGraph:
    """``joint`` with the receive buffers of the pipeline stage running it (if any) as its ``pipeline_buffers``, its
    inputs among them."""
    role = running_stage()
    if role is None:
        return joint
    buffers = pipeline_buffer_bytes(role, inputs=joint.fixed["inputs"], tangents=joint.fixed["tangents"])
    return dataclasses.replace(joint, fixed={**joint.fixed, "inputs": 0, "pipeline_buffers": buffers})


def pipeline_buffer_bytes(role: StageRole, *, inputs: int, tangents: int) -> int:
    """Bytes a stage in ``role`` holds through its step besides its parameters, for a graph whose inputs (the
    activations it receives) take ``inputs`` bytes and whose tangents (the gradients it receives) ``tangents``:
    every micro-batch's inputs (the running one's included) and the inputs' gradient of the micro-batch before,
    except on the first stage, and the other micro-batches' gradient buffers."""
    others = role.micro_batches - 1
    received = 0 if role.first else (others + 2) * inputs
    return received + (0 if role.last else others * tangents)
