"""Lower a plan into the forward and backward FX graphs that run it, op for op.

The plan is split at its first compute of a backward node: what is resident there is what the
forward saves for the backward. Every ``compute`` becomes a fresh copy of the joint graph's node
(so a value computed three times has three instances), reading the live instance of each input;
views and ``getitem`` s are re-created right before each use, so they never outlive their reader;
every ``free`` becomes a call to :func:`release` after which FX's code generator drops the
instance (without the frees, for a compiler that places its own, a value the backward never reads is
not passed to it). A random op computed more than once saves the generator state at its first compute and
replays it at the others, so every instance draws the same numbers (dropout by the custom ops of
:mod:`._random`, which Inductor compiles too). An input the step updates in
place (batch norm's running statistics) reaches the backward as a copy taken before the update. A
value the step returns is computed once: a plan that computes it again gets the first instance.

An ``offload`` copies the value's storage to host memory (:class:`~._offload.HostCopies`) and the
value leaves the live set; its device instance is dropped, and a reload issued, where the plan's
timing puts that memory's release or allocation (:func:`~._offload.effect_points`); a reloaded
value is waited for right before its first reader or its free; a ``wait`` holds the compute stream
until an offload's copy has ended. Host copies made in the forward go to
the backward with the saved values, and every host copy is held to the end of the step, as the
plan counts it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

from remat.schedules import Graph, Plan, Timing

from ._errors import PlanRejected
from ._joint import FORWARD_END, MARKERS, STEP_END, JointGraph, first_output
from ._offload import HostCopies, effect_points
from ._random import REPLAYED

__all__ = ["boxed_compiler", "lower", "release", "split_point"]


def release(*values: Any) -> None:
    """Where the plan frees ``values``: the generated code drops them right after this call."""


fx.node.has_side_effect(release)


def boxed_compiler(gm: fx.GraphModule, _example_inputs: Any) -> Callable[[list[Any]], Any]:
    """Run a lowered graph with the boxed convention: it empties its argument list before it starts.

    The caller's list would otherwise keep every saved tensor alive through the whole backward.
    """
    gm.graph.set_codegen(fx.graph._BoxedCodeGen())
    gm.recompile()
    forward = gm.forward

    def run(args: list[Any]) -> Any:
        return forward(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def lower(joint: JointGraph, graph: Graph, plan: Plan, *, frees: bool = True,
          timing: Timing | None = None) -> tuple[fx.GraphModule, fx.GraphModule]:
    """The forward and backward graph modules that execute ``plan`` (already simulated) on ``joint``.

    With ``frees`` off, values are dropped after their last use instead of where the plan frees
    them (for a compiler that plans its own buffers, which the release calls would get in the way of).
    A plan with transfers needs the frees and its simulation's ``timing``.
    """
    gm = joint.module
    nodes = {n.name: n for n in gm.graph.nodes}
    steps = [(op, graph.nodes[v].id) for op, v in plan.steps]
    split = split_point(joint, steps)
    _check_order(joint, steps, split)
    counts: dict[str, int] = {}
    for op, name in steps:
        if op == "compute":
            counts[name] = counts.get(name, 0) + 1
    moves = _Moves.of(steps, plan, timing, frees=frees) if plan.has_transfers else None

    fwd = _Phase(joint, nodes, counts, frees=frees, moves=moves)
    for placeholder in joint.primals:
        fwd.inputs[placeholder] = fwd.graph.placeholder(placeholder)
        fwd.inputs[placeholder].meta = dict(nodes[placeholder].meta)
    fwd.run(steps[:split])
    forward_outputs = [fwd.output_value(i) for i in range(joint.num_forward_outputs)]

    bwd = _Phase(joint, nodes, counts, frees=frees, moves=moves, earlier=fwd)
    fwd.carry_into(bwd, later=steps[split:])
    tangents = []
    for name in joint.tangents:
        tangents.append(bwd.graph.placeholder(name))
        tangents[-1].meta = dict(nodes[name].meta)
        bwd.inputs[name] = tangents[-1]
    bwd.lazy_before = tangents[0]
    bwd.run(steps[split:], start=split)
    bwd.finish()
    if not frees:
        bwd.drop_unread_saves()
    gradients = [bwd.output_value(i) if joint.outputs[i] is not None else None
                 for i in range(joint.num_forward_outputs, len(joint.outputs))]
    bwd.graph.output(tuple(gradients))

    fwd.graph.output(tuple(forward_outputs + bwd.unique_saves()))
    return fx.GraphModule(gm, fwd.graph), fx.GraphModule(gm, bwd.graph)


def split_point(joint: JointGraph, steps: Sequence[tuple[str, str]]) -> int:
    """Where the forward ends: right after the end of the forward when outputs are dropped there (see
    FORWARD_END), else at the plan's first compute of a backward node."""
    ends = {FORWARD_END} if FORWARD_END in joint.index else {p.name for p in joint.producers if p.kind == "backward"}
    for k, (op, name) in enumerate(steps):
        if op == "compute" and name in ends:
            return k + 1 if name == FORWARD_END else k
    raise PlanRejected("The plan never computes a backward node, so it has no backward pass to run.")


def _check_order(joint: JointGraph, steps: Sequence[tuple[str, str]], split: int) -> None:
    """Rules the simulator does not know: forward outputs come before the split, random ops in the model's order."""
    index = joint.index
    first: dict[str, int] = {}
    for k, (op, name) in enumerate(steps):
        if op == "compute":
            first.setdefault(name, k)
    for i in range(joint.num_forward_outputs):
        root = joint.root.get(joint.outputs[i] or "", joint.outputs[i])
        if root in index and first[root] >= split:
            raise PlanRejected(f"The plan first computes {root!r}, a forward output, after the backward has started.")
    rng = [p.name for p in joint.producers if p.rng]
    if sorted(rng, key=first.__getitem__) != rng:
        raise PlanRejected("The plan runs random ops in another order than the model, so they would draw "
                           "different numbers than the unpatched model.")


@dataclass
class _Moves:
    """The transfers of a plan as the lowering places them, and the copies that run them."""

    steps: Sequence[tuple[str, str]]
    due: dict[int, list[int]]
    """Compute statement (or the plan's length, for the end) -> the transfers whose memory effect comes before it."""
    made: set[int]
    """Compute statements whose value is offloaded later: where it is complete is marked for the copy."""
    copies: HostCopies = field(default_factory=HostCopies)
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The node metadata of each offloaded tensor, by key, for the reloaded one."""

    @classmethod
    def of(cls, steps: Sequence[tuple[str, str]], plan: Plan, timing: Timing | None, *, frees: bool) -> _Moves:
        """The transfers of ``plan`` placed by its ``timing``; the frees must be lowered too."""
        assert frees and timing is not None, "a plan with transfers runs where the plan frees, from its timing"
        due: dict[int, list[int]] = {}
        for k, point in effect_points(plan, timing).items():
            due.setdefault(point, []).append(k)
        made, last = set(), {}
        for k, (op, name) in enumerate(steps):
            if op == "compute":
                last[name] = k
            elif op == "offload":
                made.add(last[name])
        return cls(steps, due, made)


def _label(what: str, name: str, element: int | None = None) -> str:
    """A placeholder's name (an identifier) for ``what`` of a value or of one of its outputs."""
    return f"{what}_{name}" if element is None else f"{what}_{name}_{element}"


def _key(name: str, element: int | None) -> str:
    """The key of one tensor of a value for the copies: its name, or ``name[i]`` for an op's output ``i``."""
    return name if element is None else f"{name}[{element}]"


class _Phase:
    """One of the two graphs being built: the live instance of every resident producer, by name.

    The backward phase reads what the forward left (``earlier``): values live at the split come in
    as placeholders (:meth:`carry_into`); inputs and returned values it reads later on come in as
    placeholders of their own, made when first read. ``saves`` pairs each with the forward's node.
    """

    def __init__(self, joint: JointGraph, nodes: dict[str, fx.Node], counts: dict[str, int], *, frees: bool,
                 moves: _Moves | None = None, earlier: _Phase | None = None) -> None:
        self.joint = joint
        self.nodes = nodes
        self.counts = counts
        self.frees = frees
        self.moves = moves
        self.earlier = earlier
        self.graph = fx.Graph()
        self.inputs: dict[str, fx.Node] = {}
        self.current: dict[str, fx.Node | dict[int, fx.Node]] = {}
        """Live instance of each resident producer; a saved multi-output one is a dict of its elements."""
        self.first: dict[str, fx.Node] = {}
        """The first instance of each producer of a returned value (computing it again reuses it)."""
        self.rng_state: dict[str, fx.Node] = {}
        self.captured: dict[int, fx.Node] = {}
        self.computed: set[str] = set()
        self.saves: list[tuple[fx.Node, fx.Node]] = []
        """(the earlier phase's node, this phase's placeholder) for every value passed on to this phase."""
        self.lazy_before: fx.Node | None = None
        self.host: dict[str, dict[int | None, fx.Node]] = {}
        """The host copies of each offloaded value, by output (None for a value that is one tensor)."""
        self.leaving: dict[int, dict[int | None, fx.Node]] = {}
        """By offload statement, the device tensors of the value (by output) kept until the plan releases them."""
        self.reloads: dict[str, int] = {}
        """Values the plan has reloaded whose reload is not issued yet, and the reload statement."""
        self.loading: set[str] = set()
        """Values whose reload is issued and not yet waited for."""
        self._constants: dict[str, fx.Node] = {}
        self._pending_free: list[fx.Node] = []
        self._outputs_of = _outputs_by_root(joint)

    def run(self, steps: Sequence[tuple[str, str]], start: int = 0) -> None:
        """Add the plan's ``steps``, the first being statement ``start`` of the plan."""
        for k, (op, name) in enumerate(steps, start):
            if op == "compute":
                self._flush_frees()
                self._transfers_due(k)
            if self.joint.index[name].holds_no_tensor:
                continue  # a kernel's workspace or a reserve: nothing to compute, free or move
            if name in MARKERS:  # computes nothing; what it reads is returned from where it lives
                if name == STEP_END and op == "compute":
                    self._capture_gradients()
                self.computed.add(name)
                continue
            if op == "free":
                self._ready(name)
                instance = self.current.pop(name)
                self._pending_free.extend(instance.values() if isinstance(instance, dict) else [instance])
                continue
            if op == "offload":
                self._offload(k, name)
                continue
            if op == "reload":
                self._reload(k, name)
                continue
            if op == "wait":
                self._wait(name)
                continue
            instance = self.current[name] = self._compute(name)
            if self.moves is not None and k in self.moves.made:
                self.graph.call_function(self.moves.copies.made, (name, instance))
            if name not in self.computed:
                self._capture_outputs(name)
            if self.joint.index[name].pinned:
                self.first.setdefault(name, self.current[name])  # type: ignore[arg-type]
            self.computed.add(name)
        self._flush_frees()

    def finish(self) -> None:
        """End the step: the transfers due at the end, the waits still owed, and the host copies let go."""
        if self.moves is not None:
            self._transfers_due(len(self.moves.steps))
        for name in list(self.loading):
            self._ready(name)
        self._flush_frees()
        hosts = [node for copies in self.host.values() for node in copies.values()]
        if hosts:
            self.graph.call_function(release, tuple(hosts))

    def _offload(self, k: int, name: str) -> None:
        """Start copying ``name`` to host memory; its device tensors stay until the plan releases them."""
        assert self.moves is not None
        instance = self.current.pop(name)
        if self.joint.index[name].pinned:
            return  # a value the step returns holds no memory of its own: it stays where it is held
        copies = self.moves.copies
        self.leaving[k] = self._elements(name, instance)
        self.host[name] = {}
        for i, element in self.leaving[k].items():
            key = _key(name, i)
            host = self.graph.call_function(copies.offload, (element, name, key))
            host.meta = {"val": _host_value(element.meta["val"])}
            self.moves.meta[key] = dict(element.meta)
            self.host[name][i] = host

    def _reload(self, k: int, name: str) -> None:
        """``name`` is resident again from statement ``k``; its copy is issued where the plan's timing says."""
        if self.joint.index[name].pinned:
            self.current[name] = self._first_instance(name)
        else:
            self.reloads[name] = k

    def _wait(self, name: str) -> None:
        """Hold the compute stream until the offload of ``name`` has been copied."""
        assert self.moves is not None
        for i in self.host.get(name, {}):
            key = _key(name, i)
            self.graph.call_function(self.moves.copies.wait, (key, self.moves.meta[key]["val"].device))

    def _transfers_due(self, k: int) -> None:
        """Before compute statement ``k``: drop the offloaded tensors the plan releases, issue the reloads it starts."""
        if self.moves is None:
            return
        for step in self.moves.due.get(k, ()):
            op, name = self.moves.steps[step]
            if op == "offload":
                for i, element in self.leaving.pop(step, {}).items():
                    self.graph.call_function(self.moves.copies.release, (_key(name, i), element))
            elif self.reloads.get(name) == step:
                self._issue(name)

    def _issue(self, name: str) -> None:
        """Issue the reload of ``name``: its device tensors, to wait for before use."""
        assert self.moves is not None
        del self.reloads[name]
        reloaded = {}
        for i, host in self.host[name].items():
            key = _key(name, i)
            meta = self.moves.meta[key]
            reloaded[i] = self.graph.call_function(self.moves.copies.reload, (host, key))
            reloaded[i].meta = dict(meta)
        self.current[name] = reloaded.pop(None) if None in reloaded else reloaded  # type: ignore[assignment]
        self.loading.add(name)

    def _ready(self, name: str | None) -> None:
        """Make a reloaded ``name`` usable here: issue its reload if it is not yet, and wait for it."""
        if name in self.reloads:
            self._issue(name)
        if name not in self.loading:
            return
        assert self.moves is not None and name is not None
        self.loading.discard(name)
        instance = self.current[name]
        ready = {}
        for i, element in (instance.items() if isinstance(instance, dict) else [(None, instance)]):
            ready[i] = self.graph.call_function(self.moves.copies.ready, (element, _key(name, i)))
            ready[i].meta = dict(element.meta)
        self.current[name] = ready.pop(None) if None in ready else ready  # type: ignore[assignment]

    def _elements(self, name: str, instance: fx.Node | dict[int, fx.Node]) -> dict[int | None, fx.Node]:
        """The tensors of a live value: itself (under None), or each tensor output of an op with several."""
        if isinstance(instance, dict):
            return dict(instance)  # type: ignore[arg-type]
        val = self.nodes[name].meta.get("val")
        if not isinstance(val, (list, tuple)):
            return {None: instance}
        elements: dict[int | None, fx.Node] = {}
        for k, element in enumerate(val):
            if isinstance(element, torch.Tensor):
                elements[k] = self.graph.call_function(operator.getitem, (instance, k))
                elements[k].meta = {"val": element}
        return elements

    def _compute(self, name: str) -> fx.Node:
        node = self.nodes[name]
        producer = self.joint.index[name]
        if producer.pinned and name in self.computed:
            return self._first_instance(name)
        if producer.output_of is not None:
            self._ready(producer.output_of)
            source = self.current[producer.output_of]
            if isinstance(source, dict):
                return source[node.args[1]]  # type: ignore[index]
        if not producer.rng or self.counts[name] == 1:
            return self.graph.node_copy(node, self._arg)
        args = fx.node.map_arg(node.args, self._arg)
        kwargs = fx.node.map_arg(node.kwargs, self._arg)
        op: Any = node.target
        if name in self.rng_state and op in REPLAYED:
            instance = self.graph.call_function(REPLAYED[op].with_state, (self.rng_state[name], *args), kwargs)
        elif name in self.rng_state:
            instance = self.graph.call_function(run_with_rng_state, (self.rng_state[name], op, *args), kwargs)
        elif op in REPLAYED:  # the op's outputs, then the state: readers take the first ones as the op's
            instance = self.graph.call_function(REPLAYED[op].saving, args, kwargs)
            self.rng_state[name] = self.graph.call_function(operator.getitem, (instance, len(node.meta["val"])))
            self.rng_state[name].meta["val"] = _fake_rng_state(node)
            instance.meta = {**node.meta, "val": (*node.meta["val"], self.rng_state[name].meta["val"])}
            return instance
        else:
            pair = self.graph.call_function(run_and_save_rng_state, (op, *args), kwargs)
            self.rng_state[name] = self.graph.call_function(operator.getitem, (pair, 0))
            self.rng_state[name].meta["val"] = _fake_rng_state(node)
            instance = self.graph.call_function(operator.getitem, (pair, 1))
        instance.meta = dict(node.meta)
        return instance

    def _first_instance(self, name: str) -> fx.Node:
        """The first instance of a returned value, brought over from the forward when computed there."""
        if name not in self.first:
            assert self.earlier is not None
            self.first[name] = self._lazy(name, self.earlier.first[name])
        return self.first[name]

    def _arg(self, node: fx.Node) -> fx.Node:
        """The node of this phase holding the value of the joint graph's ``node``."""
        if node.name in self.joint.returned and node.name not in self.current:
            return self._returned(self.joint.returned[node.name])
        return self._live(node)

    def _live(self, node: fx.Node) -> fx.Node:
        """The node of this phase for the joint graph's ``node`` from what is live in this phase."""
        name = node.name
        self._ready(name)
        if name in self.current:
            return self._instance(name)
        if name in self.joint.parent:
            parent = self.joint.parent[name]
            self._ready(parent)
            elements = self.current.get(parent)
            if isinstance(elements, dict):
                index: Any = node.args[1]
                return elements[index]
            return self.graph.node_copy(node, lambda _: self._live(self.nodes[parent]))
        if name in self.inputs:
            return self.inputs[name]
        if node.op == "get_attr":
            if name not in self._constants:
                self._constants[name] = self.graph.node_copy(node)
            return self._constants[name]
        if name in self.joint.primals:
            assert self.earlier is not None
            self.inputs[name] = self._lazy(name, self.earlier.pre_update_value(name))
            return self.inputs[name]
        raise PlanRejected(f"The plan reads {name!r} when it is not resident.")

    def _instance(self, name: str) -> fx.Node:
        instance = self.current[name]
        if isinstance(instance, dict):
            raise PlanRejected(f"{name!r} is a multi-output op read whole after the split; remat cannot run that.")
        return instance

    def _lazy(self, name: str, value: fx.Node) -> fx.Node:
        """A placeholder of this phase for the earlier phase's ``value``, which the earlier phase will pass on."""
        with self.graph.inserting_before(self.lazy_before):
            placeholder = self.graph.placeholder(f"from_forward_{name}")
        placeholder.meta = dict(value.meta)
        self.saves.append((value, placeholder))
        return placeholder

    def _returned(self, i: int) -> fx.Node:
        """The step's forward output ``i`` as captured at its first computation (in this phase or the earlier)."""
        if i not in self.captured:
            if self.earlier is None or i not in self.earlier.captured:
                raise PlanRejected(f"The plan reads {self.joint.outputs[i]!r} before it first computes it.")
            self.captured[i] = self._lazy(f"output_{i}", self.earlier.captured[i])
        return self.captured[i]

    def unique_saves(self) -> list[fx.Node]:
        """The earlier phase's nodes to pass on, each tensor once: placeholders for the same tensor merge.

        Two nodes are the same tensor when they are the same node or take the same output of one
        instance; compilers assume that a graph's inputs never alias each other.
        """
        kept: dict[Any, fx.Node] = {}
        values = []
        for value, placeholder in self.saves:
            key = (value.args[0], value.args[1]) if value.target is operator.getitem else value
            if key in kept:
                placeholder.replace_all_uses_with(kept[key])
                self.graph.erase_node(placeholder)
            else:
                kept[key] = placeholder
                values.append(value)
        return values

    def drop_unread_saves(self) -> None:
        """Pass on only what this phase reads: without the plan's frees, a value the plan keeps into this phase and
        frees there unread would be held to its end (a compiler frees an input after its last reader, and one
        never read at its return); not passed on, it goes when the earlier phase ends, before the plan frees it."""
        kept = []
        for value, placeholder in self.saves:
            if placeholder.users:
                kept.append((value, placeholder))
            else:
                self.graph.erase_node(placeholder)
        self.saves = kept

    def pre_update_value(self, name: str) -> fx.Node:
        """The input ``name`` as a later phase must see it: a copy if the step updates it in place."""
        value = self.inputs[name]
        if name not in self.joint.mutated:
            return value
        copy = self.graph.call_function(torch.ops.aten.clone.default, (value,))
        copy.meta = dict(value.meta)
        return copy

    def _flush_frees(self) -> None:
        if self._pending_free and self.frees:
            self.graph.call_function(release, tuple(self._pending_free))
        self._pending_free = []

    def _capture_outputs(self, name: str) -> None:
        """Hold the step's outputs that live in ``name`` from its first instance on."""
        for i in self._outputs_of.get(name, ()):
            self.captured[i] = self._live(self.nodes[self.joint.outputs[i]])  # type: ignore[index]

    def _capture_gradients(self) -> None:
        """Hold the gradients the step returns as they are at its end (the plan may have made one twice)."""
        for i in range(self.joint.num_forward_outputs, len(self.joint.outputs)):
            if self.joint.outputs[i] is not None:
                self.captured[i] = self._arg(self.nodes[self.joint.outputs[i]])  # type: ignore[index]

    def output_value(self, i: int) -> fx.Node:
        """The node for the joint graph's output ``i`` at the end of this phase."""
        if i in self.captured:
            return self.captured[i]
        return self._arg(self.nodes[self.joint.outputs[i]])  # type: ignore[index]

    def carry_into(self, later_phase: _Phase, *, later: Sequence[tuple[str, str]]) -> None:
        """Hand what is live at the split to ``later_phase`` as its placeholders (in its ``saves``)."""
        later_names = {name for op, name in later if op == "compute"}

        def carry(value: fx.Node, label: str) -> fx.Node:
            placeholder = later_phase.graph.placeholder(label)
            placeholder.meta = dict(value.meta)
            later_phase.saves.append((value, placeholder))
            return placeholder

        for name in list(self.loading):
            self._ready(name)
        for name, instance in self.current.items():
            elements = self._elements(name, instance)
            if None in elements:
                later_phase.current[name] = carry(elements[None], f"saved_{name}")
            else:
                later_phase.current[name] = {k: carry(item, f"saved_{name}_{k}")  # type: ignore[misc]
                                             for k, item in elements.items()}
        for name, copies in self.host.items():
            later_phase.host[name] = {i: carry(host, _label("host", name, i)) for i, host in copies.items()}
        for k, leaving in self.leaving.items():
            assert self.moves is not None
            name = self.moves.steps[k][1]
            later_phase.leaving[k] = {i: carry(element, _label("leaving", name, i)) for i, element in leaving.items()}
        later_phase.reloads = dict(self.reloads)
        for name, state in self.rng_state.items():
            if name in later_names:
                later_phase.rng_state[name] = carry(state, f"rng_state_{name}")
        for i, value in self.captured.items():
            if i >= self.joint.num_forward_outputs:
                later_phase.captured[i] = carry(value, f"output_{i}")
        later_phase.computed = set(self.computed)


def _host_value(val: torch.Tensor) -> torch.Tensor:
    """A fake tensor like the host copy of ``val``: its whole storage, flat, in host memory."""
    return val.new_empty((val.untyped_storage().nbytes() // val.element_size(),), device="cpu")


def _fake_rng_state(node: fx.Node) -> torch.Tensor:
    """A fake tensor shaped like the generator state saved for ``node`` (AOTAutograd reads saved values' metadata)."""
    first = first_output(node)
    device = first.device
    state = torch.get_rng_state() if device.type == "cpu" else torch.cuda.get_rng_state(device)
    fake: torch.Tensor = first.fake_mode.from_tensor(state)
    return fake


def _outputs_by_root(joint: JointGraph) -> dict[str, list[int]]:
    """For each producer, the indices of the forward outputs held from its first instance: those that live
    in its storage, but for outputs dropped after the forward, returned as they are at its end (and the
    gradients, returned as they are at the end of the step)."""
    out: dict[str, list[int]] = {}
    for i, name in enumerate(joint.outputs[:joint.num_forward_outputs]):
        if name is not None and i not in joint.dropped:
            out.setdefault(joint.root.get(name, name), []).append(i)
    return out
