"""Adding offloads and reloads to a plan that has none: where a value sits idle, and how to move it out.

A value that a plan keeps on the device between two of its reads is idle in between
(:class:`IdleInterval`). Moving it to the host for that time (:func:`insert_transfers`) frees its device
memory from the end of the offload's copy until the reload: the offload goes right after the read before
the gap, where the device copy stops being needed, and the reload some computes before the read after
it, so that the copy hides behind those computes (:class:`Computes` says which). A ``wait`` before a
compute makes sure the memory an offload releases is free by then, however slow the copy. The plan's own
computes and frees stay as they were, so a reloaded value is still freed after its last read; plans that
recompute values work the same way, each stretch of residency having its own gaps.

The simulator (:func:`remat.schedules.simulate`) says what the result costs; nothing here estimates it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate

from remat.schedules import Graph, Op, Plan

__all__ = ["Computes", "IdleInterval", "idle_intervals", "insert_transfers"]


@dataclass(frozen=True)
class IdleInterval:
    """A stretch of a plan where ``node`` stays on the device, unread, while other nodes are computed.

    ``after`` is the step of the compute that last touched it (read it, or produced it); ``before`` the
    step of the compute that reads it next. At least one compute lies strictly between; ``cost`` is what
    those computes cost together and ``bytes`` the node's size.
    """

    node: int
    after: int
    before: int
    bytes: int
    cost: float


class Computes:
    """The compute steps of a transfer-free plan with their running cost: how far ahead of a read a
    reload goes.

    >>> from remat.schedules import Graph, checkpoint_all_plan
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 2, "memory": 4},
    ...     {"id": "c", "deps": ["b", "a"], "cost": 3, "memory": 4}]})
    >>> plan = checkpoint_all_plan(g)          # compute a, compute b, compute c, free a, free b, free c
    >>> computes = Computes(g, plan)
    >>> computes.cost_between(0, 2), computes.steps_back(0, 2, 1), computes.ahead(0, 2, 5.0)
    (2.0, 1, 1)
    """

    def __init__(self, graph: Graph, plan: Plan) -> None:
        self.steps: list[int] = [k for k, (op, _) in enumerate(plan.steps) if op == "compute"]
        """The steps of the plan's computes, in order."""
        costs = graph.cost.tolist()
        self.starts: list[float] = [0.0, *accumulate(costs[plan.steps[k][1]] for k in self.steps)]
        """When the i-th compute starts if nothing waits (the cost of the computes before it); the last
        entry is when they all have ended."""

    def position(self, step: int) -> int:
        """Which compute step ``step`` is, counting from 0; ValueError when it is not a compute."""
        i = bisect.bisect_left(self.steps, step)
        if i == len(self.steps) or self.steps[i] != step:
            raise ValueError(f"Step {step} of the plan is not a compute.")
        return i

    def cost_between(self, after: int, before: int) -> float:
        """What the computes strictly between compute steps ``after`` and ``before`` cost."""
        return self.starts[self.position(before)] - self.starts[self.position(after) + 1]

    def steps_back(self, after: int, before: int, count: int) -> int:
        """The compute step ``count`` computes before compute step ``before``, but after ``after``.

        ``count`` 0 is ``before`` itself; a count that reaches ``after`` or earlier gives the first
        compute after ``after``.
        """
        i, floor = self.position(before), self.position(after) + 1
        return self.steps[max(i - count, min(floor, i))]

    def ahead(self, after: int, before: int, cost: float) -> int:
        """The latest compute step after ``after`` whose computes up to ``before`` (excluded) cost at
        least ``cost``; the first compute after ``after`` when none do.

        A reload issued before that step overlaps those computes: with ``cost`` the copy's duration,
        it ends as ``before`` would start, unless the copy stream is busy.
        """
        i, floor = self.position(before), self.position(after) + 1
        # the largest j in [floor, i] with running[i] - running[j] >= cost
        j = bisect.bisect_right(self.starts, self.starts[i] - cost, lo=floor, hi=i + 1) - 1
        return self.steps[max(j, min(floor, i))]


def idle_intervals(graph: Graph, plan: Plan) -> list[IdleInterval]:
    """Every gap between two touches of a value that holds a compute, in the order the gaps end.

    A touch is the compute of the value or a compute that reads it; a free ends the stretch of
    residency, so gaps never span one. Raises ValueError for a plan that already has transfers.
    """
    if plan.has_transfers:
        raise ValueError("The plan already moves values to the host; give one of compute and free statements only.")
    computes = Computes(graph, plan)
    touched: dict[int, int] = {}  # resident value -> step of its last touch
    position: dict[int, int] = {step: i for i, step in enumerate(computes.steps)}
    intervals: list[IdleInterval] = []
    for k, (op, v) in enumerate(plan.steps):
        if op == "free":
            touched.pop(v, None)
            continue
        for u in graph.deps[v]:
            last = touched.get(u)
            if last is not None and position[k] - position[last] > 1:
                intervals.append(IdleInterval(u, last, k, int(graph.memory[u]), computes.cost_between(last, k)))
            touched[u] = k
        touched[v] = k
    return intervals


def insert_transfers(plan: Plan, moves: Iterable[tuple[IdleInterval, int]],
                     waits: Iterable[tuple[int, int]] = ()) -> Plan:
    """``plan`` with each ``(interval, reload_step)`` moved to the host for the interval, and each
    ``(node, step)`` of ``waits`` holding the computation before ``step`` until node's offload has ended.

    The device copy leaves right after step ``interval.after``: by an ``offload`` the first time the
    node goes to the host, by a ``free`` after that (its host copy stays for the whole step). The
    ``reload`` is issued right before step ``reload_step``, a compute in ``(after, before]``: issued
    earlier, it hides behind more computes and holds its memory longer. A ``wait`` goes before a compute
    after the node's offload; without one, memory an offload releases may come back only after the next
    computes have allocated theirs. At one place, offloads and frees come after the step, waits and then
    reloads before it (so a reload there starts only once the waited-for memory is released).

    Raises ValueError for a plan with transfers, a reload step out of its interval or not a compute,
    two moves of the same interval, or a wait that is not before a compute after the node's offload.
    """
    if plan.has_transfers:
        raise ValueError("The plan already moves values to the host; give one of compute and free statements only.")
    chosen = sorted(moves, key=lambda move: move[0].after)
    leaving: dict[int, list[tuple[Op, int]]] = {}
    arriving: dict[int, list[tuple[Op, int]]] = {}
    seen: set[IdleInterval] = set()
    offloaded: dict[int, int] = {}  # node -> the step its offload follows
    for interval, reload_step in chosen:
        if interval in seen:
            raise ValueError(f"Interval {interval} is moved twice.")
        if not interval.after < reload_step <= interval.before or plan.steps[reload_step][0] != "compute":
            raise ValueError(f"The reload of node {interval.node} must come before a compute in steps "
                             f"{interval.after + 1}..{interval.before}, not before step {reload_step}.")
        seen.add(interval)
        op: Op = "free" if interval.node in offloaded else "offload"
        offloaded.setdefault(interval.node, interval.after)
        leaving.setdefault(interval.after, []).append((op, interval.node))
        arriving.setdefault(reload_step, []).append(("reload", interval.node))
    holding: dict[int, list[tuple[Op, int]]] = {}
    for node, step in waits:
        if node not in offloaded or not offloaded[node] < step < len(plan) or plan.steps[step][0] != "compute":
            raise ValueError(f"A wait for node {node} must come before a compute after its offload, not before "
                             f"step {step}.")
        holding.setdefault(step, []).append(("wait", node))
    steps: list[tuple[Op, int]] = []
    for k, statement in enumerate(plan.steps):
        steps.extend(holding.get(k, ()))
        steps.extend(arriving.get(k, ()))
        steps.append(statement)
        steps.extend(leaving.get(k, ()))
    return Plan(tuple(steps))
