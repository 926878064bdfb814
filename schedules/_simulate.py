"""The one simulator every plan passes through (docs/plans.md, "Memory model").

The simulator is the single definition of what a plan costs and how much memory it needs:

- ``fixed_memory`` is resident throughout;
- ``compute v`` needs every dep of v resident and v not resident, and makes v resident;
  peak memory is read right after each compute;
- ``free v`` needs v resident and releases it;
- every node is computed at least once; cost is the sum of the costs of all computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._errors import InvalidPlan
from ._graph import Graph
from ._plan import Plan
from ._schedule import Schedule, plan_from_schedule

__all__ = ["Simulation", "simulate", "simulate_schedule"]


@dataclass(frozen=True)
class Simulation:
    """What a valid plan does: its cost, its peak memory and memory after every step."""

    cost: float
    peak_memory: int
    peak_step: int
    timeline: np.ndarray
    compute_counts: np.ndarray

    @property
    def recomputations(self) -> int:
        """Computes beyond the first of each node."""
        return int(self.compute_counts.sum() - len(self.compute_counts))


def simulate(graph: Graph, plan: Plan) -> Simulation:
    """Run ``plan`` on ``graph`` under the memory model of docs/plans.md; raise InvalidPlan naming the step.

    Examples
    --------
    >>> from remat.schedules import Graph, Plan
    >>> g = Graph.from_json({"format": "remat.graph/v1", "fixed_memory": 1, "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 2, "memory": 8}]})
    >>> sim = simulate(g, Plan.of([("compute", 0), ("compute", 1), ("free", 0), ("free", 1)]))
    >>> sim.cost, sim.peak_memory, sim.timeline.tolist()
    (3.0, 13, [5, 13, 9, 1])
    """
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


def simulate_schedule(graph: Graph, schedule: Schedule) -> Simulation:
    """Simulate the plan of ``schedule``: how every strategy's answer is judged."""
    return simulate(graph, plan_from_schedule(graph, schedule))
