"""The joint forward+backward graph of a training step, described the way a solver sees it.

AOTAutograd's joint graph holds the functional ATen ops of the forward and the backward together.
The solver only sees *producers*, the ops that allocate storage: views and ``getitem`` s are folded
into the producer whose storage they read, and the client keeps that map to re-create them at each
use. Memory is counted in storage bytes, each storage once (tied weights, views and in-place updates
share one).

An op with several outputs (batch norm, layer norm, dropout, fused attention) is one producer that
allocates all of them. When its main output is read by the forward only, each other output that
some op reads is a producer of its own (``output_of`` the op, no cost): batch norm's small saved
statistics outlive its output without keeping it alive. While the op's node and such an output are
both resident, that output is counted twice, so a plan never holds less than the step.

What stays resident through the step is fixed memory, not a node: parameters, buffers, inputs and
tensor constants; the step's outputs and their gradients (tangents), held from the forward to the
end of the backward; saved random states and copies of inputs the step updates in place; and,
when the step adds into gradients the parameters already hold (gradient accumulation), those; and
what the distributed engine that runs the step holds beside it: DDP's gradient buckets
(:mod:`._data_parallel`), FSDP2's shards and gathered parameters (:mod:`._fully_sharded`).
A producer of a value the step returns holds nothing more (its node has no memory, and a plan that
computes it again reuses the first value); a producer that returns such a value besides others
(batch norm's new running statistics) counts all its outputs, since computing it again allocates
them all.

The parameters' new gradients are not fixed memory: the backward allocates each where it computes
it, and returns them all at its end (autograd then hands them to ``.grad``). Their producers hold
their bytes like any other node, and the last node, STEP_END, reads them all, so a plan keeps every
gradient from where it is made to the end of the step.

Sizes come from the fake tensors of the trace, which match what kernels allocate, with the
exceptions of UNREDUCED_ON_CPU: on the CPU, ``F.mse_loss`` (and smooth L1, binary cross-entropy)
returns its scalar inside its whole unreduced buffer, and is counted so.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import torch
import torch.utils._pytree as pytree
from torch import fx
from torch._functorch._aot_autograd import descriptors as desc
from torch.multiprocessing.reductions import StorageWeakRef

from remat.schedules import Graph, Kind, Node

from ._errors import CaptureError

__all__ = ["FORWARD_END", "STEP_END", "InputKind", "JointGraph", "Producer", "describe", "first_output"]

FORWARD_END = "<forward outputs>"
"""The node that ends the forward when outputs are dropped after it: it reads them all, so a plan keeps
them until then (it computes nothing; a name no FX node has)."""

STEP_END = "<gradients>"
"""The node that ends the step: it reads every gradient the backward returns, so a plan keeps each from
where it is made to the end (it computes nothing; a name no FX node has)."""

MARKERS = (FORWARD_END, STEP_END)
"""Nodes that compute nothing: they only mark where a plan must still hold what they read."""

UNREDUCED_ON_CPU = ("aten.mse_loss.default", "aten.smooth_l1_loss.default", "aten.binary_cross_entropy.default")
"""Losses whose CPU kernel returns a reduced scalar inside a storage as large as its input (the unreduced
losses), where the trace's fake tensor has the scalar's bytes alone."""

InputKind = Literal["parameter", "buffer", "input"]
"""What a primal input of the joint graph is: a parameter, a buffer (module state) or a step input."""

ENGINE = ("data_parallel_buckets", "fully_sharded", "pipeline_buffers")
"""The parts of fixed memory the distributed engine that runs the step holds beside it: a DistributedDataParallel's
gradient buckets (:mod:`._data_parallel`), FSDP2's shards and the parameters and buffers it gathers or reduces
(:mod:`._fully_sharded`), a pipeline stage's receive buffers (:mod:`._pipeline_stage`). A step split into several
graphs holds them once."""

RESIDENT = ("parameters", "buffers", "inputs", "constants", "gradients", *ENGINE)
"""The parts of fixed memory a step holds whether or not it rematerializes: its state, its inputs, the
gradients the parameters already hold (when the step accumulates into them) and what the distributed engine
holds beside it (ENGINE). The rest of a step's peak is its activation memory, the new gradients included."""


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
    output_of: str | None = None
    """For an output of a multi-output op kept on its own: the op's producer (this node only takes it out)."""
    pinned: bool = False
    """Its storage is one the step returns (an output, a gradient): held to the end, computed once."""
    workspace_of: str | None = None
    """For the workspace of an op's kernel (:mod:`._workspace`): the op's producer, which reads it. It holds
    no tensor: its bytes are what the kernel allocates and frees inside while it runs."""
    reserve: bool = False
    """For bytes held back where the backward starts, for the other micro-batches in flight (:mod:`._in_flight`):
    it holds no tensor, and bounds what the forward may save."""

    @property
    def holds_no_tensor(self) -> bool:
        """Whether it stands for bytes no tensor of the step holds (a kernel's workspace, a reserve): a plan counts
        them, and running the plan computes, frees or moves nothing for it."""
        return self.workspace_of is not None or self.reserve

    @property
    def runs_an_op(self) -> bool:
        """Whether computing it runs an op of its own; the others take an output out of one, stand for bytes no
        tensor holds, or mark the end of the forward or of the step, at no cost."""
        return self.output_of is None and not self.holds_no_tensor and self.name not in MARKERS


@dataclass(frozen=True)
class JointGraph:
    """The joint graph of a training step and its producer view (what :meth:`to_graph` exports).

    ``parent`` maps each folded node (a view or a ``getitem``) to the node it reads, ``root`` to the
    producer, placeholder or constant owning its storage; ``outputs`` are the joint graph's outputs,
    the first ``num_forward_outputs`` of them the forward's (buffer updates, then the step's own
    outputs), the rest gradients (None where an input has none). ``mutated`` are the inputs the
    step updates in place (batch norm's running statistics), ``fixed`` the fixed memory by category.
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
    returned: Mapping[str, int]
    """Folded nodes whose storage the forward returns (batch norm's new running statistics), by output
    index: readers take them from what the step returns, so they keep nothing else alive."""
    dropped: tuple[int, ...] = ()
    """Forward outputs the caller drops before the backward (outputs without gradient, when the backward
    starts from one output alone): held until the end of the forward only, marked by FORWARD_END."""
    rng_states: Mapping[str, int] = field(default_factory=dict)
    """Bytes of device memory the random state of each random op takes, by op, when a plan computes the op
    again (0 where the generator's state lives on the host, as CUDA's does); ``fixed["rng_states"]`` is what
    they take if every one is (:func:`_replaying`), a bound: an op computed once saves none."""

    @property
    def fixed_memory(self) -> int:
        """Bytes resident through the whole step (the sum of ``fixed``'s parts)."""
        return sum(self.fixed.values())

    def fixed_memory_replaying(self, replayed: Iterable[str]) -> int:
        """The bytes resident through a step whose plan computes again exactly the random ops ``replayed``."""
        again = set(replayed)
        states = _replaying(b for name, b in self.rng_states.items() if name in again)
        return self.fixed_memory - self.fixed["rng_states"] + states

    @property
    def resident_memory(self) -> int:
        """Bytes of state, inputs and gradients: what the step holds besides its activations."""
        return sum(self.fixed[k] for k in RESIDENT)

    @property
    def largest_workspace(self) -> int:
        """Bytes of the largest kernel workspace the step allocates (ops run one at a time): the most of a plan's
        peak that a dispatcher mode (:class:`~._measure.LiveBytes`) cannot see."""
        return max((p.memory for p in self.producers if p.workspace_of), default=self.fixed["small_workspaces"])

    @cached_property
    def index(self) -> dict[str, Producer]:
        """Each producer by name."""
        return {p.name: p for p in self.producers}

    def to_graph(self, costs: Mapping[str, float], *, cost_unit: str) -> Graph:
        """The remat.graph/v1 of this step with ``costs[name]`` per producer."""
        position = {p.name: i for i, p in enumerate(self.producers)}
        fx_nodes = {n.name: n for n in self.module.graph.nodes}
        nodes = [
            Node(
                id=p.name,
                deps=tuple(position[d] for d in p.deps),
                cost=float(costs[p.name]),
                memory=p.memory,
                kind=p.kind,
                meta={"op": p.op, **({"rng": True} if p.rng else {}),
                      **({"workspace_of": p.workspace_of} if p.workspace_of else {}),
                      **_source(fx_nodes.get(p.workspace_of or p.name))},
            )
            for p in self.producers
        ]
        return Graph(nodes, name=self.name, fixed_memory=self.fixed_memory, cost_unit=cost_unit)


def describe(gm: fx.GraphModule, *, num_forward_outputs: int, input_kinds: Sequence[InputKind], name: str,
             drop_outputs: bool = False, accumulating: bool = False,
             engine: Mapping[str, int] | None = None) -> JointGraph:
    """The producer view of AOTAutograd's joint graph ``gm``.

    ``input_kinds`` says what each primal (non-tangent) placeholder is, in order. With
    ``drop_outputs``, the step's outputs without gradient are held until the end of the forward only
    (the caller drops them before the backward); else every output is held to the end of the step.
    With ``accumulating``, the parameters already hold gradients that the step adds into: they are
    fixed memory (the new gradients are nodes either way). ``engine`` is what the distributed engine that runs
    the step holds beside it, by ENGINE category, fixed memory too. Raises CaptureError for graphs remat cannot
    plan (symbolic shapes, values of unknown size).
    """
    graph = gm.graph
    for node in graph.nodes:
        _check_static(node)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    tangents = [n for n in placeholders if isinstance(n.meta.get("desc"), desc.TangentAOTInput)]
    primals = [n for n in placeholders if n not in tangents]
    if len(input_kinds) != len(primals):
        raise CaptureError(f"The joint graph has {len(primals)} inputs where {len(input_kinds)} were expected.")
    constants = [n for n in graph.nodes if n.op == "get_attr"]
    output = next(iter(graph.find_nodes(op="output")))
    outputs: list[fx.Node | None] = list(output.args[0])
    out_descs: list[Any] = list(output.meta.get("desc") or [None] * len(outputs))

    mutated = {d.mutated_input for d in out_descs if isinstance(d, desc.InputMutationAOTOutput)}
    mutated_inputs = [n for n in primals if n.meta.get("desc") in mutated]
    with_tangent = {t.meta["desc"].output for t in tangents}
    dropped = tuple(i for i, d in enumerate(out_descs[:num_forward_outputs])
                    if drop_outputs and outputs[i] is not None and d not in with_tangent
                    and not isinstance(d, desc.InputMutationAOTOutput))
    sources = [*placeholders, *constants]
    gradients = _pinned_storages(outputs[num_forward_outputs:], sources)
    kept = [o for i, o in enumerate(outputs[:num_forward_outputs]) if i not in dropped]
    pinned = _pinned_storages(kept, sources)
    backward = _tangent_dependent(graph, tangents)
    kept_apart = _outputs_kept_apart(graph, backward, pinned, gradients)

    returned = _returned_values(graph, outputs[:num_forward_outputs], pinned)
    parent: dict[str, str] = {}
    root: dict[str, str] = {}
    producers: list[Producer] = []
    leaves = {n.name for n in sources}
    source_storages = {s for n in sources for s, _ in _storages(n.meta.get("val"))}
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        if node.op != "call_function":
            raise CaptureError(f"The joint graph holds a {node.op!r} node ({node.name}); remat expects ATen calls.")
        args = node.all_input_nodes
        kind: Kind = "backward" if node.name in backward else "forward"
        if node.name in kept_apart:
            op, k = args[0], node.args[1]
            producers.append(Producer(name=node.name, op=f"{op.target}[{k}]", deps=(op.name,),
                                      memory=_bytes(node.meta.get("val")), kind=kind, rng=False, output_of=op.name))
            continue
        in_storages = {s for a in args for s, _ in _storages(a.meta.get("val"))}
        out = _storages(node.meta.get("val"))
        roots = [root.get(a.name, a.name) for a in args if a.name not in returned]
        if len(args) > 1 and out and all(s in source_storages for s, _ in out):
            # an in-place write into an input (Inductor keeps buffer updates in the graph): it runs once
            producers.append(Producer(name=node.name, op=str(node.target), memory=0, kind=kind, rng=False,
                                      deps=tuple(dict.fromkeys(r for r in roots if r not in leaves)), pinned=True))
            continue
        if node.target is operator.getitem or (out and all(s in in_storages for s, _ in out)):
            if len(args) != 1:
                raise CaptureError(f"{node.name} ({node.target}) aliases one of several inputs; remat cannot fold it.")
            parent[node.name] = args[0].name
            root[node.name] = root.get(args[0].name, args[0].name)
            continue
        if any(s in in_storages for s, _ in out):
            raise CaptureError(f"{node.name} ({node.target}) returns both new tensors and views of its inputs.")
        returned_whole = bool(out) and all(s in pinned for s, _ in out)
        producers.append(Producer(
            name=node.name,
            op=str(node.target),
            deps=tuple(dict.fromkeys(r for r in roots if r not in leaves)),
            memory=0 if returned_whole else _allocated(node, sum(b for _, b in out)),
            kind=kind,
            rng=_is_rng(node),
            pinned=returned_whole,
        ))
    if dropped:
        ends = [root.get(n, n) for n in (outputs[i].name for i in dropped)]  # type: ignore[union-attr]
        end = Producer(name=FORWARD_END, op="end of the forward", memory=0, kind="forward", rng=False,
                       deps=tuple(dict.fromkeys(r for r in ends if r not in leaves)))
        producers.insert(_end_of_forward(producers, [o.name for o in outputs[:num_forward_outputs] if o is not None],
                                         root), end)
    made = {p.name for p in producers}
    grads = [root.get(o.name, o.name) for o in outputs[num_forward_outputs:] if o is not None]
    producers.append(Producer(name=STEP_END, op="end of the step", memory=0, kind="backward", rng=False,
                              deps=tuple(dict.fromkeys(r for r in grads if r in made))))
    rng_states = {n.name: _rng_state_bytes(n) for n in graph.nodes if n.op == "call_function" and _is_rng(n)}
    fixed = _fixed_memory(primals, input_kinds, constants, tangents, pinned,
                          sum(gradients.values()) if accumulating else 0, _replaying(rng_states.values()),
                          mutated_inputs, engine or {})
    return JointGraph(
        module=gm,
        name=name,
        producers=tuple(producers),
        parent=parent,
        root=root,
        primals=tuple(n.name for n in primals),
        tangents=tuple(n.name for n in tangents),
        outputs=tuple(o.name if isinstance(o, fx.Node) else None for o in outputs),
        num_forward_outputs=num_forward_outputs,
        mutated=tuple(n.name for n in mutated_inputs),
        fixed=fixed,
        returned=returned,
        dropped=dropped,
        rng_states=rng_states,
    )


def _end_of_forward(producers: Sequence[Producer], forward_outputs: Sequence[str], root: Mapping[str, str]) -> int:
    """Where the forward ends among the producers: before the first backward one, or later if a forward
    output comes after that."""
    position = {p.name: k for k, p in enumerate(producers)}
    first_backward = next((k for k, p in enumerate(producers) if p.kind == "backward"), len(producers))
    last_output = max((position[r] for r in (root.get(o, o) for o in forward_outputs) if r in position), default=-1)
    return max(first_backward, last_output + 1)


def first_output(node: fx.Node) -> Any:
    """The (fake) value a node computes, or the first of them when it returns several (as a random op does)."""
    val = node.meta.get("val")
    return val[0] if isinstance(val, (list, tuple)) else val


# -- helpers ------------------------------------------------------------------------------------


def _check_static(node: fx.Node) -> None:
    """Refuse a node whose size is not a number: remat needs every tensor's bytes before the step runs."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    tensors = [t for t in pytree.tree_leaves(node.meta.get("val")) if isinstance(t, torch.Tensor)]
    if all(isinstance(t.untyped_storage().nbytes(), int) for t in tensors):
        return
    where = _user_line(node.meta.get("stack_trace") or "")
    if any(free_unbacked_symbols(t) for t in tensors):
        raise CaptureError(f"{node.target}{where} makes a tensor whose size depends on tensor values, so its memory "
                           f"is unknown before the step runs. Use fixed-size masks (torch.where) instead of "
                           f"indexing by a mask or nonzero().")
    raise CaptureError(f"The step was traced with symbolic shapes ({node.target}{where}); remat plans one graph per "
                       f"input shape: compile with dynamic=False.")


def _source(node: fx.Node | None) -> dict[str, str]:
    """``module`` (its path) and ``line`` (the innermost source line) of the code that made ``node``, those
    the trace records (a backward op: its forward op's): node metadata of the graph, for reading a plan."""
    if node is None:
        return {}
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    path = str(list(stack.values())[-1][0]) if stack else ""
    for prefix in ("L['model'].", "L['self'].", "L['model']", "L['self']"):
        if path.startswith(prefix):
            path = path[len(prefix):]
            break
    frames = [line.strip() for line in str(node.meta.get("stack_trace") or "").splitlines()
              if line.strip().startswith("File ")]
    line = ""
    if frames:
        file, _, rest = frames[-1][len("File "):].partition(", line ")
        line = f"{file.strip(chr(34)).rsplit('/', 1)[-1]}:{rest.split(',', 1)[0]}"
    return {k: v for k, v in (("module", path), ("line", line)) if v}


def _user_line(stack_trace: str) -> str:
    """`` (File "...", line N, in f: `code`)`` for the innermost frame of an FX node's stack trace, or ''."""
    lines = [line.strip() for line in stack_trace.splitlines()]
    frames = [k for k, line in enumerate(lines) if line.startswith("File ")]
    if not frames:
        return ""
    k = frames[-1]
    code = lines[k + 1] if k + 1 < len(lines) and lines[k + 1].strip("^~ ") else ""
    return f" ({lines[k]}: `{code}`)"


def _storages(val: Any) -> list[tuple[StorageWeakRef, int]]:
    """(storage, bytes) of every tensor in a node's value, each storage once (sizes are static: see _check_static)."""
    if isinstance(val, torch.Tensor):
        return [(StorageWeakRef(val.untyped_storage()), _allocator_bytes(val.untyped_storage().nbytes(), val.device))]
    if isinstance(val, (list, tuple)):
        seen: dict[StorageWeakRef, int] = {}
        for v in val:
            for s, b in _storages(v):
                seen.setdefault(s, b)
        return list(seen.items())
    if val is None or isinstance(val, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return []
    raise CaptureError(f"A node of the joint graph has a value of type {type(val).__name__}; remat needs tensors of "
                       f"static shapes.")


CUDA_BLOCK = 512
"""Bytes the CUDA caching allocator rounds every allocation up to a multiple of (its smallest block)."""


def _allocator_bytes(nbytes: int, device: torch.device) -> int:
    """The bytes a storage of ``nbytes`` takes from its device's allocator: on CUDA devices, rounded up to
    CUDA_BLOCK (what ``torch.cuda.max_memory_allocated`` counts); elsewhere, as it is."""
    if device.type != "cuda":
        return nbytes
    return -(-nbytes // CUDA_BLOCK) * CUDA_BLOCK


def _bytes(val: Any) -> int:
    return sum(b for _, b in _storages(val))


def _allocated(node: fx.Node, traced: int) -> int:
    """The bytes ``node``'s kernel allocates, where the trace says ``traced``: more for UNREDUCED_ON_CPU."""
    if str(node.target) not in UNREDUCED_ON_CPU or not node.args:
        return traced
    value = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.device.type != "cpu" or _arguments(node).get("reduction") == 0:
        return traced
    return max(traced, value.numel() * value.element_size())


def _is_rng(node: fx.Node) -> bool:
    """Whether the op draws random numbers: a seeded op (dropout, attention with dropout), unless its
    dropout probability is 0 or it is not training, when it draws none."""
    if torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return False
    if getattr(node.target, "_schema", None) is None:
        return True
    values = _arguments(node)
    return not (values.get("dropout_p") == 0 or values.get("p") == 0 or values.get("train") is False)


def _arguments(node: fx.Node) -> dict[str, Any]:
    """The arguments of an ATen call by name, defaults included (none for a call without a schema)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {}
    return {a.name: node.args[i] if i < len(node.args) else node.kwargs.get(a.name, a.default_value)
            for i, a in enumerate(schema.arguments)}


def _tangent_dependent(graph: fx.Graph, tangents: Sequence[fx.Node]) -> set[str]:
    """Names of the nodes that read a tangent, directly or not: the backward, by structure."""
    reached = {t.name for t in tangents}
    for node in graph.nodes:
        if any(a.name in reached for a in node.all_input_nodes):
            reached.add(node.name)
    return reached


def _outputs_kept_apart(graph: fx.Graph, backward: set[str], pinned: Mapping[StorageWeakRef, int],
                        gradients: Mapping[StorageWeakRef, int]) -> set[str]:
    """The ``getitem`` s that take an output of a multi-output op as a value of its own.

    A gradient among other outputs (a weight's gradient beside the input's) is always one: it is held
    to the end of the step, its siblings only until their last reader. Other outputs are only worth
    it when the op can go before them: its main output (the largest that only the forward reads)
    stays the op's own, and every other output that some op reads and that the step does not return
    becomes a value of its own. Where every output is read by the backward (max pooling's output and
    indices), they stay together: none could go sooner, and the values of their own would be counted
    twice.
    """
    apart: set[str] = set()
    for node in graph.nodes:
        val = node.meta.get("val")
        if node.op != "call_function" or not isinstance(val, (list, tuple)) or len(val) < 2:
            continue
        items = [u for u in node.users if u.target is operator.getitem and isinstance(u.args[1], int)]
        storages = [_storages(val[u.args[1]]) for u in items]
        if not items or any(len(s) != 1 for s in storages):
            continue
        if len({s[0][0] for s in storages}) != len(storages):
            continue  # outputs sharing a storage stay together
        grads = [u for u, s in zip(items, storages, strict=True) if s[0][0] in gradients]
        if len(grads) < len(items):
            apart.update(u.name for u in grads)
        read = [u for u, s in zip(items, storages, strict=True)
                if u.users and s[0][0] not in pinned and s[0][0] not in gradients]
        forward_only = [u for u in read if all(r.name not in backward for r in _readers(u))]
        if forward_only:
            main = max(forward_only, key=lambda u: _bytes(val[u.args[1]]))
            apart.update(u.name for u in read if u is not main)
    return apart


def _readers(node: fx.Node) -> list[fx.Node]:
    """The nodes that read ``node``'s storage: its users, and through views of it, theirs."""
    storage = {s for s, _ in _storages(node.meta.get("val"))}
    readers, todo = [], list(node.users)
    while todo:
        user = todo.pop()
        readers.append(user)
        if user.op == "call_function" and storage and {s for s, _ in _storages(user.meta.get("val"))} <= storage:
            todo.extend(user.users)
    return readers


def _returned_values(graph: fx.Graph, forward_outputs: Sequence[fx.Node | None],
                     pinned: Mapping[StorageWeakRef, int]) -> dict[str, int]:
    """Folded nodes (``getitem`` s, views) holding a storage the forward returns, with that output's index."""
    index: dict[StorageWeakRef, int] = {}
    for i, o in enumerate(forward_outputs):
        if o is not None:
            for s, _ in _storages(o.meta.get("val")):
                index.setdefault(s, i)
    returned: dict[str, int] = {}
    for node in graph.nodes:
        if node.op != "call_function" or node.target is not operator.getitem:
            continue
        found = _storages(node.meta.get("val"))
        if len(found) == 1 and found[0][0] in index and found[0][0] in pinned:
            returned[node.name] = index[found[0][0]]
    return returned


def _pinned_storages(outputs: Sequence[fx.Node | None], sources: Sequence[fx.Node]) -> dict[StorageWeakRef, int]:
    """Storages among ``outputs`` that the step allocates itself (not its inputs'), with their bytes."""
    inputs = {s for p in sources for s, _ in _storages(p.meta.get("val"))}
    pinned: dict[StorageWeakRef, int] = {}
    for o in outputs:
        if o is not None:
            for s, b in _storages(o.meta.get("val")):
                if s not in inputs:
                    pinned.setdefault(s, _allocated(o, b))
    return pinned


def _replaying(states: Iterable[int]) -> int:
    """Bytes the generator states of the random ops a plan computes again take: each op's, saved when it first
    draws, and one more while one draws again (the generator's own state, put aside until it is back)."""
    kept = list(states)
    return sum(kept) + max(kept, default=0)


def _fixed_memory(primals: Sequence[fx.Node], kinds: Sequence[InputKind], constants: Sequence[fx.Node],
                  tangents: Sequence[fx.Node], pinned: Mapping[StorageWeakRef, int], gradients: int,
                  rng_states: int, mutated: Sequence[fx.Node], engine: Mapping[str, int]) -> dict[str, int]:
    """Resident bytes by category; each storage counted once (tied weights share one).

    ``gradients`` are those the parameters hold before the step (0 unless it accumulates into them),
    ``outputs`` the storages of the step's outputs held to its end (``pinned``); ``mutated_copies``
    are the copies of updated inputs a backward recomputation may read, ``rng_states`` the generator
    states a replayed random op keeps: both bounds, rarely all used. ``small_workspaces`` is set when
    kernels' workspaces are measured (:func:`._workspace.with_workspaces`).
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

    def of_kind(kind: InputKind) -> list[fx.Node]:
        return [n for n, k in zip(primals, kinds, strict=True) if k == kind]

    return {
        "parameters": total(of_kind("parameter")),
        "buffers": total(of_kind("buffer")),
        "inputs": total(of_kind("input")),
        "constants": total(constants),
        "tangents": total(tangents),
        "gradients": gradients,
        "outputs": sum(pinned.values()),
        "rng_states": rng_states,
        "mutated_copies": sum(b for n in mutated for _, b in _storages(n.meta.get("val"))),
        **{k: engine.get(k, 0) for k in ENGINE},
        "small_workspaces": 0,
    }


def _rng_state_bytes(node: fx.Node) -> int:
    """Bytes a saved random state takes in the step's device memory (a CUDA generator's lives on the host)."""
    first = first_output(node)
    if isinstance(first, torch.Tensor) and first.device.type == "cpu":
        return torch.get_rng_state().nbytes
    return 0
