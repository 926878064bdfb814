"""Plans (remat.plan/v1): lists of ``compute v``, ``free v``, ``offload v``, ``reload v`` and ``wait v`` statements.

What a plan costs and how much memory it needs is the simulator's to say (:mod:`._simulate`,
docs/plans.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import InvalidPlan
from ._graph import Graph

__all__ = [
    "Op",
    "Plan",
    "checkpoint_all_plan",
]

Op = Literal["compute", "free", "offload", "reload", "wait"]
"""A statement's operation: ``offload`` and ``reload`` copy a value to host memory and back; ``wait`` holds
the computation until an offload's copy has ended (and its device memory is released)."""

OPS: tuple[Op, ...] = ("compute", "free", "offload", "reload", "wait")
TRANSFER_OPS: tuple[Op, ...] = ("offload", "reload", "wait")
"""The statements that only a plan with transfers has (it runs in time)."""


@dataclass(frozen=True)
class Plan:
    """An ordered list of (op, node index) statements over one graph."""

    steps: tuple[tuple[Op, int], ...]

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def has_transfers(self) -> bool:
        """Whether the plan offloads or reloads a value (it then needs transfer parameters to simulate)."""
        return any(op in TRANSFER_OPS for op, _ in self.steps)

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
            if not isinstance(st, dict) or st.get("op") not in OPS:
                raise InvalidPlan(
                    f"Step {k}: must be {{'op': 'compute'|'free'|'offload'|'reload'|'wait', 'node': id}}.", step=k)
            node = st.get("node")
            if not isinstance(node, str) or node not in graph.index:
                raise InvalidPlan(f"Step {k}: node {node!r} is not a node of the graph.", step=k)
            steps.append((st["op"], graph.index[node]))
        return cls(tuple(steps))

    @classmethod
    def of(cls, steps: Sequence[tuple[Op, int]]) -> Plan:
        """The plan of these (op, node index) statements."""
        return cls(tuple(steps))


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
