"""Plans (remat.plan/v1) and the one simulator every plan passes through.

A plan is a list of ``compute v`` and ``free v`` statements. The simulator is the single
definition of what a plan costs and how much memory it needs (DESIGN.md, "Memory model"):

- ``fixed_memory`` is resident throughout;
- ``compute v`` needs every dep of v resident and v not resident, and makes v resident;
  peak memory is read right after each compute;
- ``free v`` needs v resident and releases it;
- every node is computed at least once; cost is the sum of the costs of all computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ._errors import InvalidPlan
from ._graph import Graph

__all__ = [
    "Op",
    "Plan",
    "Simulation",
    "checkpoint_all_plan",
    "simulate",
]

Op = Literal["compute", "free"]


@dataclass(frozen=True)
class Plan:
    """An ordered list of (op, node index) statements over one graph."""

    steps: tuple[tuple[Op, int], ...]

    def __len__(self) -> int:
        return len(self.steps)

    def to_json(self, graph: Graph) -> list[dict[str, str]]:
        """The remat.plan/v1 list, nodes named by id."""
        ids = graph.ids
        return [{"op": op, "node": ids[v]} for op, v in self.steps]

    @classmethod
    def from_json(cls, graph: Graph, doc: Any) -> Plan:
        """Read a remat.plan/v1 list; unknown ops or node ids raise InvalidPlan."""
        if not isinstance(doc, list):
            raise InvalidPlan("A plan must be a list of {op, node} statements.")
        steps: list[tuple[Op, int]] = []
        for k, st in enumerate(doc):
            if not isinstance(st, dict) or st.get("op") not in ("compute", "free"):
                raise InvalidPlan(f"Step {k}: must be {{'op': 'compute'|'free', 'node': id}}.", step=k)
            node = st.get("node")
            if not isinstance(node, str) or node not in graph.index:
                raise InvalidPlan(f"Step {k}: node {node!r} is not a node of the graph.", step=k)
            steps.append((st["op"], graph.index[node]))
        return cls(tuple(steps))

    @classmethod
    def of(cls, steps: Sequence[tuple[Op, int]]) -> Plan:
        """The plan of these (op, node index) statements."""
        return cls(tuple(steps))


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
    """Run ``plan`` on ``graph`` under DESIGN.md's memory model; raise InvalidPlan naming the step.

    Examples
    --------
    >>> from remat.schedules import Graph
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


def checkpoint_all_plan(graph: Graph) -> Plan:
    """Compute every node once, in order, freeing each value right after its last use."""
    steps: list[tuple[Op, int]] = []
    last_use = graph.last_use
    dying: list[list[int]] = [[] for _ in range(graph.size)]
    for v, last in enumerate(last_use):
        dying[last].append(v)
    for v in range(graph.size):
        steps.append(("compute", v))
        steps.extend(("free", u) for u in dying[v])
    return Plan(tuple(steps))
