"""Repeated structure: runs of identical blocks (up to renaming) along a training graph's forward pass.

A *block* is a stretch of consecutive forward nodes together with the backward nodes that belong to
it; a *run* is a sequence of blocks, one after the other along the forward pass, that are copies of
each other: position by position the same kind, cost, memory and operation (the node's ``op``, when
it has one), and the same deps, each either a node of the same block, of the block before or after
it (at the same position), or one node outside the run that every block reads (a shared input). The
first block of a run may read, where the others read the block before, any node outside the run,
and the last block likewise where the others read the block after. Ids play no part, so a renamed
copy is a copy; a block whose cost, memory, op or deps differ anywhere is not, and a run stops at it.

Finding them takes time in proportion to the graph: forward nodes become tokens (their label and
their deps as distances back along the forward pass), candidate periods are the commonest distances
between equal tokens, and a period's runs are where the token sequence repeats itself. Each backward
node joins the block of its latest forward dep in a run (or, reading no forward node of a run, the
earliest block among its backward deps), and blocks whose full signatures differ from the run's
commonest one split the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ._graph import Graph

__all__ = ["BlockRun", "find_repeats"]

CANDIDATE_PERIODS = 16
"""How many of the commonest distances between equal forward tokens are tried as block lengths."""

MAX_RUNS = 16
"""Most runs reported (the longest first)."""


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
    ...     node("gc", "loss", "c", kind="backward"), node("gb", "gc", "b", kind="backward"),
    ...     node("ga", "gb", "a", kind="backward")]})
    >>> [run.nodes.tolist() for run in find_repeats(g)]  # blocks (a, ga), (b, gb), (c, gc)
    [[[1, 7], [2, 6], [3, 5]]]
    """
    forward = np.asarray(graph.forward_nodes, dtype=np.int64)
    labels = _labels(graph)
    position = np.full(graph.size, -1, dtype=np.int64)
    position[forward] = np.arange(len(forward))
    tokens = _forward_tokens(graph, forward, position, labels)
    runs: list[BlockRun] = []
    while len(runs) < MAX_RUNS:
        span = _best_span(tokens, min_blocks)
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


def _best_span(tokens: np.ndarray, min_blocks: int) -> tuple[int, int, int] | None:
    """(start, period, count) of the periodic stretch of ``tokens`` with the most blocks' nodes, or None."""
    best: tuple[int, int, int] | None = None
    for period in _candidate_periods(tokens):
        same = np.concatenate(([False], tokens[:-period] == tokens[period:], [False]))
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        for first, stop in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            count = (stop - first + period) // period
            if count >= min_blocks and (best is None or count * period > best[1] * best[2]):
                best = (first, period, count)
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
    _assign_backward(graph, block)
    members = _members(block, count)
    slot = np.full(graph.size, -1, dtype=np.int64)
    for nodes in members:
        slot[nodes] = np.arange(len(nodes))
    signatures = [_signature(graph, block, slot, labels, members[k], k) for k in range(count)]
    inner = signatures[1:-1] if count >= 3 else signatures
    common = Counter(sig for sig in inner if sig is not None).most_common(1)
    if not common:
        return []
    reference = common[0][0]  # an inner block's: the ends may differ from it where they read outside
    matches = [sig is not None and _matches(sig, reference, k == 0, k == count - 1)
               for k, sig in enumerate(signatures)]
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


def _assign_backward(graph: Graph, block: np.ndarray) -> None:
    """Give each backward node (in place) the latest block among its forward deps (-1, outside, when they
    all are), or, reading no forward node, the earliest among its backward deps (-1 when none is in one)."""
    backward = graph.backward
    for v in np.flatnonzero(backward).tolist():
        deps = graph.deps[v]
        forward = [int(block[u]) for u in deps if not backward[u]]
        if forward:
            block[v] = max(forward)  # -1 when its forward deps are all outside the runs
            continue
        behind = [int(block[u]) for u in deps if backward[u] and block[u] >= 0]
        if behind:
            block[v] = min(behind)


def _members(block: np.ndarray, count: int) -> list[np.ndarray]:
    """The nodes of each block 0 .. count - 1, ascending."""
    nodes = np.flatnonzero(block >= 0)
    nodes = nodes[np.argsort(block[nodes], kind="stable")]
    return np.split(nodes, np.searchsorted(block[nodes], np.arange(1, count)))


Signature = tuple[tuple[int, tuple[tuple[str, int], ...]], ...]


def _signature(graph: Graph, block: np.ndarray, slot: np.ndarray, labels: np.ndarray, nodes: np.ndarray,
               k: int) -> Signature | None:
    """Per position, the label and the deps as (where, position): in the same block ('in'), the block
    before ('prev') or after ('next'), or outside the run ('out', the node itself); None when a dep
    lies two or more blocks away."""
    out = []
    for v in nodes.tolist():
        deps = []
        for u in graph.deps[v]:
            other = int(block[u])
            if other < 0:
                deps.append(("out", u))
            elif abs(other - k) > 1:
                return None
            else:
                deps.append((("prev", "in", "next")[other - k + 1], int(slot[u])))
        out.append((int(labels[v]), tuple(sorted(deps))))
    return tuple(out)


def _matches(signature: Signature, reference: Signature, first: bool, last: bool) -> bool:
    """Whether a block's signature is the reference's; the first block may read outside nodes where the
    reference reads the block before, and the last where it reads the block after."""
    if len(signature) != len(reference):
        return False
    loose = {w for w, on in (("prev", first), ("next", last)) if on}
    for (label, deps), (want_label, want_deps) in zip(signature, reference, strict=True):
        if label != want_label or len(deps) != len(want_deps):
            return False
        if deps == want_deps:
            continue
        strict = {d for d in want_deps if d[0] not in loose}
        if not strict <= set(deps) or any(d[0] != "out" for d in set(deps) - strict):
            return False
    return True
