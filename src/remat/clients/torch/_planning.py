"""From a captured graph and a budget to a simulated plan the step can run.

A budget is what the user reasons about: the bytes the training step may hold in total (parameters,
buffers, inputs, gradients, activations; what the allocator's peak would report, less what lives
outside the step such as optimizer state), or a fraction of the step's activation memory, the part
that checkpointing trades for compute. A plan comes from the plan cache, the in-process solver or a
remat service; whatever its source, it is simulated on the graph (in time, with the transfer
parameters, when it copies values to host memory) and refused unless it fits.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from remat.schedules import (
    Graph,
    InvalidPlan,
    InvalidRequest,
    Op,
    Plan,
    Simulation,
    StrategyNotApplicable,
    Transfer,
    format_size,
    parse_size,
    simulate,
)
from remat.solvers import FITTING_STATUSES, ResultDocument

from ._cache import PlanCache
from ._errors import PlanRejected
from ._joint import JointGraph
from ._progress import ProgressLine
from ._ranks import shared_across_ranks

__all__ = ["OFFLOAD_STRATEGIES", "SERVER_OPTIONS", "Budget", "Planner", "activation_memory", "activation_ratio",
           "check_result", "computing_random_ops_once", "default_strategy", "retargeted_result",
           "sha256_but_workspaces", "with_fixed_memory"]

SERVER_OPTIONS = ("backend", "time_limit_s", "mip_gap", "options", "convergence")
"""Solver options a remat service takes with a request."""

OFFLOAD_STRATEGIES = ("checkmate-offload", "offload-window")
"""The strategies a step that may copy values to host memory is planned by unless one is named: the first
installed. ``checkmate-offload`` decides keep, recompute or offload per value jointly; ``offload-window`` is the
adaptive window of the out-of-core heuristic."""

MIN_FLOOR_STRATEGY = "checkpoint-last"
"""The baseline that holds the least (only what the next op needs): its plan says how low a plan can go."""

_REMEASURED = "with its kernels' workspaces measured again"
"""Why a cached or another rank's result is followed on a graph whose workspaces differ from the one it was made for."""


@dataclass(frozen=True)
class Budget:
    """A step's budget: ``total`` bytes, or ``activations``, a fraction of its activation memory.

    The activation memory is the peak of the step without rematerialization (the checkpoint-all
    plan) less what the step holds anyway: parameters, buffers, inputs, constants and gradients.

    >>> Budget.of("6GiB", None).total
    6442450944
    >>> Budget.of(None, 0.5).describe()
    '0.5 of the activation memory'
    """

    total: int | None = None
    activations: float | None = None
    in_flight: int = 1
    """Micro-batches the step holds at once (forwards run, backwards not yet), as a pipeline stage does: each
    one's saved values count against the budget beside the one that runs."""

    @classmethod
    def of(cls, budget: int | str | None, activation_budget: float | None, in_flight: int = 1) -> Budget:
        """The budget from ``rematerialize``'s arguments: exactly one of the first two."""
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
            raise InvalidRequest(f"in_flight must be a whole number of micro-batches, at least 1, got {in_flight!r}.",
                                 field="in_flight")
        if (budget is None) == (activation_budget is None):
            raise InvalidRequest("Give exactly one of budget= (bytes, or a size such as '6GiB': what the step may "
                                 "hold in total) and activation_budget= (a fraction of its activation memory, "
                                 "such as 0.5).", field="budget")
        if budget is not None:
            return cls(total=parse_size(budget), in_flight=in_flight)
        if isinstance(activation_budget, bool) or not isinstance(activation_budget, (int, float)) \
                or not 0 < activation_budget <= 1:
            raise InvalidRequest(f"activation_budget must be a fraction in (0, 1], got {activation_budget!r}.",
                                 field="activation_budget")
        return cls(activations=float(activation_budget), in_flight=in_flight)

    def bytes_for(self, graph: Graph, joint: JointGraph, *, held_elsewhere: int = 0) -> int:
        """The budget in bytes for this step's graph, less ``held_elsewhere`` (other graphs' memory)."""
        if self.total is not None:
            return self.total - held_elsewhere
        assert self.activations is not None
        return joint.resident_memory + math.ceil(self.activations * activation_memory(graph, joint))

    def describe(self) -> str:
        return format_size(self.total) if self.total is not None else f"{self.activations:g} of the activation memory"


def default_strategy(*, offload: bool) -> str:
    """The strategy to plan by when none is named: ``checkmate``, or with ``offload`` the first of OFFLOAD_STRATEGIES
    installed."""
    if not offload:
        return "checkmate"
    from remat.solvers import STRATEGIES

    installed = [name for name in OFFLOAD_STRATEGIES if name in STRATEGIES]
    if not installed:
        offloading = [name for name, s in STRATEGIES.items() if s.offloads]
        raise InvalidRequest(f"A transfer was given, and none of the strategies it defaults to "
                             f"({', '.join(OFFLOAD_STRATEGIES)}) is installed; name one with strategy= "
                             f"({', '.join(offloading) or 'none installed offloads'}).", field="strategy")
    return installed[0]


def activation_memory(graph: Graph, joint: JointGraph) -> int:
    """The step's activation memory: its peak without rematerialization less what it holds anyway."""
    return graph.checkpoint_all_peak - joint.resident_memory


def activation_ratio(total: int, graph: Graph, joint: JointGraph) -> float:
    """A budget of ``total`` bytes as a fraction of the step's activation memory."""
    activation = activation_memory(graph, joint)
    return (total - joint.resident_memory) / activation if activation > 0 else math.inf


@dataclass
class Planner:
    """Where plans come from: ``given`` (a result to follow), the cache, then the solver or a service.

    ``options`` go to :func:`remat.solvers.solve` (``backend``, ``time_limit_s``, ``mip_gap``,
    ``threads``, ``options``, ``convergence``); a service takes only those of SERVER_OPTIONS. Solves
    stop when converged (:class:`remat.solvers.Convergence`) unless ``convergence=None`` is given.
    ``host_budget`` caps the host memory of a plan's copies (bytes); the transfer comes with each graph.
    """

    strategy: str = "checkmate"
    server: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    cache: PlanCache | None = None
    progress: bool = True
    given: ResultDocument | None = None
    host_budget: int | None = None
    _solved: dict[str, ResultDocument] = field(default_factory=dict, init=False, repr=False)
    """Fitting results solved here, by cache key: a graph TorchDynamo compiles again is solved once, with or
    without the cache on disk."""

    def __post_init__(self) -> None:
        if self.server is not None and set(self.options) - set(SERVER_OPTIONS):
            extra = ", ".join(sorted(set(self.options) - set(SERVER_OPTIONS)))
            raise InvalidRequest(f"A remat service takes only {', '.join(SERVER_OPTIONS)} with a request; "
                                 f"drop {extra} or solve in-process.", field="server")

    def result(self, graph: Graph, budget: int, *, what: str, transfer: Transfer | None = None,
               small_workspaces: int = 0) -> tuple[ResultDocument, str]:
        """A remat.result/v1 for ``graph`` at ``budget`` bytes and where it came from: given, cache, solved, or
        another rank of a torch.distributed job planning the same graph ("rank K", :mod:`._ranks`).

        With ``transfer``, the plan may copy values to host memory and back over that link. Cached results and
        other ranks' are found by the graph but its measured workspaces (``small_workspaces`` of its fixed memory
        among them, :func:`sha256_but_workspaces`) and simulated again on it where those differ.
        """
        if self.given is not None:
            return self.given, "given"
        copies = {} if transfer is None else {"transfer": transfer.to_json(), "host_budget": self.host_budget}
        key = PlanCache.key(sha256_but_workspaces(graph, small_workspaces), budget, self.strategy,
                            {**self.options, **copies})
        if key in self._solved:
            return self._solved[key], "solved"
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is not None and cached.status in FITTING_STATUSES:
            cached = retargeted_result(cached, graph, budget, _REMEASURED)
        else:
            cached = None
        result, source = shared_across_ranks(key, cached, lambda: self._solve_or_smallest(graph, budget, what, copies))
        if result.status in FITTING_STATUSES:  # another rank's is for the graph as that rank measured it
            again = retargeted_result(result, graph, budget, _REMEASURED)
            result, source = (again, source) if again is not None else \
                (self._solve_or_smallest(graph, budget, what, copies), "solved")
        if result.status in FITTING_STATUSES and source != "cache":
            self._solved[key] = result
            if self.cache is not None:
                self.cache.put(key, result)
        return result, source

    def _solve_or_smallest(self, graph: Graph, budget: int, what: str, copies: Mapping[str, Any]) -> ResultDocument:
        """The strategy's result, or when it found no plan that fits, the baseline's that holds the least."""
        result = self._solve(graph, budget, what, copies)
        return result if result.status in FITTING_STATUSES else self._smallest_plan(graph, budget, result, what, copies)

    def _solve(self, graph: Graph, budget: int, what: str, copies: Mapping[str, Any]) -> ResultDocument:
        """Solve here or on the service; ``copies`` holds the request's ``transfer`` (JSON) and ``host_budget``."""
        if self.server is not None:
            from remat.clients.http import Client

            with Client(self.server) as client:
                return client.solve(graph, budget=budget, strategy=self.strategy, **copies, **self.options)
        from remat.solvers import solve

        transfer = Transfer.from_json(copies["transfer"]) if copies else None
        options: dict[str, Any] = {"transfer": transfer, "host_budget": self.host_budget, **self.options}
        line = ProgressLine(f"planning {what} ({graph.size} nodes) within {format_size(budget)}", graph.base_cost) \
            if self.progress else None
        result = solve(graph, budget=budget, strategy=self.strategy, on_progress=line.update if line else None,
                       **options)
        if line is not None:
            overhead = f"{result.simulation.cost / graph.base_cost:.3f}x the step's compute" \
                if result.simulation is not None and graph.base_cost > 0 else "no plan"
            line.close(f"{result.status.value} in {result.solve_time_s:.1f} s, {overhead}")
        return result.document()

    def _smallest_plan(self, graph: Graph, budget: int, failed: ResultDocument, what: str,
                       copies: Mapping[str, Any]) -> ResultDocument:
        """The plan of the baseline that holds the least, when the strategy found none that fits.

        It is the answer when it fits; otherwise the strategy's result is kept, with the smallest
        budget a plan reached (this baseline's peak, the strategy's own plan's, the lowest its search
        reached, or checkpoint-all's) under ``smallest_peak``. Under the graph's floor the strategy does
        not search, so it is asked again at the floor for the lowest its search reaches there (the
        baseline's plan may hold more than checkpoint-all's). On graphs too large for the baseline
        (:data:`remat.solvers.baselines.LARGEST_PLAN`) only the strategy's own plans count.
        """
        from remat.solvers import solve

        floor: ResultDocument | None
        try:
            floor = solve(graph, budget=max(budget, graph.min_feasible_budget), strategy=MIN_FLOOR_STRATEGY).document()
        except StrategyNotApplicable:  # too large a graph for it: the strategy's own plan is all there is
            floor = None
        if floor is not None and floor.status in FITTING_STATUSES and floor.peak_memory is not None \
                and floor.peak_memory <= budget:
            return dataclasses.replace(floor, log=(*failed.log[-3:], f"{self.strategy} found no plan within the "
                                                   f"budget; {MIN_FLOOR_STRATEGY}'s plan fits", *floor.log))
        searched = self._solve(graph, graph.min_feasible_budget, what, copies) \
            if budget < graph.min_feasible_budget and failed.smallest_peak is None else None
        peaks = [(peak, r.strategy) for r in (failed, floor, searched) if r is not None
                 for peak in (r.peak_memory, r.smallest_peak) if peak is not None]
        peak, strategy = min([*peaks, (graph.checkpoint_all_peak, "checkpoint-all")])
        least = f"{strategy}'s plan peaks at {format_size(peak)}, the least of any found"
        return dataclasses.replace(failed, smallest_peak=peak, log=(*failed.log, least))


def computing_random_ops_once(graph: Graph, plan: Plan, *, replayed: Collection[str] = ()) -> Plan:
    """``plan`` with every random op but those ``replayed`` (ops by name) computed once and freed after its
    last reader.

    For a compiler that cannot replay a random state (Inductor, but for dropout): instead of freeing a
    random op's value and computing it again, the plan keeps it. It holds more, so it must be simulated again.
    """
    random = {v for v, node in enumerate(graph.nodes) if node.meta.get("rng") and node.meta["op"] not in replayed}
    last: dict[int, int] = {}  # random op -> the step after which it goes: its last reader, or its compute
    for k, (op, v) in enumerate(plan.steps):
        if op == "compute":
            last.update({u: k for u in graph.deps[v] if u in random})
            if v in random:
                last.setdefault(v, k)
    steps: list[tuple[Op, int]] = []
    computed: set[int] = set()
    for k, (op, v) in enumerate(plan.steps):
        if v in random and (op == "free" or v in computed):
            continue
        steps.append((op, v))
        if op == "compute":
            computed.add(v)
            steps.extend(("free", u) for u in random if last[u] == k and u in computed)
    return Plan.of(steps)


def simulate_as_run(graph: Graph, joint: JointGraph, plan: Plan, *, transfer: Transfer | None = None) -> Simulation:
    """Simulate ``plan`` with the memory its step holds when run, where the graph counts bounds made before there
    is a plan: a random op's state is saved only when the plan computes the op again, and an output kept apart
    from its op (:class:`~._joint.Producer`'s ``output_of``) is one storage with it while both are resident."""
    computes = Counter(v for op, v in plan.steps if op == "compute")
    fixed = joint.fixed_memory_replaying(graph.nodes[v].id for v, times in computes.items() if times > 1)
    if fixed != graph.fixed_memory:
        graph = Graph(graph.nodes, name=graph.name, fixed_memory=fixed, cost_unit=graph.cost_unit)
    simulation = simulate(graph, plan, transfer=transfer)
    return simulation if simulation.timing is not None else _counting_parts_once(graph, joint, plan, simulation)


def _counting_parts_once(graph: Graph, joint: JointGraph, plan: Plan, simulation: Simulation) -> Simulation:
    """``simulation`` (in order, without transfers) with each output kept apart counted once while the instance
    of its op it was taken from is resident too: that instance holds the output's bytes already. (A part taken
    from an earlier instance of an op computed again shares nothing with the new one.)"""
    position = graph.index
    owner = {position[p.name]: position[p.output_of] for p in joint.producers if p.output_of is not None}
    if not owner:
        return simulation
    parts: dict[int, list[int]] = {}
    for part, instance in owner.items():
        parts.setdefault(instance, []).append(part)
    memory = graph.memory
    sharing: set[int] = set()  # resident parts whose op's instance, the one they were taken from, is resident
    timeline = simulation.timeline.copy()
    shared = 0
    for k, (op, v) in enumerate(plan.steps):
        if op == "compute" and v in owner:  # taken out of the op's resident instance (it reads it)
            sharing.add(v)
            shared += int(memory[v])
        elif op == "free":
            for u in (v, *parts.get(v, ())):  # the part goes, or the instance it shared
                if u in sharing:
                    sharing.discard(u)
                    shared -= int(memory[u])
        timeline[k] -= shared
    after_computes = [k for k, (op, _) in enumerate(plan.steps) if op == "compute"]
    peak_step = max(after_computes, key=lambda k: (timeline[k], -k))
    return dataclasses.replace(simulation, peak_memory=int(timeline[peak_step]), peak_step=peak_step,
                               timeline=timeline)


def with_fixed_memory(graph: Graph, fixed_memory: int) -> Graph:
    """``graph`` with ``fixed_memory`` bytes resident throughout instead of its own."""
    return Graph(graph.nodes, name=graph.name, fixed_memory=fixed_memory, cost_unit=graph.cost_unit)


def sha256_but_workspaces(graph: Graph, small_workspaces: int = 0) -> str:
    """The hash of ``graph`` with its kernels' workspaces (:mod:`._workspace`) at zero bytes, the
    ``small_workspaces`` of its fixed memory too: what stays the same when a step is captured again, where on
    CUDA a workspace measured again may differ."""
    workspaces = [v for v, n in enumerate(graph.nodes) if "workspace_of" in n.meta]
    if not workspaces and not small_workspaces:
        return graph.sha256
    nodes = list(graph.nodes)
    for v in workspaces:
        nodes[v] = dataclasses.replace(nodes[v], memory=0)
    return Graph(nodes, name=graph.name, fixed_memory=graph.fixed_memory - small_workspaces,
                 cost_unit=graph.cost_unit).sha256


def retargeted_result(result: ResultDocument, graph: Graph, budget: int, why: str) -> ResultDocument | None:
    """``result``, made for a graph that differs from ``graph`` only in bytes (its kernels' workspaces as measured
    again, its fixed memory), as a result for ``graph`` within ``budget``: the same plan simulated on ``graph``, or
    None if it no longer fits. A result made for ``graph`` is returned as it is; another's lower bound, made for
    other bytes, is dropped, and its log says ``why`` it was followed."""
    if result.graph_sha256 == graph.sha256:
        return result
    if result.plan is None:
        return None
    try:
        plan = Plan.from_json(graph, result.plan)
        simulation = simulate(graph, plan, transfer=result.transfer if plan.has_transfers else None)
    except (InvalidPlan, InvalidRequest):
        return None
    if not simulation.fits(budget, result.host_budget):
        return None
    return dataclasses.replace(
        result, graph_sha256=graph.sha256, budget=budget, peak_memory=simulation.peak_memory, cost=simulation.cost,
        overhead=simulation.cost / graph.base_cost if graph.base_cost else None, lower_bound=None, gap=None,
        host_peak_memory=simulation.host_peak_memory, min_feasible_budget=graph.min_feasible_budget,
        smallest_peak=None, checkpoint_all_peak=graph.checkpoint_all_peak,
        log=(*result.log, f"followed for the same graph {why}"))


def check_result(graph: Graph, result: ResultDocument, *, budget: int, joint: JointGraph | None = None,
                 transfer: Transfer | None = None, host_budget: int | None = None) -> tuple[Plan, Simulation]:
    """Re-simulate the plan of a remat.result/v1 (``ResultDocument.from_json`` reads its JSON) and refuse it unless
    it fits ``budget`` on this graph.

    A plan that copies values to host memory is simulated with ``transfer`` (by default the result's
    own) and must also keep its host copies within ``host_budget``. With the ``joint`` graph, the plan
    is simulated as run (:func:`simulate_as_run`) and a refusal also quotes budgets as fractions of the
    activation memory.
    """
    if result.status not in FITTING_STATUSES:
        raise PlanRejected(_no_plan(graph, result, budget, joint))
    if result.graph_sha256 != graph.sha256:
        raise PlanRejected("The result was made for another graph (its graph_sha256 differs).")
    try:
        plan = Plan.from_json(graph, result.plan)
        if transfer is None and plan.has_transfers:
            transfer = result.transfer
        simulation = simulate(graph, plan, transfer=transfer) if joint is None else \
            simulate_as_run(graph, joint, plan, transfer=transfer)
    except (InvalidPlan, InvalidRequest) as e:
        raise PlanRejected(f"The plan received does not simulate: {e}") from e
    if simulation.peak_memory > budget:
        raise PlanRejected(f"The plan received peaks at {format_size(simulation.peak_memory)}, over the budget "
                           f"of {format_size(budget)}.")
    if host_budget is not None and simulation.host_peak_memory > host_budget:
        raise PlanRejected(f"The plan received holds {format_size(simulation.host_peak_memory)} of host memory, over "
                           f"the host budget of {format_size(host_budget)}.")
    return plan, simulation


def _no_plan(graph: Graph, result: ResultDocument, budget: int, joint: JointGraph | None) -> str:
    """Why there is no plan, with the leanest plan found (a budget that has one) and the floor no plan goes below."""

    def size(total: int) -> str:
        if joint is None or total < joint.resident_memory:
            return format_size(total)
        return f"{format_size(total)}, activation_budget={activation_ratio(total, graph, joint):.3f}"

    log = ((result.log or ("",))[-1])[:300]
    text = (f"Strategy {result.strategy!r} returned status {result.status.value!r} for a budget of "
            f"{size(budget)}.")
    if joint is not None and budget < joint.resident_memory:
        text += (f" That is less than the step holds before it allocates anything: its parameters, buffers and "
                 f"inputs take {format_size(joint.resident_memory)}.")
    leanest = result.smallest_peak or graph.checkpoint_all_peak
    text += (f" The leanest plan found peaks at {size(leanest)} (a budget at or above it has a plan); no plan can "
             f"go below {size(graph.min_feasible_budget)} (a bound).")
    held = 0 if joint is None else joint.fixed["outputs"] + joint.fixed["tangents"]
    if held > 0.05 * (graph.checkpoint_all_peak - graph.fixed_memory):
        text += (f" The step's outputs and their gradients ({format_size(held)}) count until the end of the step;"
                 f" if the loop backpropagates one output alone and drops the others before backward(),"
                 f" backward_from names it, and the others count until the end of the forward only.")
    return f"{text} {log}".strip()
