"""remat as a torch.compile backend: AOTAutograd with remat's partitioner.

TorchDynamo captures the model's Python into an FX graph (whose constant causal masks become
``is_causal=True``, as eager runs attention: :mod:`._causal`); AOTAutograd traces it into the joint
forward+backward graph and hands that to a partitioner. remat's partitioner describes the joint
graph (:mod:`._joint`), costs it (:mod:`._costs`), gets a plan within the budget (:mod:`._planning`)
and lowers the plan into the forward and backward graphs (:mod:`._lower`), which run op for op
(``compiler="eager"``) or compiled by Inductor (``compiler="inductor"``: the plan's computations,
recomputations included, are kept; Inductor fuses them, in the plan's order, :mod:`._inductor_order`,
and places its own frees). Given a transfer (:mod:`._transfer`), a plan may also copy values to host
memory and back (:mod:`._offload`); such plans run with ``compiler="eager"``. Which outputs the
backward starts from is :mod:`._outputs`'s to say.

Graphs are planned as they come: a new input shape is a new graph with a plan of its own, as
torch.compile recompiles. A step with graph breaks (torch.compile without ``fullgraph=True``) is
several graphs, planned in the order they first run: ``activation_budget`` applies to each graph's
own activations; a ``budget`` in bytes is shared, each graph getting what the graphs planned before
it leave (the budget less their fixed memory and the values they keep for their backward). A block of a model
FSDP2 shards per block is planned as a micro-batch among others in flight: it leaves each of the graphs FSDP2
will run after it (:func:`._fully_sharded.graphs_after`) as much room as it keeps itself, so that the first
blocks do not keep everything the budget allows and starve the last.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn
from torch._subclasses.fake_tensor import unset_fake_temporarily

from remat.schedules import Graph, InvalidRequest, Plan, RematError, Simulation, Transfer, format_size
from remat.solvers import FITTING_STATUSES, ResultDocument

from ._capture import DryRun
from ._causal import causal_masks_as_flags
from ._costs import node_costs
from ._data_parallel import data_parallel_bucket_bytes
from ._errors import CaptureError, PlanRejected, through_torch_compile
from ._fully_sharded import fully_sharded_bytes, graphs_after, resharded_bytes
from ._in_flight import RESERVE, held_at_split, least_saved, micro_batch_bytes, reserve_bytes, with_reserve
from ._inductor_order import INDUCTOR_CONFIG
from ._joint import ENGINE, InputKind, JointGraph, describe
from ._lower import boxed_compiler, lower
from ._modes import under_modes_set_aside
from ._outputs import AUTO, drop_outputs, guard_dropped_outputs
from ._pipeline_stage import with_pipeline_buffers
from ._planning import (
    Budget,
    Planner,
    check_result,
    computing_random_ops_once,
    retargeted_result,
    simulate_as_run,
    with_fixed_memory,
)
from ._random import REPLAYED
from ._transfer import TransferSpec, check_transfer, transfer_for
from ._workspace import kernel_workspaces, with_workspaces

__all__ = ["COMPILERS", "PlannedGraph", "RematBackend"]

COMPILERS = ("eager", "inductor")
"""How the planned graphs run: op for op as planned, or compiled by Inductor."""

IN_FLIGHT_ROUNDS = 6
"""Solves of one graph planned for several micro-batches in flight: the budget as given, then one for each of
``IN_FLIGHT_ROUNDS - 1`` bounds on what one micro-batch saves, evenly spaced from below what the first plan saves
down to the least any plan saves (its inputs and outputs). (docs/tuning.md)"""


@dataclass(frozen=True)
class PlannedGraph:
    """One graph the backend planned: its capture, the plan it runs and where the plan came from."""

    joint: JointGraph
    graph: Graph
    result: ResultDocument
    """The remat.result/v1 the graph follows (``result.to_json()`` is the document)."""
    plan: Plan
    simulation: Simulation
    budget: int
    """The bytes the plan was solved for: the step's budget, less what other micro-batches in flight save, or for a
    graph of a split step under a fraction, the least it can hold."""
    source: str
    """``"solved"``, ``"cache"`` (the plan cache on disk), ``"given"`` (a result passed in), ``"rank K"`` (solved by
    another rank of a torch.distributed job, for the same graph) or ``"earlier"`` (the plan of a graph planned before
    that differs only in its fixed memory, such as the buckets of a DistributedDataParallel that runs the step, or
    not at all, such as a pipeline stage's step once it holds gradients)."""

    asked: int
    """The bytes the step's budget left this graph (what a copy of the backend asks again for it)."""
    captured_sha256: str
    """The hash of the graph as captured: ``graph``'s, unless a reserve for other micro-batches in flight was added
    to it (:mod:`._in_flight`)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> PlannedGraph:
        """Itself: a plan made is a record that does not change, which copies share (its joint graph included)."""
        return self


@dataclass(frozen=True)
class _Solved:
    """A plan checked on the graph it was solved for (the captured one, or it with a reserve)."""

    joint: JointGraph
    graph: Graph
    result: ResultDocument
    source: str
    plan: Plan
    simulation: Simulation
    budget: int


class RematBackend:
    """A torch.compile backend that runs each training graph it is given within a budget.

    Without a planner it only captures: each joint graph is described, costed and kept in
    ``captured`` (as ``(joint, graph)``), and compilation stops there (``remat profile``).
    """

    def __init__(self, budget: Budget | None, planner: Planner | None, *, name: str = "step",
                 cost_model: str = "flops", device: str | None = None, compiler: str = "eager",
                 costs_from: Graph | None = None, backward_from: str | int | None = AUTO,
                 transfer: TransferSpec = None, whole_steps: bool = False) -> None:
        if compiler not in COMPILERS:
            raise InvalidRequest(f"Unknown compiler {compiler!r}; choose one of: {', '.join(COMPILERS)}.",
                                 field="compiler")
        self.transfer = check_transfer(transfer)
        """The link plans may copy values over (checked; converted to each graph's units when it is planned)."""
        self.budget = budget
        self.planner = planner
        self.name = name
        self.cost_model = cost_model
        self.device = device
        self.compiler = compiler
        self.costs_from = costs_from
        self.backward_from = backward_from
        """The one output the backward starts from (see :func:`._capture.compile_step`), if the step names it:
        the graph's other outputs are returned without gradient and counted until the end of the forward."""
        self.planned: list[PlannedGraph] = []
        self.captured: list[tuple[JointGraph, Graph]] = []
        self.dry_run = False
        """While true, compiled steps stop before they compute (raising DryRun)."""
        self._measured: dict[str, Graph] = {}
        """Graphs costed by measurement, by their structure (costs left out): a graph TorchDynamo compiles again
        (one of its guards failed) keeps its costs, and so its plan."""
        self.whole_steps = whole_steps
        """Whether each frame compiled is a whole step (rematerialize()'s, compiled with fullgraph=True, one for
        steps that accumulate gradients and one for the others): its graph has the budget to itself."""
        self._held: dict[tuple[int, frozenset[int]], int] = {}
        """Bytes each planned graph holds while later graphs of the step run, by TorchDynamo frame and parameters: a
        frame compiled again for the same parameters (a new shape) replaces its graph; one compiled for others (each
        block of a model FSDP2 shards runs the same code) is another graph of the step."""
        self._inherited: dict[tuple[str, int], PlannedGraph] = {}
        """The plans of ``planned`` made before this backend was copied, by graph hash and budget (see
        :meth:`__setstate__`), until the copy compiles that graph again."""

    def __getstate__(self) -> dict[str, Any]:
        """What a copy or a pickle keeps: the settings and the plans, not what belongs to the frames compiled here."""
        state = dict(self.__dict__)
        state["_held"] = {}
        state["dry_run"] = False
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy (deep or unpickled) compiles its graphs again: one planned before (the same graph at the same
        budget) follows the plan it had, which it replaces in ``planned``, without solving again."""
        self.__dict__.update(state)
        self._inherited = {(p.captured_sha256, p.asked): p for p in self.planned}

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        try:
            return self._compile_graph(gm, example_inputs)
        except RematError as e:  # remat's own message, not a compiler's traceback around it
            raise through_torch_compile(e, inspect.currentframe()) from e.__cause__

    def _compile_graph(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        causal_masks_as_flags(gm)
        dropped = drop_outputs(gm, self.backward_from)
        partition = _Partition(self, example_inputs, _graph_key(example_inputs), drop_outputs=dropped is not None)
        try:
            compiled = self._compile(gm, example_inputs, partition)
        finally:
            partition.args = None  # the example batch is not kept alive by the compiled step
        return self._stoppable(compiled, dropped or [], accumulating=partition.accumulating)

    def _compile(self, gm: fx.GraphModule, example_inputs: Sequence[Any], partition: _Partition) -> Callable[..., Any]:
        if self.compiler == "inductor":
            from torch._functorch import config as functorch_config
            from torch._inductor.compile_fx import compile_fx

            # random ops as eager draws them (Inductor's own generator draws other numbers); no graph
            # caches, which would key compiled graphs without their plan; kernels in the plan's order (patched
            # for the backward too, which Inductor compiles when it first runs)
            patches = {"custom_partitioner_fn": _inductor_partitioner(partition), "fallback_random": True,
                       "fx_graph_cache": False, **INDUCTOR_CONFIG}
            with functorch_config.patch(enable_autograd_cache=False):
                compiled: Callable[..., Any] = compile_fx(gm, example_inputs, config_patches=patches)  # type: ignore[assignment]
                return compiled
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=boxed_compiler, bw_compiler=boxed_compiler, partition_fn=partition)(
            gm, example_inputs)

    def _stoppable(self, compiled: Callable[..., Any], dropped: Sequence[int], *,
                   accumulating: bool) -> Callable[..., Any]:
        """``compiled``, made to raise DryRun instead of computing while ``dry_run`` is set; the outputs at
        ``dropped``, returned without gradient, refuse one and are checked to be gone when the backward starts.
        Unless the plan was made for a step that ``accumulating`` gradients, the first such step warns."""
        boxed = getattr(compiled, "_boxed_call", False)
        warned = accumulating

        def run(*args: Any) -> Any:
            nonlocal warned
            if self.dry_run:
                raise DryRun()
            if not warned and torch.is_grad_enabled():
                # AOTAutograd's forward claims the boxed convention it copied from its inner function and takes
                # its inputs unboxed: only a lone list is boxed
                inputs = args[0] if boxed and len(args) == 1 and isinstance(args[0], list) else args
                warned = _warn_if_accumulating(inputs, self.name)
            with under_modes_set_aside():
                outputs = compiled(*args)
            if dropped and torch.is_grad_enabled():
                outputs = guard_dropped_outputs(outputs, dropped, self.name, self.backward_from)
            return outputs

        run._boxed_call = boxed  # type: ignore[attr-defined]
        return run

    def plan(self, joint: JointGraph, graph: Graph, frame: tuple[int, frozenset[int]], *,
             resharded: int = 0, after: tuple[int, bool] = (0, False)) -> tuple[fx.GraphModule, fx.GraphModule]:
        """Plan ``graph`` (the joint graph's export) within the budget and lower the plan; ``resharded`` are the bytes
        of its parameters that FSDP2 frees when its forward ends and gathers again for its backward, ``after`` the
        blocks of the step that run while it holds what its forward saved and whether the root's graphs follow it
        (:func:`._fully_sharded.graphs_after`)."""
        assert self.budget is not None and self.planner is not None
        held = 0 if self.whole_steps else sum(b for f, b in self._held.items() if f != frame)
        asked = self.budget.bytes_for(graph, joint, held_elsewhere=held)
        transfer = transfer_for(self.transfer, graph, joint)
        captured = graph.sha256
        inherited = self._inherited.pop((captured, asked), None)
        followed = inherited or self._same_step(captured, asked)
        if followed is not None:
            reserve = followed.joint.index[RESERVE].memory if RESERVE in followed.joint.index else 0
            planned = self._check(followed.result, followed.source if inherited else "earlier", followed.budget,
                                  transfer, *_reserved(joint, graph, reserve))
        else:
            planned = self._plan_beside_later(graph, joint, asked, transfer, after)
        joint, graph, result, plan, simulation = planned.joint, planned.graph, planned.result, planned.plan, \
            planned.simulation
        if plan.has_transfers and self.compiler != "eager":
            raise PlanRejected(f"The plan copies values to host memory and back, which only compiler='eager' runs "
                               f"(Inductor places its own frees); use compiler='eager', or no transfer with "
                               f"compiler={self.compiler!r}.")
        if self.compiler == "inductor":
            result, plan, simulation = _random_ops_once(graph, joint, result, plan, simulation, planned.budget)
        # every graph of the step counts what the engine that runs it holds (DDP's buckets, FSDP2's): held once; its
        # tangents come when its backward starts, made by the backward of a later graph, which counts them
        self._held[frame] = held_at_split(joint, graph, plan, simulation) - sum(joint.fixed[k] for k in ENGINE) \
            - resharded - joint.fixed["tangents"]
        self._record(PlannedGraph(joint, graph, result, plan, simulation, planned.budget, planned.source, asked,
                                  captured), replacing=inherited)
        return lower(joint, graph, plan, frees=self.compiler == "eager", timing=simulation.timing)

    def _same_step(self, captured: str, asked: int) -> PlannedGraph | None:
        """The plan of another whole step of the same graph at the same budget, if one was made: a pipeline stage's
        steps before and after its first backward (gradients absent, then present: both planned with them resident)
        run micro-batches in flight together, which a plan checked beside others saving as much as itself holds only
        if they follow it too."""
        if not self.whole_steps:
            return None
        return next((p for p in reversed(self.planned) if p.captured_sha256 == captured and p.asked == asked), None)

    def _plan_beside_later(self, graph: Graph, joint: JointGraph, budget: int, transfer: Transfer | None,
                           after: tuple[int, bool]) -> _Solved:
        """The graph's plan beside the other micro-batches in flight and, under a byte budget, the graphs of the step
        that run while it holds what its forward saved: the blocks ``after`` it, and for the last block the root's
        graphs, given a block's saved values where a plan leaves them that (their peak is taken to be no more than a
        block's), else the plan of an earlier block that fits (made to leave room after it), else what is left (first
        come, first served)."""
        assert self.budget is not None
        blocks, root = (0, False) if self.whole_steps or self.budget.total is None else after
        others = self.budget.in_flight - 1 + blocks
        if root:
            try:
                return self._plan_in_flight(graph, joint, budget, transfer, others=others + 1, blocks=blocks + 1)
            except PlanRejected:
                earlier = [p for p in self._earlier_blocks(graph, joint, budget, transfer)
                           if p.simulation.peak_memory + others * micro_batch_bytes(p.joint, p.graph, p.plan,
                                                                                      p.simulation) <= budget]
                if earlier:
                    return min(earlier, key=lambda p: p.simulation.cost)
        return self._plan_in_flight(graph, joint, budget, transfer, others=others, blocks=blocks)

    def _plan_in_flight(self, graph: Graph, joint: JointGraph, budget: int, transfer: Transfer | None, *,
                        others: int, blocks: int = 0) -> _Solved:
        """The graph's plan within ``budget`` beside the saved values of ``others`` like it: the other micro-batches
        in flight (:attr:`Budget.in_flight`), and the graphs of the step that run while it holds what its forward
        saved, taken to save as much (FSDP2's later blocks, ``blocks`` of the ``others``). Where the plan for the
        whole budget saves too much for them, the graph is solved again with a reserve (:mod:`._in_flight`) for each
        of a few bounds on what one micro-batch saves (evenly spaced from below what the first plan saved, and below
        what leaves the others room for the least peak a plan can have, down to the least any plan saves), within what
        the others then leave; the plans of the same graph made before (FSDP2's earlier blocks) are tried too
        (:meth:`_in_flight_tries`), and the cheapest plan that fits beside them is kept."""
        # no plan for one micro-batch alone: none for several
        first = self._solve(joint, graph, budget=budget, transfer=transfer)
        saved = micro_batch_bytes(first.joint, first.graph, first.plan, first.simulation)
        if others == 0 or first.simulation.peak_memory + others * saved <= budget:
            return first
        found: _Solved | None = None
        why = (f"a plan within {format_size(budget)} peaks at {format_size(first.simulation.peak_memory)} "
               f"and the others save {format_size(others * saved)}.")
        top = min(saved, (budget - graph.min_feasible_budget) // others)  # more leaves no peak any plan reaches
        for planned in self._in_flight_tries(graph, joint, budget, transfer, others=others, top=top):
            if isinstance(planned, str):
                why = planned
                continue
            held = others * micro_batch_bytes(planned.joint, planned.graph, planned.plan, planned.simulation)
            if planned.simulation.peak_memory + held > budget:
                why = (f"a plan within {format_size(planned.budget)} peaks at "
                       f"{format_size(planned.simulation.peak_memory)} and the others save {format_size(held)}.")
            elif found is None or planned.simulation.cost < found.simulation.cost:
                found = planned
        if found is None:
            raise PlanRejected(_no_room_for_others(others, blocks, budget, why))
        return found

    def _in_flight_tries(self, graph: Graph, joint: JointGraph, budget: int, transfer: Transfer | None, *,
                         others: int, top: int) -> Iterator[_Solved | str]:
        """Plans to try beside ``others`` in flight, or why a try failed: solves with a reserve for bounds on what one
        saves evenly spaced from below ``top`` down to the least any plan saves (where the plan that keeps only what
        it must, which may be the one that fits, lies), then the plans of the same graph made before (FSDP2's earlier
        blocks, whose plans may fit in a window of bounds too narrow for the solves to hit)."""
        least = least_saved(joint)
        for k in range(IN_FLIGHT_ROUNDS - 2, -1, -1) if top >= least else ():
            bound = least + (top - least) * k // (IN_FLIGHT_ROUNDS - 1)
            peak = budget - others * bound
            try:
                yield self._solve(*_reserved(joint, graph, reserve_bytes(joint, peak=peak, saved=bound)),
                                  budget=peak, transfer=transfer)
            except PlanRejected:
                yield (f"no plan that saves at most {format_size(bound)} per micro-batch peaks within "
                       f"{format_size(peak)}, what the others' saved values then leave.")
        yield from self._earlier_blocks(graph, joint, budget, transfer)

    def _earlier_blocks(self, graph: Graph, joint: JointGraph, budget: int,
                        transfer: Transfer | None) -> Iterator[_Solved]:
        """The plans made before for the same graph (FSDP2's earlier blocks) that fit ``budget``, checked on it."""
        for earlier in self.planned:
            if earlier.captured_sha256 != graph.sha256:
                continue
            reserve = earlier.joint.index[RESERVE].memory if RESERVE in earlier.joint.index else 0
            try:
                yield self._check(earlier.result, "earlier", budget, transfer, *_reserved(joint, graph, reserve))
            except PlanRejected:
                continue

    def _solve(self, joint: JointGraph, graph: Graph, *, budget: int, transfer: Transfer | None) -> _Solved:
        """The plan for ``graph`` within ``budget``, checked (PlanRejected unless it fits), with the budget it was
        solved for (for a graph of a split step under a fraction, the least it can hold)."""
        assert self.planner is not None
        earlier = self._earlier_plan(graph, joint, budget, transfer)
        if earlier is not None:
            return earlier
        planned = functools.partial(self.planner.result, graph, what=joint.name, transfer=transfer,
                                    small_workspaces=joint.fixed["small_workspaces"])
        solved, source = planned(budget)
        if self._leanest_will_do and solved.status not in FITTING_STATUSES and solved.smallest_peak:
            budget = solved.smallest_peak
            solved, source = planned(budget)
        return self._check(solved, source, budget, transfer, joint, graph)

    def _check(self, result: ResultDocument, source: str, budget: int, transfer: Transfer | None, joint: JointGraph,
               graph: Graph) -> _Solved:
        """``result`` simulated on ``graph`` as run (PlanRejected unless it fits ``budget``)."""
        assert self.planner is not None
        plan, simulation = check_result(graph, result, budget=budget, joint=joint, transfer=transfer,
                                        host_budget=self.planner.host_budget)
        return _Solved(joint, graph, result, source, plan, simulation, budget)

    def _earlier_plan(self, graph: Graph, joint: JointGraph, budget: int, transfer: Transfer | None) -> _Solved | None:
        """The plan of a graph planned here before that differs from ``graph`` only in its fixed memory, simulated on
        ``graph`` (:func:`~._planning.retargeted_result`), where it is what a solve would give: solved for at least
        ``budget`` less the difference, and within ``budget``. A module from ``rematerialize()`` that a
        DistributedDataParallel runs is planned again with the buckets DDP holds beside its step: the same graph
        with more fixed memory, and under ``activation_budget`` a budget larger by as much."""
        assert self.planner is not None
        for planned in reversed(self.planned):
            made_for = planned.graph
            by = graph.fixed_memory - made_for.fixed_memory
            if by == 0 or made_for.size != graph.size or budget - by > planned.budget \
                    or planned.simulation.peak_memory + by > budget \
                    or with_fixed_memory(graph, made_for.fixed_memory).sha256 != made_for.sha256:
                continue
            moved = retargeted_result(planned.result, graph, budget, f"with {format_size(abs(by))} "
                                      f"{'more' if by >= 0 else 'less'} fixed memory")
            if moved is None:
                continue
            try:
                return self._check(moved, "earlier", budget, transfer, joint, graph)
            except PlanRejected:
                continue
        return None

    @property
    def _leanest_will_do(self) -> bool:
        """Whether a graph that cannot hold as little as its budget is planned at the least it can hold: a graph of a
        step that graph breaks split (DDP's buckets, a loss apart) under a fraction, which is the step's to keep."""
        return not self.whole_steps and self.budget is not None and self.budget.activations is not None

    def _record(self, planned: PlannedGraph, *, replacing: PlannedGraph | None) -> None:
        """Add ``planned`` to the plans made, in the place of the inherited plan it follows if ``replacing`` one."""
        at = next((i for i, p in enumerate(self.planned) if replacing is not None and p is replacing), None)
        if at is None:
            self.planned.append(planned)
        else:
            self.planned[at] = planned

    def costed(self, joint: JointGraph, args: Sequence[Any] | None) -> Graph:
        """The joint graph's remat.graph/v1: costs from ``costs_from`` when given (the same graph), else made."""
        if self.costs_from is not None:
            costs = {n.id: n.cost for n in self.costs_from.nodes}
            missing = [p.name for p in joint.producers if p.name not in costs]
            again = None if missing else joint.to_graph(costs, cost_unit=self.costs_from.cost_unit)
            if again is None or again.sha256 != self.costs_from.sha256:
                raise CaptureError("The model's training step no longer exports the graph given; export it again.")
            return again
        if self.cost_model != "measured":
            costs, unit = node_costs(joint, list(args or []), cost_model=self.cost_model, device=self.device)
            return joint.to_graph(costs, cost_unit=unit)  # args only for where they live (the device profile)
        if args is None:
            raise CaptureError("Measured costs need the step's inputs one for one; this graph's inputs were "
                               "merged by AOTAutograd. Use cost_model='flops'.")
        structure = joint.to_graph(dict.fromkeys((p.name for p in joint.producers), 0.0), cost_unit="").sha256
        if structure not in self._measured:
            costs, unit = node_costs(joint, [*args, *_ones_for(joint)], cost_model="measured", device=self.device)
            self._measured[structure] = joint.to_graph(costs, cost_unit=unit)
        return self._measured[structure]


def _no_room_for_others(others: int, blocks: int, budget: int, why: str) -> str:
    """Why no plan holds the graph beside ``others`` saving as much (``blocks`` of them FSDP2's later blocks), and
    what to change."""
    if blocks == 0:
        return (f"No plan holds {others + 1} micro-batches in flight within {format_size(budget)}: {why} Raise the "
                f"budget, or plan for fewer micro-batches in flight.")
    in_flight = f" and {others - blocks} more micro-batches in flight" if others > blocks else ""
    return (f"No plan leaves room within {format_size(budget)} for the {blocks} FSDP2 blocks that run while this "
            f"block holds what its forward saved{in_flight}: {why} Raise the budget, or give activation_budget, "
            f"which plans each block for a share of its own activation memory.")


def _reserved(joint: JointGraph, graph: Graph, nbytes: int) -> tuple[JointGraph, Graph]:
    """``joint`` and ``graph`` with a reserve of ``nbytes`` for other micro-batches in flight (none for 0)."""
    if not nbytes:
        return joint, graph
    reserved = with_reserve(joint, nbytes)
    return reserved, reserved.to_graph({**{n.id: n.cost for n in graph.nodes}, RESERVE: 0.0},
                                       cost_unit=graph.cost_unit)


class _Partition:
    """AOTAutograd's ``partition_fn`` for one graph of the backend."""

    def __init__(self, backend: RematBackend, example_inputs: Sequence[Any], frame: tuple[int, frozenset[int]], *,
                 drop_outputs: bool) -> None:
        self.backend = backend
        self.args: Sequence[Any] | None = list(example_inputs)
        self.frame = frame
        self.drop_outputs = drop_outputs
        """Whether the outputs without gradient are dropped after the forward (the backward starts from one)."""
        self.accumulating = False
        """Whether the graph was planned for a step that adds into gradients the parameters hold."""

    def __call__(self, gm: fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int,
                 static_lifetime_input_indices: Sequence[int] | None = None,
                 **_: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        primals, _tangents = joint_inputs
        static = set(static_lifetime_input_indices or ())
        args = self.args if self.args is not None and len(self.args) == len(primals) else None
        kinds: list[InputKind] = [
            "input" if i not in static else
            "parameter" if args is None or isinstance(args[i], nn.Parameter) else "buffer"
            for i in range(len(primals))
        ]
        # with several micro-batches in flight, every backward but the first adds into the gradients it made,
        # some of them backwards of forwards that ran before it: each plan counts the gradients from the start
        budget = self.backend.budget
        self.accumulating = _accumulating(args, kinds) or (budget is not None and budget.in_flight > 1)
        joint = describe(gm, num_forward_outputs=num_fwd_outputs, input_kinds=kinds, name=self.backend.name,
                         drop_outputs=self.drop_outputs, accumulating=self.accumulating,
                         engine=_engine_memory(args, kinds))
        joint = with_pipeline_buffers(joint)
        with unset_fake_temporarily():
            joint = with_workspaces(joint, kernel_workspaces(joint))
            graph = self.backend.costed(joint, args)
        if self.backend.planner is None:
            self.backend.captured.append((joint, graph))
            raise DryRun()
        parameters = _parameters(args, kinds)
        return self.backend.plan(joint, graph, self.frame, resharded=resharded_bytes(parameters),
                                 after=graphs_after(parameters))


def _inductor_partitioner(partition: _Partition) -> Any:
    """remat's partitioner in the form Inductor takes it (``torch._inductor.config.custom_partitioner_fn``)."""
    from torch._inductor.custom_graph_pass import CustomPartitionerFn

    class RematPartitioner(CustomPartitionerFn):
        def __call__(self, gm: fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> tuple[fx.GraphModule,
                                                                                           fx.GraphModule]:
            kwargs.pop("compiler", None)
            return partition(gm, joint_inputs, **kwargs)

        def uuid(self) -> None:
            """None: Inductor's caches must not reuse graphs compiled under another plan."""
            return None

    return RematPartitioner()


def _random_ops_once(graph: Graph, joint: JointGraph, result: ResultDocument, plan: Plan, simulation: Simulation,
                     budget: int) -> tuple[ResultDocument, Plan, Simulation]:
    """The plan for Inductor, which cannot replay a random state but dropout's (:mod:`._random`): the other
    random ops computed once and kept (see :func:`computing_random_ops_once`), simulated again; the result
    says so. Refused if it no longer fits."""
    kept = computing_random_ops_once(graph, plan, replayed={str(op) for op in REPLAYED})
    if kept == plan:
        return result, plan, simulation
    again = simulate_as_run(graph, joint, kept)
    if again.peak_memory > budget:
        raise PlanRejected(f"With compiler='inductor', random ops other than dropout cannot be computed again "
                           f"(Inductor cannot replay their random state), and the plan that keeps them peaks at "
                           f"{format_size(again.peak_memory)}, over the budget of {format_size(budget)}. Use "
                           f"compiler='eager' or a larger budget.")
    note = f"random ops computed once for Inductor: peak {again.peak_memory}, cost {again.cost:g}"
    patched = dataclasses.replace(result, plan=kept.to_json(graph), peak_memory=again.peak_memory, cost=again.cost,
                                  overhead=again.cost / graph.base_cost if graph.base_cost else None,
                                  log=(*result.log, note))
    return patched, kept, again


def _warn_if_accumulating(inputs: Sequence[Any], name: str) -> bool:
    """Warn if parameters among ``inputs`` hold gradients the step will add into, which its plan did not count;
    whether it warned."""
    held = sum(p.grad.untyped_storage().nbytes() for p in inputs
               if isinstance(p, nn.Parameter) and p.grad is not None)
    if held:
        warnings.warn(f"{name}: this step adds into gradients the parameters already hold ({format_size(held)}), "
                      f"which its plan, made for a step that starts without them, does not count: it may hold "
                      f"{format_size(held)} more than planned. rematerialize() plans steps that accumulate "
                      f"gradients apart; with torch.compile, compile the step once the gradients exist.",
                      ResourceWarning, stacklevel=3)
    return bool(held)


def _accumulating(args: Sequence[Any] | None, kinds: Sequence[InputKind]) -> bool:
    """Whether the step adds into gradients its parameters already hold (gradient accumulation)."""
    return args is not None and any(k == "parameter" and getattr(a, "grad", None) is not None
                                    for a, k in zip(args, kinds, strict=True))


def _graph_key(example_inputs: Sequence[Any]) -> tuple[int, frozenset[int]]:
    """The TorchDynamo frame being compiled and the parameters it takes: graphs of one key replace each other (a
    recompilation); other keys add up."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    frame = compile_id.frame_id if compile_id is not None and compile_id.frame_id is not None else 0
    return frame, frozenset(id(a) for a in example_inputs if isinstance(a, nn.Parameter))


def _engine_memory(args: Sequence[Any] | None, kinds: Sequence[InputKind]) -> dict[str, int]:
    """What the distributed engine running the graph holds beside it, by ENGINE category (a pipeline stage's
    buffers, which follow from the graph's inputs and tangents, apart)."""
    return {"data_parallel_buckets": data_parallel_bucket_bytes(),
            "fully_sharded": fully_sharded_bytes(_parameters(args, kinds))}


def _parameters(args: Sequence[Any] | None, kinds: Sequence[InputKind]) -> list[torch.Tensor]:
    """The graph's parameters among its inputs (none known when AOTAutograd merged its inputs)."""
    return [a for a, k in zip(args or [], kinds, strict=False) if k == "parameter"]


def _ones_for(joint: JointGraph) -> list[torch.Tensor]:
    """Real tangents for timing the joint graph: ones shaped like each."""
    nodes = {n.name: n for n in joint.module.graph.nodes}
    out = []
    for name in joint.tangents:
        val = nodes[name].meta["val"]
        out.append(torch.ones(val.shape, dtype=val.dtype, device=val.device))
    return out
