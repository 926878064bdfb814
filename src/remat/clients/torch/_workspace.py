"""What kernels allocate beyond their outputs while they run (their workspaces), measured op by op.

The dispatcher sees the storages an op returns, not the buffers its kernel allocates and frees
inside: a convolution's columns and oneDNN's reorders on the CPU, cuDNN's workspaces on CUDA, batch
norm's backward scratch. The allocator sees both, and a step's peak is often at such an op. Each
distinct op of the joint graph (its target and the shapes, strides and dtypes of what it reads)
runs twice on inputs made like the traced ones, and the second run's peak over what it holds at its
end is the op's workspace (the first run pays for caches a kernel keeps, which the step pays once).
A plan holds it as a producer of its own that the op reads (:attr:`Producer.workspace_of`) and that
reads what the op reads, so that a plan makes it once the op's inputs are resident (after what the
op's stage computes again), right before the op, and frees it after; workspaces under
WORKSPACE_NODE_BYTES (a scalar a kernel wraps, a norm's per-channel scratch) are counted once for the
whole step instead, as fixed memory (``fixed["small_workspaces"]``, the largest of them), so that
they do not crowd the graph.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

from ._joint import JointGraph, Producer
from ._measure import allocation_peaks

__all__ = ["REMEMBERED_WORKSPACES", "WORKSPACE_NODE_BYTES", "kernel_workspaces", "with_workspaces"]

WORKSPACE_NODE_BYTES = 4096
"""The least workspace a plan holds as a node of its own; the largest smaller one is held through the step."""

REMEMBERED_WORKSPACES = 4096
"""Workspaces this process keeps, by op signature, for the graphs it captures next. On CUDA a kernel's workspace
varies from one measure to the next (cuDNN's choice of algorithm, the allocator's state), and a graph captured
again must hash the same to follow the plan made for it: the step under DistributedDataParallel after the step
alone, a cached plan, ``result=`` another module's result."""

_measured: OrderedDict[Hashable, int] = OrderedDict()


def kernel_workspaces(joint: JointGraph) -> dict[str, int]:
    """Bytes each producer's kernel allocates beyond its outputs while it runs, for those that allocate any.

    Call with fake tensors turned off (the ops run on real tensors of the traced shapes). A producer whose
    op fails on such inputs (one that reads values, not only shapes) is left out, with a warning."""
    nodes = {n.name: n for n in joint.module.graph.nodes}
    runs: dict[Hashable, _OpRun] = {}
    signature_of: dict[str, Hashable] = {}
    for producer in joint.producers:
        node = nodes.get(producer.name)
        if producer.runs_an_op and node is not None and _measurable(node.target):
            signature_of[producer.name] = _signature(node)
            runs.setdefault(signature_of[producer.name], _OpRun(node))
    device = _device(joint)
    if device.type != "cuda" and torch.autograd.profiler._is_profiler_enabled:
        warnings.warn("remat reads the CPU allocator through torch's profiler, which is running: the plan does not "
                      "count what kernels allocate inside ops (capture outside the profiler to count it).",
                      stacklevel=2)
        return {}
    known = {signature: _measured[signature] for signature in runs if signature in _measured}
    runs = {signature: run for signature, run in runs.items() if signature not in known}
    if runs:
        known.update(_measure(runs, device))
    return {name: known[s] for name, s in signature_of.items() if known.get(s, 0) > 0}


def _measure(runs: Mapping[Hashable, _OpRun], device: torch.device) -> dict[Hashable, int]:
    """The workspace of each op that ran, by signature, remembered for later captures; a warning names those that
    could not run."""
    calls = [call for run in runs.values() for call in (run.make, run.run, run.run, run.drop)]
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # random ops draw for nothing
        measures = allocation_peaks(calls, device)
    measured = {signature: max(0, second.peak - second.held)
                for (signature, run), second in zip(runs.items(), measures[2::4], strict=True) if run.ran}
    for signature, nbytes in measured.items():
        _measured[signature] = nbytes
        if len(_measured) > REMEMBERED_WORKSPACES:
            _measured.popitem(last=False)
    failed = sorted(str(signature[0]) for signature, run in runs.items() if not run.ran)  # type: ignore[index]
    if failed:
        warnings.warn(f"remat could not measure the workspace of {len(failed)} op(s) ({', '.join(failed[:5])}); "
                      f"the plan does not count what their kernels allocate while they run.", stacklevel=3)
    return measured


def with_workspaces(joint: JointGraph, workspaces: Mapping[str, int]) -> JointGraph:
    """``joint`` with a producer for each workspace of WORKSPACE_NODE_BYTES or more, placed right before its op,
    which reads it, reading what the op reads, and the largest smaller one as fixed memory."""
    large = {name: nbytes for name, nbytes in workspaces.items() if nbytes >= WORKSPACE_NODE_BYTES}
    small = max((nbytes for nbytes in workspaces.values() if nbytes < WORKSPACE_NODE_BYTES), default=0)
    producers: list[Producer] = []
    for p in joint.producers:
        if p.name in large:
            workspace = Producer(name=f"<workspace of {p.name}>", op=f"workspace of {p.op}", deps=p.deps,
                                 memory=large[p.name], kind=p.kind, rng=False, workspace_of=p.name)
            producers.append(workspace)
            p = dataclasses.replace(p, deps=(*p.deps, workspace.name))
        producers.append(p)
    return dataclasses.replace(joint, producers=tuple(producers), fixed={**joint.fixed, "small_workspaces": small})


_HOST_ARGUMENTS = frozenset({"philox_seed", "philox_offset"})
"""Arguments a trace places on the step's device that kernels read on the host: the random seed and offset of
attention with dropout (int64 scalars on the CPU unless a CUDA graph is being captured; kernels dereference them,
so a device pointer crashes the process)."""

_CPU = torch.device("cpu")


def _measurable(target: Any) -> bool:
    """Whether an op can be run apart on made-up inputs: ATen's own ops (others may talk to other processes,
    as collectives do, or keep state)."""
    return isinstance(target, torch._ops.OpOverload) and target.namespace == "aten"


def _signature(node: fx.Node) -> Hashable:
    """What decides the op's workspace: its target and the layout of everything it reads."""
    def layout(a: Any) -> Any:
        val = a.meta.get("val") if isinstance(a, fx.Node) else a
        if isinstance(val, torch.Tensor):
            return ("tensor", tuple(val.shape), val.stride(), val.dtype, str(val.device))
        return repr(val)

    args, kwargs = fx.node.map_aggregate((node.args, node.kwargs), layout)
    return (node.target, repr(args), repr(sorted(kwargs.items())))


class _OpRun:
    """The op of one node, run on new tensors laid out as the traced ones it reads (floats drawn in [0, 1), which
    probabilities and losses accept; zero integers): ``make`` them, ``run`` it (as often as wanted), ``drop``
    them. An op that fails on them (one that reads values, not only shapes) is not ``ran``."""

    def __init__(self, node: fx.Node) -> None:
        self.node = node
        self.inputs: tuple[Any, Any] | None = None
        self.ran = True

    def make(self) -> None:
        def like(name: str, a: Any) -> Any:
            if not isinstance(a, fx.Node):
                return a
            val = a.meta.get("val")
            on_host = name in _HOST_ARGUMENTS and isinstance(val, torch.Tensor) and val.dtype == torch.int64
            return pytree.tree_map_only(torch.Tensor, functools.partial(_like, device=_CPU if on_host else None), val)

        names = [argument.name for argument in self.node.target._schema.arguments]  # type: ignore[union-attr]
        try:
            args = tuple(fx.node.map_aggregate(a, functools.partial(like, name))
                         for name, a in zip(names, self.node.args, strict=False))
            kwargs = {k: fx.node.map_aggregate(a, functools.partial(like, k)) for k, a in self.node.kwargs.items()}
            self.inputs = (args, kwargs)
        except Exception:  # noqa: BLE001 - no room for its inputs (a device nearly full): said by the caller
            self.ran = False

    def run(self) -> Any:
        if self.inputs is None or not self.ran:
            return None
        args, kwargs = self.inputs
        op: Any = self.node.target
        try:
            return op(*args, **kwargs)
        except Exception:  # noqa: BLE001 - said by the caller, which counts nothing for it
            self.ran = False
            return None

    def drop(self) -> None:
        self.inputs = None


def _like(val: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """A new tensor laid out as ``val`` (on ``device``, by default its own), its whole storage filled (expanded
    layouts alias their elements)."""
    device = device or val.device
    t = torch.empty_strided(tuple(val.shape), val.stride(), dtype=val.dtype, device=device)
    storage = torch.empty(0, dtype=val.dtype, device=device).set_(t.untyped_storage())
    storage.uniform_() if storage.is_floating_point() or storage.is_complex() else storage.zero_()
    return t


def _device(joint: JointGraph) -> torch.device:
    """The device the step's values live on (the first one a traced value names)."""
    for node in joint.module.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return torch.device(val.device)
    return torch.device("cpu")
