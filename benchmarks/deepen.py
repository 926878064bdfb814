"""A deeper training graph from a captured one: the middle block of its longest run of identical blocks
(remat.schedules.find_repeats) repeated until the graph has about the nodes asked for.

Capturing a 1,600-block GPT through AOTAutograd takes long and much memory; repeating the captured
128-block GPT's block gives the same graph shape (each copy reads the one before it in the forward pass
and the one after it in the backward pass, as the captured blocks do) in seconds.

    python benchmarks/captured_graphs.py gpt-128 --out /tmp
    python benchmarks/deepen.py /tmp/gpt-128.json --nodes 100000 --out /tmp/gpt-deep.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from remat.schedules import Graph, GraphLimits, Node
from remat.schedules._repeats import BlockRun, find_repeats

LIMITS = GraphLimits(max_nodes=1_000_000, max_edges=10_000_000)
"""What the benchmarks read large graphs with (the default caps a graph at 200,000 nodes)."""


def deepen(graph: Graph, nodes: int) -> Graph:
    """``graph`` with the middle block of its longest run repeated until it has about ``nodes`` nodes."""
    runs = find_repeats(graph)
    if not runs:
        raise SystemExit(f"{graph.name}: no repeated blocks to copy")
    run = max(runs, key=lambda r: r.count * r.size)
    copies = max(0, (nodes - graph.size) // run.size)
    return Graph(_with_copies(graph, run, run.count // 2, copies), name=f"{graph.name}-deep{copies}",
                 fixed_memory=graph.fixed_memory, cost_unit=graph.cost_unit, limits=LIMITS)


def _with_copies(graph: Graph, run: BlockRun, r: int, copies: int) -> list[Node]:
    """The nodes of ``graph`` with ``copies`` more copies of block ``r`` of ``run`` chained after it."""
    block = run.nodes[r].tolist()
    slot = {v: i for i, v in enumerate(block)}
    before = {v: i for i, v in enumerate(run.nodes[r - 1].tolist())}
    after = {v: i for i, v in enumerate(run.nodes[r + 1].tolist())}
    size = graph.size

    def index(c: int, i: int) -> int:  # copy c of block position i; copy 0 is the block itself
        return block[i] if c == 0 else size + (c - 1) * run.size + i

    def deps(c: int, v: int) -> tuple[int, ...]:
        out = []
        for u in graph.deps[v]:
            if u in slot:
                out.append(index(c, slot[u]))
            elif u in before and c > 0:
                out.append(index(c - 1, before[u]))
            elif u in after and c < copies:
                out.append(index(c + 1, after[u]))
            else:
                out.append(u)
        return tuple(out)

    nodes = {v: graph.nodes[v] for v in range(size)}
    for v in block:
        nodes[v] = _renamed(graph.nodes[v], graph.nodes[v].id, deps(0, v))
    for v in run.nodes[r + 1].tolist():  # the block after reads the last copy
        nodes[v] = _renamed(graph.nodes[v], graph.nodes[v].id,
                            tuple(index(copies, slot[u]) if u in slot else u for u in graph.deps[v]))
    for c in range(1, copies + 1):
        for i, v in enumerate(block):
            nodes[index(c, i)] = _renamed(graph.nodes[v], f"{graph.nodes[v].id}#{c}", deps(c, v))
    forward_copies = [index(c, i) for c in range(1, copies + 1) for i in range(run.forward)]
    backward_copies = [index(c, i) for c in range(copies, 0, -1) for i in range(run.forward, run.size)]
    order = []
    for v in range(size):
        if v == block[run.forward]:
            order.extend(backward_copies)
        order.append(v)
        if v == block[run.forward - 1]:
            order.extend(forward_copies)
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return [Node(n.id, tuple(int(position[u]) for u in n.deps), n.cost, n.memory, n.kind, n.meta)
            for n in (nodes[v] for v in order)]


def _renamed(node: Node, name: str, deps: tuple[int, ...]) -> Node:
    return Node(name, deps, node.cost, node.memory, node.kind, node.meta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graph", metavar="GRAPH.json")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    deep = deepen(Graph.from_path(args.graph, limits=LIMITS), args.nodes)
    args.out.write_text(json.dumps(deep.to_json(), separators=(",", ":")) + "\n")
    print(f"{deep.name}: {deep.size:,} nodes, {deep.edge_count:,} edges")


if __name__ == "__main__":
    main()
