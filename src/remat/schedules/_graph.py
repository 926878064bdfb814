"""The training graph: nodes in execution order with costs and output sizes (remat.graph/v1).

A :class:`Graph` is validated once, when it is built, and trusted everywhere after that.
Nodes are addressed by their index in execution order; ids are only for people and JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np

from ._errors import InvalidGraph

__all__ = ["GRAPH_FORMAT", "Graph", "GraphLimits", "Kind", "Node"]

GRAPH_FORMAT = "remat.graph/v1"

Kind = Literal["forward", "backward"]
_KINDS = ("forward", "backward")
_NODE_FIELDS = ("id", "deps", "cost", "memory", "kind")


MAX_TOTAL_BYTES = 2**62
"""Fixed memory plus every output must stay below this, so that no sum of sizes overflows int64."""

MAX_TOTAL_COST = 1e300
"""The costs of all nodes must sum below this, so that no plan's cost (every node computed up to
10^8 times) overflows a float."""


@dataclass(frozen=True)
class GraphLimits:
    """Size caps applied when a graph is read; the service's settings set its own (docs/tuning.md).

    The defaults are twice the 100,000-node graphs the ``checkmate`` strategy is measured to solve in 30 s
    within about 650 MB (the solve and its helper process); strategies whose time or memory grows faster
    than the graph refuse smaller ones (:attr:`remat.solvers.Strategy.node_limit`).
    """

    max_nodes: int = 200_000
    max_edges: int = 1_000_000


@dataclass(frozen=True)
class Node:
    """One operation: its output of ``memory`` bytes costs ``cost`` to compute from ``deps``."""

    id: str
    deps: tuple[int, ...]
    cost: float
    memory: int
    kind: Kind = "forward"
    meta: Mapping[str, Any] = field(default_factory=dict)


class Graph:
    """A validated remat.graph/v1: nodes in topological (execution) order.

    Parameters
    ----------
    nodes : sequence of Node
        In execution order; every dep index is smaller than the node's own index.
    fixed_memory : int
        Bytes resident throughout (parameters, gradients, optimizer state, inputs).

    Examples
    --------
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 2, "memory": 8}]})
    >>> g.min_feasible_budget, g.base_cost
    (12, 3.0)
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        *,
        name: str = "",
        fixed_memory: int = 0,
        cost_unit: str = "",
        limits: GraphLimits | None = None,
    ) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.name = name
        self.fixed_memory = fixed_memory
        self.cost_unit = cost_unit
        _check_graph(self, limits or GraphLimits())

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: Any, *, limits: GraphLimits | None = None) -> Graph:
        """Read and validate a remat.graph/v1 document (already parsed from JSON)."""
        if not isinstance(doc, Mapping):
            raise InvalidGraph("The graph must be a JSON object.")
        if doc.get("format") != GRAPH_FORMAT:
            raise InvalidGraph(
                f"Field 'format' must be {GRAPH_FORMAT!r}, got {doc.get('format')!r}.", field="format"
            )
        raw_nodes = doc.get("nodes")
        if not isinstance(raw_nodes, list):
            raise InvalidGraph("Field 'nodes' must be a list of node objects.", field="nodes")
        return cls(
            _read_nodes(raw_nodes),
            name=doc.get("name", ""),
            fixed_memory=_json_whole(doc.get("fixed_memory", 0)),
            cost_unit=doc.get("cost_unit", ""),
            limits=limits,
        )

    @classmethod
    def from_path(cls, path: str, *, limits: GraphLimits | None = None) -> Graph:
        """Read a remat.graph/v1 JSON file."""
        with open(path, encoding="utf-8") as f:
            try:
                doc = json.load(f)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise InvalidGraph(f"{path} is not valid JSON: {e}.") from e
        return cls.from_json(doc, limits=limits)

    def to_json(self) -> dict[str, Any]:
        """The remat.graph/v1 document, metadata included."""
        return {
            "format": GRAPH_FORMAT,
            "name": self.name,
            "cost_unit": self.cost_unit,
            "fixed_memory": self.fixed_memory,
            "nodes": [self._node_json(v) for v in range(self.size)],
        }

    def _node_json(self, v: int) -> dict[str, Any]:
        node = self.nodes[v]
        out: dict[str, Any] = {
            "id": node.id,
            "deps": [self.nodes[u].id for u in node.deps],
            "cost": node.cost,
            "memory": node.memory,
            "kind": node.kind,
        }
        out.update(node.meta)
        return out

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle of the graph keeps: its validated nodes and metadata, not the cached properties
        (which other threads may be filling in meanwhile); unpickling checks nothing again."""
        return {"nodes": self.nodes, "name": self.name, "fixed_memory": self.fixed_memory, "cost_unit": self.cost_unit}

    # -- identity -----------------------------------------------------------------------------

    @cached_property
    def sha256(self) -> str:
        """Hash of what a solver sees (ids, deps, costs, sizes, kinds, fixed memory), not metadata."""
        canon = {
            "fixed_memory": self.fixed_memory,
            "nodes": [
                [n.id, [self.nodes[u].id for u in n.deps], float(n.cost), n.memory, n.kind]
                for n in self.nodes
            ],
        }
        text = json.dumps(canon, separators=(",", ":"), sort_keys=True, allow_nan=False)
        return hashlib.sha256(text.encode()).hexdigest()

    # -- structure ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of nodes (and of Checkmate stages)."""
        return len(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"Graph(name={self.name!r}, nodes={self.size}, edges={self.edge_count})"

    @cached_property
    def index(self) -> dict[str, int]:
        """Node id to index."""
        return {n.id: i for i, n in enumerate(self.nodes)}

    @cached_property
    def deps(self) -> tuple[tuple[int, ...], ...]:
        """deps[v]: indices of the nodes whose outputs v reads."""
        return tuple(n.deps for n in self.nodes)

    @cached_property
    def users(self) -> tuple[tuple[int, ...], ...]:
        """users[u]: indices of the nodes that read u, ascending."""
        out: list[list[int]] = [[] for _ in self.nodes]
        for v, node in enumerate(self.nodes):
            for u in node.deps:
                out[u].append(v)
        return tuple(tuple(us) for us in out)

    @cached_property
    def dep_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """deps as two int64 arrays, ``(offsets, flat)``: ``flat[offsets[v]:offsets[v + 1]]`` is deps[v]."""
        flat = np.fromiter((u for n in self.nodes for u in n.deps), dtype=np.int64, count=self.edge_count)
        offsets = np.zeros(self.size + 1, dtype=np.int64)
        np.cumsum([len(n.deps) for n in self.nodes], out=offsets[1:])
        return offsets, flat

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """(u, v) for every dep u of v, in node order."""
        return tuple((u, v) for v, n in enumerate(self.nodes) for u in n.deps)

    @property
    def edge_count(self) -> int:
        """How many (dep, reader) pairs the graph has."""
        return sum(len(n.deps) for n in self.nodes)

    @cached_property
    def ids(self) -> tuple[str, ...]:
        """The node ids, in node order (index to id; ``index`` maps back)."""
        return tuple(n.id for n in self.nodes)

    @cached_property
    def last_use(self) -> tuple[int, ...]:
        """Index of the last node that reads v, or v itself when nothing does."""
        return tuple(us[-1] if us else v for v, us in enumerate(self.users))

    @cached_property
    def cost(self) -> np.ndarray:
        """Per-node compute cost (float64)."""
        return np.array([n.cost for n in self.nodes], dtype=np.float64)

    @cached_property
    def memory(self) -> np.ndarray:
        """Per-node output size in bytes (int64)."""
        return np.array([n.memory for n in self.nodes], dtype=np.int64)

    @cached_property
    def backward(self) -> np.ndarray:
        """True where the node is a backward (gradient) node."""
        return np.array([n.kind == "backward" for n in self.nodes], dtype=bool)

    @cached_property
    def forward_nodes(self) -> tuple[int, ...]:
        """Indices of forward nodes, in order."""
        return tuple(v for v, n in enumerate(self.nodes) if n.kind == "forward")

    # -- bounds -------------------------------------------------------------------------------

    @cached_property
    def base_cost(self) -> float:
        """Cost of computing every node exactly once."""
        return float(math.fsum(n.cost for n in self.nodes))

    @cached_property
    def compute_footprint(self) -> np.ndarray:
        """Per node, memory(v) plus the memory of its deps: what is resident while v is computed."""
        mem = [n.memory for n in self.nodes]
        return np.array([mem[v] + sum(mem[u] for u in n.deps) for v, n in enumerate(self.nodes)], dtype=np.int64)

    @cached_property
    def min_feasible_budget(self) -> int:
        """fixed + the largest compute footprint: no plan fits under it."""
        return self.fixed_memory + int(self.compute_footprint.max())

    @cached_property
    def checkpoint_all_peak(self) -> int:
        """Peak memory of the checkpoint-all plan; ``budget_ratio`` is relative to it.

        That plan computes every node once, in order, and frees each value right after its last
        reader is computed, so while v is computed every u <= v with ``last_use[u] >= v`` is resident.
        """
        live = np.zeros(self.size + 1, dtype=np.int64)
        np.add.at(live, np.arange(self.size), self.memory)
        np.subtract.at(live, np.asarray(self.last_use, dtype=np.int64) + 1, self.memory)
        return self.fixed_memory + int(np.cumsum(live)[:-1].max())


# -- validation -----------------------------------------------------------------------------------
#
# The reader turns JSON into Nodes and checks only what JSON alone can get wrong: the shapes (an object,
# a list, a list of strings) and dep ids that name no node. Every other rule is checked once, by the
# constructor, for graphs read from JSON and built in Python alike.


def _read_nodes(raw_nodes: list[Any]) -> list[Node]:
    """Turn node objects into Nodes, dep ids into indices; the values are checked by the constructor."""
    for i, raw in enumerate(raw_nodes):
        if not isinstance(raw, Mapping):
            raise InvalidGraph(f"Node #{i} must be a JSON object.", field="nodes")
    position = _positions([raw.get("id") for raw in raw_nodes])
    return [
        Node(
            id=raw["id"],
            deps=_read_deps(raw, position),
            cost=_json_float(raw.get("cost")),
            memory=_json_whole(raw.get("memory")),
            kind=raw.get("kind", "forward"),
            meta={k: v for k, v in raw.items() if k not in _NODE_FIELDS},
        )
        for raw in raw_nodes
    ]


def _read_deps(raw: Mapping[str, Any], position: dict[str, int]) -> tuple[int, ...]:
    node_id = raw["id"]
    deps = raw.get("deps", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise InvalidGraph(f"Node {node_id!r}: field 'deps' must be a list of node ids.", node=node_id, field="deps")
    for d in deps:
        if d not in position:
            raise InvalidGraph(f"Node {node_id!r}: dep {d!r} is not a node of the graph.", node=node_id, field="deps")
    return tuple(dict.fromkeys(position[d] for d in deps))  # repeated deps once each, in order


def _json_float(value: Any) -> Any:
    """A JSON number as a float; anything else (an integer beyond any float too) as it is, for the check."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return value
    return value


def _json_whole(value: Any) -> Any:
    """A whole number written as ``400.0`` as the int 400; anything else as it is, for the check."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _check_graph(graph: Graph, limits: GraphLimits) -> None:
    """Every rule of remat.graph/v1, in the order the documentation lists them."""
    if not graph.nodes:
        raise InvalidGraph("The graph is empty: 'nodes' must hold at least one node.", field="nodes")
    if graph.size > limits.max_nodes:
        raise InvalidGraph(f"The graph has {graph.size} nodes; the limit is {limits.max_nodes}.", field="nodes")
    for name in ("name", "cost_unit"):
        if not isinstance(getattr(graph, name), str):
            raise InvalidGraph(f"Field {name!r} must be a string, got {getattr(graph, name)!r}.", field=name)
    _check_bytes(graph.fixed_memory, node=None, field="fixed_memory")
    if graph.fixed_memory > MAX_TOTAL_BYTES:
        raise InvalidGraph(f"Field 'fixed_memory' must be in [0, {MAX_TOTAL_BYTES}] bytes.", field="fixed_memory")
    if graph.edge_count > limits.max_edges:
        raise InvalidGraph(f"The graph has {graph.edge_count} edges; the limit is {limits.max_edges}.", field="deps")
    _positions([n.id for n in graph.nodes])
    total = int(graph.fixed_memory)
    total_cost = 0.0
    for v, node in enumerate(graph.nodes):
        _check_deps(graph, v)
        if node.kind not in _KINDS:
            raise InvalidGraph(f"Node {node.id!r}: field 'kind' must be 'forward' or 'backward', got {node.kind!r}.",
                               node=node.id, field="kind")
        total_cost += _check_cost(node)
        _check_bytes(node.memory, node=node.id, field="memory")
        total += int(node.memory)
        if total > MAX_TOTAL_BYTES:
            raise InvalidGraph(f"Node {node.id!r}: its memory brings the graph's total (fixed memory plus every "
                               f"output) above {MAX_TOTAL_BYTES} bytes, more than memory sizes can count.",
                               node=node.id, field="memory")
        if total_cost > MAX_TOTAL_COST:
            raise InvalidGraph(f"Node {node.id!r}: its cost brings the graph's total cost above {MAX_TOTAL_COST:g}, "
                               "beyond what plan costs can add up to.", node=node.id, field="cost")


def _positions(ids: Sequence[Any]) -> dict[str, int]:
    """Node id to index; every id a non-empty string, none twice."""
    position: dict[str, int] = {}
    for i, node_id in enumerate(ids):
        if not isinstance(node_id, str) or not node_id:
            raise InvalidGraph(f"Node #{i}: field 'id' must be a non-empty string.", field="id")
        if node_id in position:
            raise InvalidGraph(f"Node {node_id!r}: duplicate id (also node #{position[node_id]}).",
                               node=node_id, field="id")
        position[node_id] = i
    return position


def _check_deps(graph: Graph, v: int) -> None:
    """Every dep of node v is an earlier node; a later one is reported as the cycle it closes, if any."""
    node = graph.nodes[v]
    for u in node.deps:
        if not 0 <= u < graph.size:
            raise InvalidGraph(f"Node {node.id!r}: dep #{u} is not a node of the graph.", node=node.id, field="deps")
        if u == v:
            raise InvalidGraph(f"Node {node.id!r}: it lists itself as a dep (a cycle).", node=node.id, field="deps")
        if u > v:
            cycle = [graph.nodes[w].id for w in _find_cycle(graph)]
            if cycle:
                raise InvalidGraph(
                    f"The graph has a cycle: {' -> '.join(map(repr, cycle))}.", node=cycle[0], field="deps"
                )
            raise InvalidGraph(
                f"Node {node.id!r}: dep {graph.nodes[u].id!r} comes later in 'nodes'; nodes must be listed in "
                f"execution (topological) order.", node=node.id, field="deps"
            )


def _find_cycle(graph: Graph) -> list[int]:
    """A cycle as a list of indices (first repeated at the end), or [] if the deps are acyclic."""
    n = graph.size
    deps = [[u for u in node.deps if 0 <= u < n] for node in graph.nodes]
    state = [0] * n  # 0 new, 1 on stack, 2 done
    for root in range(n):
        if state[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path: list[int] = [root]
        state[root] = 1
        while stack:
            v, k = stack[-1]
            if k < len(deps[v]):
                stack[-1] = (v, k + 1)
                u = deps[v][k]
                if state[u] == 1:
                    return list(reversed(path[path.index(u):] + [u]))
                if state[u] == 0:
                    state[u] = 1
                    stack.append((u, 0))
                    path.append(u)
            else:
                state[v] = 2
                stack.pop()
                path.pop()
    return []


def _check_cost(node: Node) -> float:
    """The node's cost as a float, once it is a finite number >= 0."""
    value: Any = node.cost
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidGraph(f"Node {node.id!r}: field 'cost' must be a number, got {value!r}.",
                           node=node.id, field="cost")
    try:
        cost = float(value)
    except OverflowError:  # an integer beyond any float
        cost = math.inf
    if not math.isfinite(cost) or cost < 0:
        raise InvalidGraph(f"Node {node.id!r}: field 'cost' must be finite and >= 0, got {value!r}.",
                           node=node.id, field="cost")
    return cost


def _check_bytes(value: Any, *, node: str | None, field: str) -> None:
    where = f"Node {node!r}: field {field!r}" if node is not None else f"Field {field!r}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidGraph(f"{where} must be a whole number of bytes, got {value!r}.", node=node, field=field)
    if value < 0:
        raise InvalidGraph(f"{where} must be >= 0, got {value}.", node=node, field=field)
