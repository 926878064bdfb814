"""A plan read value by value: who made each value, its bytes, its cost and what the plan does with it.

A graph whose nodes carry ``module`` and ``line`` metadata (the PyTorch client writes them: the module
path and the source line that made the value) can be read by module: :func:`by_module` groups values
under the module that made them. ``m.explain()`` in the PyTorch client and the dashboard's job page both
read a plan through :class:`PlanValues`, so they say the same thing.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

from ._graph import Graph
from ._plan import Plan
from ._simulate import Simulation

__all__ = ["ModuleValues", "PlanValue", "PlanValues", "by_module", "has_sources"]


@dataclass(frozen=True)
class PlanValue:
    """One value of a planned step: who made it and what the plan does with it."""

    name: str
    op: str
    module: str
    """The module path that made it (``transformer.h.0.attn``), or "" where the graph does not say."""
    line: str
    """The innermost source line that made it (``modeling_gpt2.py:276``), or ""."""
    kind: str
    bytes: int
    cost: float
    computes: int
    offloads: int

    @property
    def fate(self) -> str:
        """``kept`` (computed once), ``recomputed xN`` or ``offloaded`` (and recomputed, if so)."""
        fate = "kept" if self.computes <= 1 else f"recomputed x{self.computes - 1}"
        return f"offloaded, {fate}" if self.offloads else fate

    @property
    def extra_cost(self) -> float:
        """The cost of its computes beyond the first."""
        return max(self.computes - 1, 0) * self.cost


@dataclass(frozen=True)
class ModuleValues:
    """The values one module made, largest first."""

    module: str
    values: tuple[PlanValue, ...]

    @property
    def bytes(self) -> int:
        return sum(v.bytes for v in self.values)

    @property
    def extra_cost(self) -> float:
        return sum(v.extra_cost for v in self.values)


@dataclass(frozen=True)
class PlanValues:
    """Every value of a plan, those live at its peak and those it recomputes or offloads."""

    values: tuple[PlanValue, ...]
    """Every value, in the graph's order."""
    live_at_peak: tuple[PlanValue, ...]
    """The values with bytes resident right after the peak's statement, largest first."""
    again: tuple[PlanValue, ...]
    """The values computed more than once or offloaded, the most extra cost first."""

    @classmethod
    def of(cls, graph: Graph, plan: Plan, sim: Simulation, *, skip: Iterable[str] = ()) -> PlanValues:
        """Read ``plan`` (simulated as ``sim``) on ``graph``; the nodes named in ``skip`` are left out (nodes
        that compute nothing and only mark a place in the step)."""
        left_out = set(skip)
        offloads = collections.Counter(v for op, v in plan.steps if op == "offload")
        values: dict[int, PlanValue] = {}
        for v, node in enumerate(graph.nodes):
            if node.id not in left_out:
                values[v] = PlanValue(name=node.id, op=str(node.meta.get("op", "")),
                                      module=str(node.meta.get("module", "")), line=str(node.meta.get("line", "")),
                                      kind=node.kind, bytes=node.memory, cost=node.cost,
                                      computes=int(sim.compute_counts[v]), offloads=offloads[v])
        resident: set[int] = set()
        for op, v in plan.steps[:sim.peak_step + 1]:
            if op in ("compute", "reload"):
                resident.add(v)
            elif op in ("free", "offload"):
                resident.discard(v)
        live = sorted((values[v] for v in resident if v in values and values[v].bytes), key=lambda x: -x.bytes)
        again = sorted((x for x in values.values() if x.computes > 1 or x.offloads), key=lambda x: -x.extra_cost)
        return cls(tuple(values.values()), tuple(live), tuple(again))


def by_module(values: Iterable[PlanValue]) -> tuple[ModuleValues, ...]:
    """``values`` grouped by the module that made them, the most bytes first (values without a module under "").

    >>> v = [PlanValue("a", "mm", "h.0", "m.py:3", "forward", 4, 1.0, 1, 0),
    ...      PlanValue("b", "relu", "h.1", "m.py:5", "forward", 8, 1.0, 2, 0),
    ...      PlanValue("c", "add", "h.0", "m.py:4", "forward", 6, 1.0, 1, 1)]
    >>> [(g.module, g.bytes, [x.name for x in g.values]) for g in by_module(v)]
    [('h.0', 10, ['c', 'a']), ('h.1', 8, ['b'])]
    """
    groups: dict[str, list[PlanValue]] = collections.defaultdict(list)
    for v in values:
        groups[v.module].append(v)
    found = (ModuleValues(m, tuple(sorted(vs, key=lambda x: -x.bytes))) for m, vs in groups.items())
    return tuple(sorted(found, key=lambda g: -g.bytes))


def has_sources(graph: Graph) -> bool:
    """Whether ``graph``'s nodes say which module and source line made them (graphs of the PyTorch client)."""
    return any("module" in n.meta or "line" in n.meta for n in graph.nodes)
