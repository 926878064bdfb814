"""Repeated structure: runs of identical blocks (up to renaming) along a training graph's forward pass.

A *block* is a stretch of consecutive forward nodes together with the backward nodes that belong to
it; a *run* is a sequence of blocks, one after the other along the forward pass, that are copies of
each other: position by position the same kind, cost, memory and operation (the node's ``op``, when
it has one), and the same deps, each either a node of a block of the run (at the same distance in
blocks and the same position: the block itself, the one before, ...), or one node outside the run
that every block reads (a shared input). Where the others read a block before the first or after
the last, the blocks near the ends of the run may read any node outside it instead. Ids play no
part, so a renamed copy is a copy; a block whose cost, memory, op or deps differ anywhere is not, and a run stops at it.

Finding them takes time in proportion to the graph: forward nodes become tokens (their label and
their deps as distances back along the forward pass), candidate periods are the commonest distances
between equal tokens, and a period's runs are where the token sequence repeats itself. Each backward
node joins the block of its latest forward dep in a run (or, reading no forward node of a run, the
earliest block among its backward deps; reading nothing, its readers'), and blocks whose full
signatures differ from the run's commonest one split the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ._graph import Graph

__all__ = ["BlockRun", "find_repeats"]

CANDIDATE_PERIODS = 16
"""How many of the commonest distances between equal forward tokens are tried as block lengths. (docs/tuning.md)"""

MAX_RUNS = 16
"""Most runs reported (the longest first). (docs/tuning.md)"""


@dataclass(frozen=True)
class BlockRun:
    """Identical blocks, in forward order: ``nodes[k, i]`` is the node at position ``i`` of block ``k``.

    Positions ``0 .. forward - 1`` are a block's forward nodes in execution order, the rest its
    backward nodes in execution order; the same position is the same role in every block.
    """

    nodes: np.ndarray
    forward: int

    @property
    def count(self) -> int:
        """How many blocks the run has."""
        return int(self.nodes.shape[0])

    @property
    def size(self) -> int:
        """Nodes per block."""
        return int(self.nodes.shape[1])

    def describe(self, graph: Graph) -> str:
        """One line for a log: how many blocks of how many nodes, from which node to which."""
        first, last = self.nodes[0, 0], self.nodes[-1, self.forward - 1]
        return (f"{self.count} identical blocks of {self.size} nodes ({self.forward} forward), "
                f"forward {graph.ids[first]!r} to {graph.ids[last]!r}")


def find_repeats(graph: Graph, *, min_blocks: int = 2) -> list[BlockRun]:
    """The maximal runs of at least ``min_blocks`` identical blocks, most nodes covered first; none overlap.

    >>> from remat.schedules import Graph
    >>> def node(name, *deps, kind="forward", cost=1):
    ...     return {"id": name, "deps": list(deps), "cost": cost, "memory": 4, "kind": kind}
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     node("x"), node("a", "x"), node("b", "a"), node("c", "b"), node("loss", "c", cost=2),
    ...     node("seed", "loss", kind="backward"), node("gc", "seed", "c", kind="backward"),
    ...     node("gb", "gc", "b", kind="backward"), node("ga", "gb", "a", kind="backward")]})
    >>> [run.nodes.tolist() for run in find_repeats(g)]  # blocks (a, ga), (b, gb), (c, gc)
    [[[1, 8], [2, 7], [3, 6]]]
    """
    forward = np.asarray(graph.forward_nodes, dtype=np.int64)
    labels = _labels(graph)
    position = np.full(graph.size, -1, dtype=np.int64)
    position[forward] = np.arange(len(forward))
    tokens = _forward_tokens(graph, forward, position, labels)
    widths = _cut_widths(graph, forward, position)
    runs: list[BlockRun] = []
    while len(runs) < MAX_RUNS:
        span = _best_span(tokens, widths, min_blocks)
        if span is None:
            break
        start, period, count = span
        tokens[start:start + period * count] = -1 - np.arange(start, start + period * count)  # never equal again
        runs.extend(_verified_runs(graph, forward[start:start + period * count].reshape(count, period),
                                   labels, min_blocks))
    return sorted(runs, key=lambda run: (-run.count * run.size, int(run.nodes[0, 0])))[:MAX_RUNS]


def _labels(graph: Graph) -> np.ndarray:
    """Per node, an int naming what a copy must share: kind, cost, memory and op."""
    return _intern([(n.kind, float(n.cost), int(n.memory), str(n.meta.get("op", ""))) for n in graph.nodes])


def _intern(keys: Sequence[Hashable]) -> np.ndarray:
    """Equal keys to equal ints, distinct keys to distinct ints."""
    ids: dict[Hashable, int] = {}
    return np.array([ids.setdefault(key, len(ids)) for key in keys], dtype=np.int64)


def _forward_tokens(graph: Graph, forward: np.ndarray, position: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per forward node, an int for its label and its deps as distances back along the forward pass."""
    keys = []
    for x, v in enumerate(forward.tolist()):
        deps = tuple(sorted(x - int(position[u]) if position[u] >= 0 else -1 - u for u in graph.deps[v]))
        keys.append((int(labels[v]), deps))
    return _intern(keys)


def _cut_widths(graph: Graph, forward: np.ndarray, position: np.ndarray) -> np.ndarray:
    """widths[c]: how many forward values made before forward position c are read by one at c or after."""
    last = np.arange(len(forward))
    for v in forward.tolist():
        for u in graph.deps[v]:
            if position[u] >= 0:
                last[position[u]] = max(last[position[u]], position[v])
    rise = np.zeros(len(forward) + 1, dtype=np.int64)
    np.add.at(rise, np.arange(len(forward)) + 1, 1)
    np.subtract.at(rise, last + 1, 1)
    return np.cumsum(rise)


def _best_span(tokens: np.ndarray, widths: np.ndarray, min_blocks: int) -> tuple[int, int, int] | None:
    """(start, period, count) of the periodic stretch of ``tokens`` with the most blocks' nodes, or None.

    The blocks start where the fewest values cross into them (a layer's input, not the middle of it),
    among the starts that keep the most blocks or one fewer."""
    best: tuple[int, int, int] | None = None
    for period in _candidate_periods(tokens):
        same = np.concatenate(([False], tokens[:-period] == tokens[period:], [False]))
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        for first, stop in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            length = stop - first + period
            if length // period >= min_blocks and (best is None or length // period * period > best[1] * best[2]):
                start = min(range(first, first + period), key=lambda c: (widths[c], c))
                count = (first + length - start) // period
                best = (start, period, count) if count >= min_blocks else best
    return best


def _candidate_periods(tokens: np.ndarray) -> list[int]:
    """The commonest distances between consecutive equal tokens (at most half the sequence)."""
    order = np.lexsort((np.arange(len(tokens)), tokens))
    same = tokens[order[1:]] == tokens[order[:-1]]
    gaps = (order[1:] - order[:-1])[same]
    gaps = gaps[(gaps > 0) & (gaps <= len(tokens) // 2)]
    return [int(g) for g, _ in Counter(gaps.tolist()).most_common(CANDIDATE_PERIODS)]


def _verified_runs(graph: Graph, forward_blocks: np.ndarray, labels: np.ndarray, min_blocks: int) -> list[BlockRun]:
    """The forward blocks completed with their backward nodes, split where a block's signature differs."""
    count = forward_blocks.shape[0]
    block = np.full(graph.size, -1, dtype=np.int64)
    block[forward_blocks] = np.arange(count)[:, None]
    _assign_backward(graph, block, count)
    members = _members(block, count)
    slot = np.full(graph.size, -1, dtype=np.int64)
    for nodes in members:
        slot[nodes] = np.arange(len(nodes))
    signatures = [_signature(graph, block, slot, labels, members[k], k) for k in range(count)]
    inner = signatures[1:-1] if count >= 3 else signatures
    reference = Counter(inner).most_common(1)[0][0]  # an inner block's: the ends may read outside instead
    matches = [_matches(sig, reference, k, count) for k, sig in enumerate(signatures)]
    runs = []
    k = 0
    while k < count:
        stop = k
        while stop < count and matches[stop]:
            stop += 1
        if stop - k >= min_blocks:
            runs.append(BlockRun(np.stack(members[k:stop]), forward=forward_blocks.shape[1]))
        k = stop + 1
    return runs


def _assign_backward(graph: Graph, block: np.ndarray, count: int) -> None:
    """Give each backward node (in place) the latest block among its forward deps, or, reading no forward
    node, the earliest among its backward deps, or, reading nothing, the earliest block among its readers;
    -1 (outside) when that is no block of the run.

    Forward nodes outside the run count as before its first block or after its last, by where they run,
    so that a backward node of the blocks before the run (reading its first block's gradient) or after
    it (the loss's) is not taken into the run's first or last block.
    """
    first = int(np.flatnonzero(block == 0)[0])
    side = block.copy()
    outside = (side < 0) & ~graph.backward
    side[outside] = np.where(np.flatnonzero(outside) < first, -1, count)
    backward = graph.backward
    for v in np.flatnonzero(backward).tolist():
        deps = graph.deps[v]
        forward = [int(side[u]) for u in deps if not backward[u]]
        if forward:
            side[v] = max(forward)
        elif deps:
            side[v] = min(int(side[u]) for u in deps)
        else:
            side[v] = count
    for v in np.flatnonzero(backward).tolist():
        if not graph.deps[v] and graph.users[v]:  # made from nothing: its readers' block
            side[v] = min(int(side[w]) for w in graph.users[v])
    inside = backward & (side >= 0) & (side < count)
    block[inside] = side[inside]


def _members(block: np.ndarray, count: int) -> list[np.ndarray]:
    """The nodes of each block 0 .. count - 1, ascending."""
    nodes = np.flatnonzero(block >= 0)
    nodes = nodes[np.argsort(block[nodes], kind="stable")]
    return np.split(nodes, np.searchsorted(block[nodes], np.arange(1, count)))


OUT = 1 << 40
"""The block distance that marks a dep outside the run (its node then stands for itself)."""

Signature = tuple[tuple[int, tuple[tuple[int, int], ...]], ...]


def _signature(graph: Graph, block: np.ndarray, slot: np.ndarray, labels: np.ndarray, nodes: np.ndarray,
               k: int) -> Signature:
    """Per position, the label and the deps as (block distance, position in that block), or
    (:data:`OUT`, the node itself) for a dep outside the run."""
    out = []
    for v in nodes.tolist():
        deps = []
        for u in graph.deps[v]:
            other = int(block[u])
            deps.append((OUT, u) if other < 0 else (other - k, int(slot[u])))
        out.append((int(labels[v]), tuple(sorted(deps))))
    return tuple(out)


def _matches(signature: Signature, reference: Signature, k: int, count: int) -> bool:
    """Whether block k's signature is the reference's; where the reference reads a block that block k
    has not (before the first, after the last), block k may read any node outside the run instead."""
    if len(signature) != len(reference):
        return False
    for (label, deps), (want_label, want_deps) in zip(signature, reference, strict=True):
        if label != want_label or len(deps) != len(want_deps):
            return False
        if deps == want_deps:
            continue
        strict = {(d, j) for d, j in want_deps if d == OUT or 0 <= k + d < count}
        if not strict <= set(deps) or any(d != OUT for d, _ in set(deps) - strict):
            return False
    return True
