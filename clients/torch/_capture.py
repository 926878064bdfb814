"""Capture a training step as AOTAutograd's joint graph and describe it the way a solver sees it.

The joint graph holds the functional ATen ops of the forward and the backward together. The solver
only sees *producers*, the ops that allocate storage: views and ``getitem`` s are folded into the
producer whose storage they read, and the client keeps that map to re-create them at each use.
Memory is counted in storage bytes. What stays resident through the step (parameters, buffers,
inputs, tangents, the step's outputs and gradients, saved random states, copies of mutated inputs)
is fixed memory, not a node.

Sizes come from the fake tensors of the trace, which match what kernels allocate, with one
exception found so far: on the CPU, ``aten.mse_loss`` returns its scalar inside its whole
unreduced buffer, so ``(out - y).pow(2).mean()`` is counted exactly where ``F.mse_loss`` is not.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from torch import fx, nn
from torch._functorch._aot_autograd import descriptors as desc
from torch._functorch.aot_autograd import (
    aot_compile_joint_with_descriptors,
    aot_export_joint_with_descriptors,
)
from torch.multiprocessing.reductions import StorageWeakRef

from remat.schedules import Graph, Kind, Node

from ._errors import CaptureError

__all__ = ["Capture", "JointGraph", "LossFn", "Producer", "capture", "first_output"]

LossFn = Callable[..., torch.Tensor]
"""``loss_fn(model, *inputs) -> loss``: the training step's loss from the model and one batch."""

@dataclass(frozen=True)
class Producer:
    """One node of the exported graph: an op of the joint graph that allocates new storage."""

    name: str
    op: str
    deps: tuple[str, ...]
    memory: int
    kind: Kind
    rng: bool
    """Draws random numbers (dropout): a recomputation must replay the random state."""


@dataclass(frozen=True)
class JointGraph:
    """The joint graph of a training step and its producer view (what :meth:`to_graph` exports).

    ``parent`` maps each folded node (a view or a ``getitem``) to the node it reads, ``root`` to the
    producer or placeholder owning its storage; ``outputs`` are the joint graph's outputs, the
    first ``num_forward_outputs`` of them the forward's (buffer updates, then the loss), the rest
    gradients (None where an input has none). ``mutated`` are the inputs the step updates in place
    (batch norm's running statistics), ``fixed`` the fixed memory by category.
    """

    module: fx.GraphModule
    name: str
    producers: tuple[Producer, ...]
    parent: Mapping[str, str]
    root: Mapping[str, str]
    primals: tuple[str, ...]
    tangents: tuple[str, ...]
    outputs: tuple[str | None, ...]
    num_forward_outputs: int
    mutated: tuple[str, ...]
    fixed: Mapping[str, int]

    @property
    def fixed_memory(self) -> int:
        """Bytes resident through the whole step (the sum of ``fixed``'s parts)."""
        return sum(self.fixed.values())

    @cached_property
    def index(self) -> dict[str, Producer]:
        """Each producer by name."""
        return {p.name: p for p in self.producers}

    def to_graph(self, costs: Mapping[str, float], *, cost_unit: str) -> Graph:
        """The remat.graph/v1 of this step with ``costs[name]`` per producer."""
        position = {p.name: i for i, p in enumerate(self.producers)}
        nodes = [
            Node(
                id=p.name,
                deps=tuple(position[d] for d in p.deps),
                cost=float(costs[p.name]),
                memory=p.memory,
                kind=p.kind,
                meta={"op": p.op, **({"rng": True} if p.rng else {})},
            )
            for p in self.producers
        ]
        return Graph(nodes, name=self.name, fixed_memory=self.fixed_memory, cost_unit=cost_unit)


class Capture:
    """A captured training step, open until the :func:`capture` context closes.

    ``joint`` describes the graph; ``compile(partition_fn, compiler)`` turns it into the callable
    AOTAutograd builds around the forward and backward graphs that ``partition_fn`` returns.
    """

    def __init__(self, joint_with_descriptors: Any, joint: JointGraph, step: nn.Module) -> None:
        self._jd = joint_with_descriptors
        self.joint = joint
        self.step = step
        self.parameter_names: tuple[str, ...] = tuple(joint_with_descriptors.params_spec)
        self.buffer_names: tuple[str, ...] = tuple(joint_with_descriptors.buffers_spec)

    def compile(self, partition_fn: Callable[..., tuple[fx.GraphModule, fx.GraphModule]],
                compiler: Callable[..., Any]) -> Callable[..., Any]:
        """The runnable step: called with parameters, buffers and inputs, flat and in that order."""
        return aot_compile_joint_with_descriptors(
            self._jd, partition_fn=partition_fn, fw_compiler=compiler, bw_compiler=compiler
        )

    def flat_state(self) -> list[torch.Tensor]:
        """The step's current parameters then buffers, in the order the compiled step takes them."""
        params = dict(self.step.named_parameters(remove_duplicate=False))
        buffers = dict(self.step.named_buffers(remove_duplicate=False))
        return [params[n] for n in self.parameter_names] + [buffers[n] for n in self.buffer_names]


class _Step(nn.Module):
    """The traced function: the model and its loss, so that the backward starts from a scalar."""

    def __init__(self, model: nn.Module, loss_fn: LossFn | None) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, *inputs: Any) -> Any:
        if self.loss_fn is None:
            return self.model(*inputs)
        return self.loss_fn(self.model, *inputs)


@contextlib.contextmanager
def capture(model: nn.Module, example_inputs: Sequence[Any], *, loss_fn: LossFn | None = None) -> Iterator[Capture]:
    """Trace ``model`` (and ``loss_fn``) on ``example_inputs`` into one static joint graph.

    Tracing runs on fake tensors: it neither computes nor changes the model's buffers or the
    random state. The step must return one scalar loss: ``model(*inputs)`` when ``loss_fn`` is
    None, else ``loss_fn(model, *inputs)``. Raises CaptureError saying why when it cannot.
    """
    step = _Step(model, loss_fn)
    with contextlib.ExitStack() as stack:
        try:
            jd = aot_export_joint_with_descriptors(stack, step, tuple(example_inputs))
        except Exception as e:  # tracing runs arbitrary user code; every failure is explained below
            raise CaptureError(_explain(e, model)) from e
        joint = describe(jd.graph_module, name=type(model).__name__)
        yield Capture(jd, joint, step)


def describe(gm: fx.GraphModule, *, name: str) -> JointGraph:
    """The producer view of a joint graph whose placeholders and outputs carry AOT descriptors."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    placeholder_names = {n.name for n in placeholders}
    output = next(iter(graph.find_nodes(op="output")))
    outputs: list[fx.Node | None] = list(output.args[0])
    out_descs: list[Any] = list(output.meta.get("desc") or [None] * len(outputs))
    tangents = [n for n in placeholders if isinstance(n.meta.get("desc"), desc.TangentAOTInput)]
    primals = [n for n in placeholders if n not in tangents]
    num_fwd = sum(1 for o, d in zip(outputs, out_descs, strict=True)
                  if o is not None and not isinstance(d, desc.GradAOTOutput))
    _check_loss(outputs, out_descs, tangents, num_fwd)

    mutated = {d.mutated_input for d in out_descs if isinstance(d, desc.InputMutationAOTOutput)}
    mutated_inputs = [n for n in primals if n.meta.get("desc") in mutated]
    gradients = _pinned_storages(outputs[num_fwd:], placeholders, {})
    pinned = _pinned_storages(outputs[:num_fwd], placeholders, gradients)
    backward = _tangent_dependent(graph, tangents)

    parent: dict[str, str] = {}
    root: dict[str, str] = {}
    producers: list[Producer] = []
    for node in graph.nodes:
        if node.op != "call_function":
            if node.op not in ("placeholder", "output"):
                raise CaptureError(f"The joint graph holds a {node.op!r} node ({node.name}); remat expects ATen calls.")
            continue
        args = node.all_input_nodes
        in_storages = {s for a in args for s, _ in _storages(a.meta.get("val"))}
        out = _storages(node.meta.get("val"))
        if node.target is operator.getitem or (out and all(s in in_storages for s, _ in out)):
            if len(args) != 1:
                raise CaptureError(f"{node.name} ({node.target}) aliases one of several inputs; remat cannot fold it.")
            parent[node.name] = args[0].name
            root[node.name] = root.get(args[0].name, args[0].name)
            continue
        if any(s in in_storages for s, _ in out):
            raise CaptureError(f"{node.name} ({node.target}) returns both new tensors and views of its inputs.")
        roots = [root.get(a.name, a.name) for a in args]
        producers.append(Producer(
            name=node.name,
            op=str(node.target),
            deps=tuple(dict.fromkeys(r for r in roots if r not in placeholder_names)),
            memory=sum(b for s, b in out if s not in pinned),
            kind="backward" if node.name in backward else "forward",
            rng=_is_rng(node),
        ))
    rng_states = sum(_rng_state_bytes(n) for n in graph.nodes if n.op == "call_function" and _is_rng(n))
    fixed = _fixed_memory(primals, tangents, pinned, gradients, rng_states, mutated_inputs)
    return JointGraph(
        module=gm,
        name=name,
        producers=tuple(producers),
        parent=parent,
        root=root,
        primals=tuple(n.name for n in primals),
        tangents=tuple(n.name for n in tangents),
        outputs=tuple(o.name if isinstance(o, fx.Node) else None for o in outputs),
        num_forward_outputs=num_fwd,
        mutated=tuple(n.name for n in mutated_inputs),
        fixed=fixed,
    )


# -- helpers ------------------------------------------------------------------------------------


def _storages(val: Any) -> list[tuple[StorageWeakRef, int]]:
    """(storage, bytes) of every tensor in a node's value, each storage once."""
    if isinstance(val, torch.Tensor):
        return [(StorageWeakRef(val.untyped_storage()), val.untyped_storage().nbytes())]
    if isinstance(val, (list, tuple)):
        seen: dict[StorageWeakRef, int] = {}
        for v in val:
            for s, b in _storages(v):
                seen.setdefault(s, b)
        return list(seen.items())
    if val is None or isinstance(val, (int, float, bool)):
        return []
    raise CaptureError(f"A node of the joint graph has a value of type {type(val).__name__}; "
                       f"remat needs static shapes (capture with concrete example inputs).")


def _is_rng(node: fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def _tangent_dependent(graph: fx.Graph, tangents: Sequence[fx.Node]) -> set[str]:
    """Names of the nodes that read a tangent, directly or not: the backward, by structure."""
    reached = {t.name for t in tangents}
    for node in graph.nodes:
        if any(a.name in reached for a in node.all_input_nodes):
            reached.add(node.name)
    return reached


def _pinned_storages(outputs: Sequence[fx.Node | None], placeholders: Sequence[fx.Node],
                     counted: Mapping[StorageWeakRef, int]) -> dict[StorageWeakRef, int]:
    """Storages among ``outputs`` that the step allocates itself, but not those already ``counted``.

    The result includes ``counted``: together they are every storage the step returns.
    """
    inputs = {s for p in placeholders for s, _ in _storages(p.meta.get("val"))}
    pinned: dict[StorageWeakRef, int] = dict(counted)
    for o in outputs:
        if o is not None:
            for s, b in _storages(o.meta.get("val")):
                if s not in inputs:
                    pinned.setdefault(s, b)
    return pinned


def _fixed_memory(primals: Sequence[fx.Node], tangents: Sequence[fx.Node], pinned: Mapping[StorageWeakRef, int],
                  gradients: Mapping[StorageWeakRef, int], rng_states: int,
                  mutated: Sequence[fx.Node]) -> dict[str, int]:
    """Resident bytes by category; each storage counted once (tied weights share one).

    ``mutated_copies`` are the copies of updated inputs a backward recomputation may read,
    ``rng_states`` the generator states a replayed random op keeps: both bounds, rarely all used.
    """
    seen: set[StorageWeakRef] = set()

    def total(nodes: Sequence[fx.Node]) -> int:
        out = 0
        for n in nodes:
            for s, b in _storages(n.meta.get("val")):
                if s not in seen:
                    seen.add(s)
                    out += b
        return out

    def category(kind: type) -> list[fx.Node]:
        return [n for n in primals if isinstance(n.meta.get("desc"), kind)]

    return {
        "parameters": total(category(desc.ParamAOTInput)),
        "buffers": total(category(desc.BufferAOTInput)),
        "inputs": total([n for n in primals if not isinstance(n.meta.get("desc"), (desc.ParamAOTInput,
                                                                                    desc.BufferAOTInput))]),
        "tangents": total(tangents),
        "gradients": sum(gradients.values()),
        "outputs": sum(pinned.values()) - sum(gradients.values()),
        "rng_states": rng_states,
        "mutated_copies": sum(b for n in mutated for _, b in _storages(n.meta.get("val"))),
    }


def first_output(node: fx.Node) -> Any:
    """The (fake) value a node computes, or the first of them when it returns several (as a random op does)."""
    val = node.meta.get("val")
    return val[0] if isinstance(val, (list, tuple)) else val


def _rng_state_bytes(node: fx.Node) -> int:
    """Bytes a saved random state takes in the step's device memory (a CUDA generator's lives on the host)."""
    first = first_output(node)
    if isinstance(first, torch.Tensor) and first.device.type == "cpu":
        return torch.get_rng_state().nbytes
    return 0


def _check_loss(outputs: Sequence[fx.Node | None], out_descs: Sequence[Any], tangents: Sequence[fx.Node],
                num_fwd: int) -> None:
    """The step must return one differentiable scalar: the loss the backward starts from."""
    user = [o for o, d in zip(outputs, out_descs, strict=True) if isinstance(d, desc.PlainAOTOutput)]
    if len(user) != 1:
        raise CaptureError(
            f"The training step returns {len(user)} tensors; it must return the loss alone (a scalar). "
            f"Pass loss_fn=lambda model, *inputs: ... to turn the model's outputs into a loss.")
    val = user[0].meta.get("val") if user[0] is not None else None
    if not isinstance(val, torch.Tensor) or val.numel() != 1:
        shape = tuple(val.shape) if isinstance(val, torch.Tensor) else type(val).__name__
        raise CaptureError(f"The training step must return a scalar loss, got {shape}; reduce it (mean or sum) "
                           f"or pass a loss_fn.")
    if len(tangents) != 1:
        raise CaptureError("The loss does not depend on any parameter that requires a gradient; "
                           "there is no backward pass to schedule.")
    tail = zip(outputs[num_fwd:], out_descs[num_fwd:], strict=True)
    if any(o is not None and not isinstance(d, desc.GradAOTOutput) for o, d in tail):
        raise CaptureError("The joint graph's outputs are not forward outputs followed by gradients.")


def _explain(e: Exception, model: nn.Module) -> str:
    """A sentence saying why tracing ``model`` failed, with the original message."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    what = type(model).__name__
    if isinstance(e, (DataDependentOutputException, GuardOnDataDependentSymNode)):
        return (f"{what} cannot be captured: its Python control flow depends on tensor values (a branch on a "
                f"tensor, .item(), .tolist()), so it has no single static graph. Make the decision from shapes "
                f"or outside the training step. ({type(e).__name__}: {_first_line(e)})")
    if isinstance(e, DynamicOutputShapeException):
        return (f"{what} cannot be captured: an op's output shape depends on tensor values ({_first_line(e)}), "
                f"so its memory is unknown before it runs. Use fixed-size masks instead.")
    if isinstance(e, CaptureError):
        return str(e)
    return f"{what} cannot be captured as one static joint graph: {type(e).__name__}: {_first_line(e)}"


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
