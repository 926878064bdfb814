"""The one simulator every plan passes through (docs/plans.md, "Memory model" and "Offload").

The simulator is the single definition of what a plan costs and how much memory it needs. A plan of
``compute`` and ``free`` statements only is walked in order:

- ``fixed_memory`` is resident throughout;
- ``compute v`` needs every dep of v resident and v not resident, and makes v resident;
  peak memory is read right after each compute;
- ``free v`` needs v resident and releases it;
- every node is computed at least once; cost is the sum of the costs of all computes.

A plan that also offloads values to host memory and reloads them is run in time, on three streams
(compute, offload, reload), each running its statements one at a time in plan order; its cost is the
makespan and its peak the largest device memory at any time (:func:`_simulate_in_time`). Without
transfers the time model gives the same peak and cost as the walk in order, which stays the path of
those plans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ._errors import InvalidPlan, InvalidRequest
from ._graph import Graph
from ._plan import TRANSFER_OPS, Op, Plan
from ._schedule import Schedule, plan_from_schedule
from ._transfer import Transfer

__all__ = ["Simulation", "Span", "Timing", "simulate", "simulate_schedule"]

Instant = tuple[float, int]
"""A point in time, ``(time, order)``: ``order`` puts the end of a statement that takes no time after its
start, so a free after a compute of cost 0 still releases after that compute allocated."""


class Span(NamedTuple):
    """When one statement of a plan with transfers ran, in the graph's cost unit."""

    step: int
    op: Op
    node: int
    start: float
    """When it started (a free: when it released)."""
    end: float
    """When it ended: a compute's output or a reload's copy is usable, an offload's host copy complete."""
    released: float | None
    """A free or an offload: when the value's device memory was released; otherwise None."""


@dataclass(frozen=True)
class Timing:
    """What only a plan with transfers has: its streams in time and its host memory."""

    makespan: float
    """The end of the last statement: the plan's cost."""
    host_peak_memory: int
    """Bytes of host memory the copies hold at most (a host copy stays until the step ends)."""
    spans: tuple[Span, ...]
    """One per statement, in plan order; :meth:`stream` picks one stream's."""
    memory: tuple[tuple[float, int], ...]
    """Device memory over time, fixed memory included: ``(time, bytes in use from then on)``, one entry an
    instant (several share a time where statements take no time, as a compute of cost 0 does)."""
    effect_order: tuple[int, ...] = ()
    """The steps that allocate or release device memory, in the order they take effect (time order,
    releases before allocations at one instant): what a memory layout of the plan follows."""

    def stream(self, op: Op) -> tuple[Span, ...]:
        """The spans of the ``compute``, ``offload`` or ``reload`` stream (or the ``free`` statements)."""
        return tuple(s for s in self.spans if s.op == op)


@dataclass(frozen=True)
class Simulation:
    """What a valid plan does: its cost, its peak memory and memory after every step.

    For a plan with transfers, ``cost`` is the makespan, ``timeline[k]`` the device memory in use right
    after statement k took effect (its allocation or its release, in time order), and ``timing`` holds
    the streams and the host memory; for any other plan ``timing`` is None.
    """

    cost: float
    peak_memory: int
    peak_step: int
    timeline: np.ndarray
    compute_counts: np.ndarray
    timing: Timing | None = None

    @property
    def recomputations(self) -> int:
        """Computes beyond the first of each node."""
        return int(self.compute_counts.sum() - len(self.compute_counts))

    @property
    def host_peak_memory(self) -> int:
        """Bytes of host memory the plan's copies hold at most; 0 for a plan without transfers."""
        return 0 if self.timing is None else self.timing.host_peak_memory

    def fits(self, budget: int, host_budget: int | None = None) -> bool:
        """Whether the peak is within ``budget`` and, when one is given, the host peak within ``host_budget``."""
        return self.peak_memory <= budget and (host_budget is None or self.host_peak_memory <= host_budget)


def simulate(graph: Graph, plan: Plan, *, transfer: Transfer | None = None) -> Simulation:
    """Run ``plan`` on ``graph`` under the memory model of docs/plans.md; raise InvalidPlan naming the step.

    A plan with ``offload`` or ``reload`` statements needs ``transfer`` (how long copies last, in the
    graph's units) and is run in time; without it, InvalidRequest. Other plans ignore ``transfer``.

    Examples
    --------
    >>> from remat.schedules import Graph, Plan, Transfer
    >>> g = Graph.from_json({"format": "remat.graph/v1", "fixed_memory": 1, "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 2, "memory": 8}]})
    >>> sim = simulate(g, Plan.of([("compute", 0), ("compute", 1), ("free", 0), ("free", 1)]))
    >>> sim.cost, sim.peak_memory, sim.timeline.tolist()
    (3.0, 13, [5, 13, 9, 1])
    >>> plan = Plan.of([("compute", 0), ("compute", 1), ("offload", 0), ("free", 1)])
    >>> sim = simulate(g, plan, transfer=Transfer(bandwidth=4, latency=0))   # the copy of a lasts 1
    >>> sim.cost, sim.peak_memory, sim.host_peak_memory, sim.timeline.tolist()
    (3.0, 13, 4, [5, 13, 9, 1])
    """
    if not plan.has_transfers:
        return _simulate_in_order(graph, plan)
    if transfer is None:
        k, (op, _) = next((k, st) for k, st in enumerate(plan.steps) if st[0] in TRANSFER_OPS)
        raise InvalidRequest(
            f"The plan copies values to and from host memory (step {k} is {op!r}); simulating it needs "
            "transfer=Transfer(bandwidth=..., latency=...) in the graph's units, or "
            "Transfer.from_profile(name, seconds_per_cost_unit=...).",
            field="transfer",
        )
    return _simulate_in_time(graph, plan, transfer)


def _simulate_in_order(graph: Graph, plan: Plan) -> Simulation:
    """The walk in order of a plan without transfers: peak read right after each compute, cost summed."""
    ids = graph.ids
    deps = graph.deps
    mem = [n.memory for n in graph.nodes]
    resident = [False] * graph.size
    counts = [0] * graph.size
    current = graph.fixed_memory
    peak, peak_step = -1, -1
    timeline = np.empty(len(plan.steps), dtype=np.int64)
    for k, (op, v) in enumerate(plan.steps):
        if not 0 <= v < graph.size:
            raise InvalidPlan(f"Step {k}: node index {v} is out of range.", step=k)
        if op == "compute":
            if resident[v]:
                raise InvalidPlan(f"Step {k}: compute {ids[v]!r}, but it is already resident.", step=k, node=ids[v])
            for u in deps[v]:
                if not resident[u]:
                    raise InvalidPlan(
                        f"Step {k}: compute {ids[v]!r} needs {ids[u]!r}, which is not resident.",
                        step=k, node=ids[v],
                    )
            resident[v] = True
            counts[v] += 1
            current += mem[v]
            if current > peak:
                peak, peak_step = current, k
        elif op == "free":
            if not resident[v]:
                raise InvalidPlan(f"Step {k}: free {ids[v]!r}, but it is not resident.", step=k, node=ids[v])
            resident[v] = False
            current -= mem[v]
        else:
            raise InvalidPlan(f"Step {k}: unknown op {op!r}.", step=k)
        timeline[k] = current
    missing = [ids[v] for v in range(graph.size) if counts[v] == 0]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise InvalidPlan(
            f"The plan never computes {', '.join(map(repr, missing[:3]))}{more}; every node must be computed.",
            node=missing[0],
        )
    counts_arr = np.array(counts, dtype=np.int64)
    cost = math.fsum(c * k for c, k in zip(graph.cost.tolist(), counts, strict=True) if k)
    return Simulation(cost=cost, peak_memory=peak, peak_step=peak_step, timeline=timeline,
                      compute_counts=counts_arr)



def _after(start: Instant, duration: float) -> Instant:
    """The end of something that starts at ``start`` and lasts ``duration``: later, even when it takes no time."""
    end = start[0] + duration
    return (end, 0) if end > start[0] else (start[0], start[1] + 1)


def _simulate_in_time(graph: Graph, plan: Plan, transfer: Transfer) -> Simulation:
    """Run a plan with transfers on the compute, offload and reload streams (docs/plans.md, "Offload").

    A first pass in plan order checks each statement and gives its start and end; every wait is on an
    earlier statement, so one pass suffices. The device memory events (an allocation at a compute's or a
    reload's start, a release at a free or after an offload) are then replayed in time order, releases
    before allocations at one instant.
    """
    ids = graph.ids
    deps = graph.deps
    mem = [n.memory for n in graph.nodes]
    cost = graph.cost.tolist()
    n = graph.size
    on_device = [False] * n  # resident, or being reloaded: as the plan reads, statement after statement
    on_host: list[int | None] = [None] * n  # the step that offloaded v
    usable: list[Instant] = [(0.0, 0)] * n  # when the device copy of v can be read
    copied: list[Instant] = [(0.0, 0)] * n  # when the host copy of v is complete
    counts = [0] * n
    computes_end = offloads_end = reloads_end = (0.0, 0)
    host = 0
    events: list[tuple[Instant, int, int, int]] = []  # (instant, 0 release | 1 allocation, step, bytes)
    spans: list[Span] = []
    for k, (op, v) in enumerate(plan.steps):
        if not 0 <= v < n:
            raise InvalidPlan(f"Step {k}: node index {v} is out of range.", step=k)
        released: Instant | None = None
        if op == "compute":
            if on_device[v]:
                raise InvalidPlan(f"Step {k}: compute {ids[v]!r}, but it is already resident.", step=k, node=ids[v])
            for u in deps[v]:
                if not on_device[u]:
                    where = (f"which was offloaded at step {on_host[u]} and not reloaded" if on_host[u] is not None
                             else "which is not resident")
                    raise InvalidPlan(f"Step {k}: compute {ids[v]!r} needs {ids[u]!r}, {where}.",
                                      step=k, node=ids[v])
            start = max([computes_end, *(usable[u] for u in deps[v])])
            end = computes_end = usable[v] = _after(start, cost[v])
            on_device[v] = True
            counts[v] += 1
            events.append((start, 1, k, mem[v]))
        elif op == "free":
            if not on_device[v]:
                where = f" (it was offloaded at step {on_host[v]})" if on_host[v] is not None else ""
                raise InvalidPlan(f"Step {k}: free {ids[v]!r}, but it is not resident{where}.", step=k, node=ids[v])
            start = end = released = max(computes_end, usable[v])
            on_device[v] = False
            events.append((released, 0, k, -mem[v]))
        elif op == "offload":
            if on_host[v] is not None:
                raise InvalidPlan(f"Step {k}: offload {ids[v]!r}, but it is already on the host "
                                  f"(offloaded at step {on_host[v]}).", step=k, node=ids[v])
            if not on_device[v]:
                raise InvalidPlan(f"Step {k}: offload {ids[v]!r}, but it is not resident.", step=k, node=ids[v])
            start = max(offloads_end, usable[v])
            end = offloads_end = copied[v] = _after(start, transfer.duration(mem[v]))
            released = max(end, computes_end)
            on_device[v], on_host[v] = False, k
            host += mem[v]
            events.append((released, 0, k, -mem[v]))
        elif op == "wait":
            if on_host[v] is None:
                raise InvalidPlan(f"Step {k}: wait for the offload of {ids[v]!r}, but it was not offloaded before.",
                                  step=k, node=ids[v])
            start = end = computes_end = max(computes_end, copied[v])  # the compute stream holds until the copy ends
            events.append((start, 1, k, 0))
        elif op == "reload":
            if on_host[v] is None:
                raise InvalidPlan(f"Step {k}: reload {ids[v]!r}, but it is not on the host; offload it first.",
                                  step=k, node=ids[v])
            if on_device[v]:
                raise InvalidPlan(f"Step {k}: reload {ids[v]!r}, but it is already resident.", step=k, node=ids[v])
            start = max(reloads_end, copied[v], computes_end)  # the computes issued before it, too
            end = reloads_end = usable[v] = _after(start, transfer.duration(mem[v]))
            on_device[v] = True
            events.append((start, 1, k, mem[v]))
        else:
            raise InvalidPlan(f"Step {k}: unknown op {op!r}.", step=k)
        spans.append(Span(k, op, v, start[0], end[0], None if released is None else released[0]))
    missing = [ids[v] for v in range(n) if counts[v] == 0]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise InvalidPlan(
            f"The plan never computes {', '.join(map(repr, missing[:3]))}{more}; every node must be computed.",
            node=missing[0],
        )
    current = graph.fixed_memory
    peak, peak_step = -1, -1
    timeline = np.empty(len(plan.steps), dtype=np.int64)
    memory: list[tuple[float, int]] = []
    last: Instant | None = None
    events.sort()
    for instant, _, k, delta in events:
        current += delta
        timeline[k] = current
        if current > peak:
            peak, peak_step = current, k
        if instant == last:
            memory[-1] = (instant[0], current)
        else:
            memory.append((instant[0], current))
            last = instant
    makespan = max((max(s.end, s.released or 0.0) for s in spans), default=0.0)
    timing = Timing(makespan=makespan, host_peak_memory=host, spans=tuple(spans), memory=tuple(memory),
                    effect_order=tuple(k for _, _, k, _ in events))
    return Simulation(cost=makespan, peak_memory=peak, peak_step=peak_step, timeline=timeline,
                      compute_counts=np.array(counts, dtype=np.int64), timing=timing)

def simulate_schedule(graph: Graph, schedule: Schedule) -> Simulation:
    """Simulate the plan of ``schedule``: how every strategy's answer is judged."""
    return simulate(graph, plan_from_schedule(graph, schedule))
