"""What FSDP2 (``fully_shard``) holds beside each graph of a step it runs.

A model sharded per block runs as a graph per block (FSDP2's hooks run outside TorchDynamo): a block's graph takes
the block's gathered (unsharded) parameters as its parameters, so the plan counts them while the block runs, and
its backward, recomputations included, runs after FSDP2 has gathered them again. Beside that graph, FSDP2 holds:

- every rank's shard of every parameter (the model's state) and, as the backward reduces them, of every gradient;
- the parameters of the groups that keep them gathered from their forward to their backward (the root's, which
  FSDP2 does not reshard after the forward), less the graph's own;
- blocks in flight, each as large as the largest group that reshards: in the backward, the next block's
  parameters gathered ahead (and, while FSDP2 copies them out of the all-gather, its flat buffer), and the
  reduce-scatter buffers of the gradients it keeps until the next block's reduce (``reduce_scatter_max_input_buffers``,
  1 by default).

A graph without parameters of its own (a loss computed apart) counts what the FSDP2 model that holds gathered
parameters when it is compiled holds. The sum is counted as fixed memory of the graph (``fixed["fully_sharded"]``),
held once by the graphs of the step as DDP's buckets are (:mod:`._data_parallel`): a bound, since the gradients'
shards fill up only over the backward, and the buffers are in flight only part of the time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

__all__ = ["fully_sharded_bytes", "graphs_after", "resharded_bytes"]


def fully_sharded_bytes(parameters: Iterable[torch.Tensor]) -> int:
    """Bytes FSDP2 holds beside a graph whose parameters are ``parameters`` (0 unless FSDP2 gathered one of them)."""
    own = {id(p) for p in parameters}
    groups = _groups_running(own)
    if not groups:
        return 0
    params = [fp for g in groups for fp in g.fsdp_params]
    shards = sum(_padded_shard_bytes(fp) + _shard_bytes(fp) for fp in params)
    kept = sum(_unsharded_bytes(fp) for g in groups if g.post_forward_mesh_info is None for fp in g.fsdp_params
               if id(getattr(fp, "_unsharded_param", None)) not in own)
    resharded = [sum(_unsharded_bytes(fp) for fp in g.fsdp_params) for g in groups
                 if g.post_forward_mesh_info is not None]
    buffers: int = max(g.comm_ctx.reduce_scatter_max_input_buffers for g in groups)
    return shards + kept + (1 + buffers) * max(resharded, default=0)


def resharded_bytes(parameters: Iterable[torch.Tensor]) -> int:
    """Bytes of ``parameters`` that FSDP2 frees when the graph's forward ends (resharding after the forward) and
    gathers again for its backward: memory the graph does not hold while later graphs of the step run."""
    own = {id(p) for p in parameters}
    return sum(_unsharded_bytes(fp) for g in _groups_running(own) if g.post_forward_mesh_info is not None
               for fp in g.fsdp_params if id(getattr(fp, "_unsharded_param", None)) in own)


def graphs_after(parameters: Iterable[torch.Tensor]) -> tuple[int, bool]:
    """Graphs of the step that run while the graph whose parameters are ``parameters`` holds what its forward saved,
    as FSDP2 knows them when it is compiled: the groups that reshard after their forward (blocks) whose forward has
    not run yet in this step, not the graph's own; and whether the graph is the last block's, which the root's
    graphs (its head and loss) follow. (0, False) outside FSDP2."""
    own = {id(p) for p in parameters}
    groups = _groups_running(own)
    if not groups:
        return 0, False
    mine = [g for g in groups if any(id(getattr(fp, "_unsharded_param", None)) in own for fp in g.fsdp_params)]
    ran = {id(g) for g in groups[0].comm_ctx.post_forward_order}
    blocks = [g for g in groups if g.post_forward_mesh_info is not None and id(g) not in ran
              and all(g is not m for m in mine)]
    in_block = bool(mine) and all(g.post_forward_mesh_info is not None for g in mine)
    return len(blocks), in_block and not blocks


def _groups_running(own: set[int]) -> list[Any]:
    """The parameter groups of the FSDP2 model running the graph: the one that gathered a parameter in ``own``, else
    (a graph without its parameters, such as a loss apart) the one that holds parameters gathered now."""
    models = [s._state_ctx.all_states or [s] for s in _fsdp_states()]
    for test in (lambda fp, g: id(getattr(fp, "_unsharded_param", None)) in own, lambda fp, g: g.is_unsharded):
        for states in models:
            groups = [g for s in states for g in s._fsdp_param_groups]
            if any(test(fp, g) for g in groups for fp in g.fsdp_params):
                return groups
    return []


def _fsdp_states() -> Iterator[Any]:
    """Every live FSDP2 state of this process."""
    if not torch.distributed.is_available():
        return
    from torch.distributed._composable_state import _module_state_mapping
    from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

    for ref in list(_module_state_mapping.values()):
        state = ref()
        if isinstance(state, FSDPState):
            yield state


def _itemsize(fp: Any) -> int:
    return (fp.param_dtype or fp.orig_dtype).itemsize  # type: ignore[no-any-return]


def _unsharded_bytes(fp: Any) -> int:
    """The bytes of a parameter gathered (its shard padded, from every rank)."""
    return fp.padded_sharded_param_size.numel() * fp.mesh_info.shard_mesh_size * _itemsize(fp)  # type: ignore[no-any-return]


def _padded_shard_bytes(fp: Any) -> int:
    return fp._sharded_param_data.untyped_storage().nbytes()  # type: ignore[no-any-return]


def _shard_bytes(fp: Any) -> int:
    """The bytes of this rank's shard of the parameter's gradient."""
    return fp.sharded_size.numel() * fp.orig_dtype.itemsize  # type: ignore[no-any-return]
