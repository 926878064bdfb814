"""What DistributedDataParallel holds beside each step it runs: its gradient buckets.

DDP copies each parameter's gradient into a flat bucket to all-reduce it (or, with
``gradient_as_bucket_view=True``, keeps the gradients in the buckets): one gradient's worth of
memory, allocated when it wraps the model and resident through every step. A step planned while a
DDP runs it (``DDP(rematerialize(model))``, ``torch.compile(DDP(model), backend=...)``) counts them
as fixed memory.
"""

from __future__ import annotations

import torch

__all__ = ["data_parallel_bucket_bytes"]


def data_parallel_bucket_bytes() -> int:
    """Bytes of the gradient buckets of the DistributedDataParallel whose forward is running (0 outside one)."""
    if not torch.distributed.is_available():
        return 0
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel._get_active_ddp_module()
    if ddp is None:
        return 0
    return sum(p.numel() * p.element_size() for p in ddp._module_parameters if p.requires_grad)
