"""Articulation points of the forward graph: the nodes whose removal splits it in two.

Chen's heuristics checkpoint such nodes on branching graphs because everything before one of them
reaches everything after it only through it (Checkmate's AP baselines).
"""

from __future__ import annotations

from remat.schedules import Graph, StrategyNotApplicable

from .._strategy import check_training_graph

__all__ = ["articulation_points", "check_articulation_points"]


def articulation_points(graph: Graph) -> tuple[int, ...]:
    """Indices, ascending, of the cut vertices of the forward subgraph taken as undirected.

    One iterative depth-first search (Hopcroft and Tarjan's low-link rule), O(V + E): a non-root
    vertex u is a cut vertex when some DFS child's subtree reaches no proper ancestor of u; the
    root is one when it has two or more DFS children.

    Examples
    --------
    >>> from remat.schedules import Graph
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 1},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 1},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 1},
    ...     {"id": "d", "deps": ["b", "c"], "cost": 1, "memory": 1},
    ...     {"id": "e", "deps": ["d"], "cost": 1, "memory": 1}]})
    >>> articulation_points(g)
    (1, 3)

    References
    ----------
    Hopcroft and Tarjan, "Algorithm 447: efficient algorithms for graph manipulation", CACM 16(6), 1973.
    """
    forward = ~graph.backward
    adjacent: list[list[int]] = [[] for _ in range(graph.size)]
    for u, v in graph.edges:
        if forward[u] and forward[v]:
            adjacent[u].append(v)
            adjacent[v].append(u)
    order = [-1] * graph.size  # discovery time
    low = [0] * graph.size
    cut: set[int] = set()
    clock = 0
    for root in graph.forward_nodes:
        if order[root] >= 0:
            continue
        order[root] = low[root] = clock
        clock += 1
        root_children = 0
        stack = [(root, -1, iter(adjacent[root]))]
        while stack:
            v, parent, neighbours = stack[-1]
            for w in neighbours:
                if order[w] < 0:
                    order[w] = low[w] = clock
                    clock += 1
                    stack.append((w, v, iter(adjacent[w])))
                    break
                if w != parent:
                    low[v] = min(low[v], order[w])
            else:
                stack.pop()
                if parent == root:
                    root_children += 1
                elif parent >= 0:
                    low[parent] = min(low[parent], low[v])
                    if low[v] >= order[parent]:
                        cut.add(parent)
        if root_children > 1:
            cut.add(root)
    return tuple(sorted(cut))


def check_articulation_points(graph: Graph) -> None:
    """Needs a forward graph with at least one articulation point to checkpoint."""
    check_training_graph(graph)
    if not articulation_points(graph):
        raise StrategyNotApplicable(
            "The forward graph has no articulation points (no single node separates it), so an ap-* "
            "strategy has nothing to checkpoint; try a linearized-* strategy or checkmate."
        )
