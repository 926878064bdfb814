"""A training graph at any batch size: each node's memory and cost, and the fixed memory, affine in it.

Activations grow with the batch (``memory = intercept + slope * batch``); parameters do not. From
the same model captured at two or more batch sizes the line is fitted and checked; a graph known
at one batch size alone is taken as proportional (activations and costs scale, fixed memory stays),
which is how the published Checkmate graphs were measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ._errors import InvalidGraph
from ._graph import Graph, Node
from ._numbers import whole_number

__all__ = ["BatchedGraph"]

MEMORY_TOLERANCE = 0.01
"""How far (a fraction, plus one byte) a node's memory may sit off the line fitted through its batch sizes.
(docs/tuning.md)"""

COST_TOLERANCE = 0.25
"""How far a graph's total cost may sit off the fitted line: measured costs are noisy, byte counts are not.
(docs/tuning.md)"""


@dataclass(frozen=True)
class _Line:
    """``intercept + slope * batch``, per node (arrays) or for one number."""

    intercept: np.ndarray
    slope: np.ndarray

    @classmethod
    def through(cls, b0: int, y0: np.ndarray, b1: int, y1: np.ndarray) -> _Line:
        slope = (y1 - y0) / (b1 - b0)
        return cls(y0 - slope * b0, slope)

    def at(self, batch: float) -> np.ndarray:
        return np.maximum(self.intercept + self.slope * batch, 0.0)


@dataclass(frozen=True)
class BatchedGraph:
    """The structure of ``template`` (ids, deps, kinds) with memory, cost and fixed memory as lines in the batch.

    >>> g = Graph.from_json({"format": "remat.graph/v1", "fixed_memory": 100, "nodes": [
    ...     {"id": "a", "deps": [], "cost": 2, "memory": 8},
    ...     {"id": "b", "deps": ["a"], "cost": 4, "memory": 16, "kind": "backward"}]})
    >>> at_4 = BatchedGraph.proportional(g, batch=2).at(4)
    >>> [n.memory for n in at_4.nodes], at_4.fixed_memory, at_4.base_cost
    ([16, 32], 100, 12.0)
    """

    template: Graph
    memory: _Line
    cost: _Line
    fixed: _Line

    @classmethod
    def proportional(cls, graph: Graph, *, batch: int) -> BatchedGraph:
        """``graph`` measured at ``batch``: node memory and cost in proportion to the batch, fixed memory constant."""
        _check_batch(batch)
        zero = np.zeros(len(graph))
        return cls(
            graph,
            _Line(zero, graph.memory / batch),
            _Line(zero, graph.cost / batch),
            _Line(np.array(float(graph.fixed_memory)), np.array(0.0)),
        )

    @classmethod
    def from_graphs(cls, graphs: Mapping[int, Graph]) -> BatchedGraph:
        """Fit the lines through the same model's graphs at two or more batch sizes; check the others lie on them.

        Raises InvalidGraph when the graphs differ in structure or a node's memory (or a graph's total
        cost) is not affine in the batch.
        """
        if len(graphs) < 2:
            raise InvalidGraph("Fitting memory to the batch size needs graphs at two or more batch sizes.")
        for batch in graphs:
            _check_batch(batch)
        (low, first), *_, (high, last) = sorted(graphs.items())
        for batch, graph in graphs.items():
            _check_same_structure(first, low, graph, batch)
        fitted = cls(
            first,
            _Line.through(low, first.memory.astype(float), high, last.memory.astype(float)),
            _Line.through(low, first.cost, high, last.cost),
            _Line.through(low, np.array(float(first.fixed_memory)), high, np.array(float(last.fixed_memory))),
        )
        for batch, graph in graphs.items():
            fitted._check_on_line(graph, batch, f"the line through batch {low} and {high}")
        return fitted

    def at(self, batch: int) -> Graph:
        """The graph at ``batch`` (memory rounded to whole bytes)."""
        _check_batch(batch)
        memory = np.rint(self.memory.at(batch)).astype(np.int64)
        cost = self.cost.at(batch)
        nodes = [Node(n.id, n.deps, float(cost[v]), int(memory[v]), n.kind, n.meta)
                 for v, n in enumerate(self.template.nodes)]
        name = f"{self.template.name or 'graph'} (batch {batch})"
        return Graph(nodes, name=name, fixed_memory=int(np.rint(self.fixed.at(batch))),
                     cost_unit=self.template.cost_unit)

    def _check_on_line(self, graph: Graph, batch: int, line: str) -> None:
        expected = self.memory.at(batch)
        off = np.abs(expected - graph.memory) > MEMORY_TOLERANCE * graph.memory + 1
        if off.any():
            v = int(np.argmax(off))
            raise InvalidGraph(
                f"Node {graph.nodes[v].id!r} holds {int(graph.memory[v])} bytes at batch {batch}, not the "
                f"{expected[v]:.0f} {line} gives: its memory is not affine in "
                "the batch. Capture at batch sizes where the model's shapes all scale with the batch (not 1).")
        total = float(self.cost.at(batch).sum())
        if abs(total - graph.base_cost) > COST_TOLERANCE * graph.base_cost:
            raise InvalidGraph(
                f"The step costs {graph.base_cost:.4g} at batch {batch}, not about the {total:.4g} {line} "
                "gives: its cost is not affine in the batch. Measure costs "
                "at larger batch sizes, or use the analytic cost model.")


def _check_batch(batch: object) -> None:
    whole_number(batch, what="A batch size", field="batch", least=1)


def _check_same_structure(first: Graph, low: int, graph: Graph, batch: int) -> None:
    if graph.ids != first.ids:
        raise InvalidGraph(
            f"The graphs at batch {low} and {batch} have different nodes ({len(first)} and {len(graph)}, or "
            "other ids): capture the same model, in the same mode, at each batch size.")
    for a, b in zip(first.nodes, graph.nodes, strict=True):
        if a.deps != b.deps or a.kind != b.kind:
            raise InvalidGraph(
                f"Node {a.id!r} has other inputs or another kind at batch {batch} than at batch {low}: "
                "capture the same model, in the same mode, at each batch size.")
