import pytest
from factories import benchmark_graph, chain, graph_doc, random_dags
from hypothesis import given, settings

from remat.schedules import Graph, StrategyNotApplicable
from remat.solvers import articulation_points
from remat.solvers.baselines import check_articulation_points


def _components(nodes, edges):
    """Connected components of an undirected graph, by flood fill."""
    parent = {v: v for v in nodes}

    def root(v):
        while parent[v] != v:
            v = parent[v]
        return v

    for u, v in edges:
        parent[root(u)] = root(v)
    return len({root(v) for v in nodes})


def _cut_vertices_by_removal(g):
    """Checkmate's definition, O(V (V + E)): removing v splits the forward graph into more pieces."""
    forward = set(g.forward_nodes)
    edges = [(u, v) for u, v in g.edges if u in forward and v in forward]
    before = _components(forward, edges)
    return tuple(
        v for v in sorted(forward)
        if _components(forward - {v}, [(a, b) for a, b in edges if v not in (a, b)]) > before
    )


@settings(max_examples=150, deadline=None)
@given(random_dags(max_nodes=14))
def test_matches_remove_and_count(g):
    assert articulation_points(g) == _cut_vertices_by_removal(g)


def test_a_chain_is_cut_at_every_inner_node():
    g = chain(6)
    assert articulation_points(g) == tuple(range(1, 5))


def test_backward_nodes_are_ignored():
    # f0 - f1 - f2 is a path; the backward node g reads f0 and f2, which would close a cycle
    g = Graph.from_json(graph_doc([
        {"id": "f0", "deps": [], "cost": 1, "memory": 1},
        {"id": "f1", "deps": ["f0"], "cost": 1, "memory": 1},
        {"id": "f2", "deps": ["f1"], "cost": 1, "memory": 1},
        {"id": "g", "deps": ["f0", "f2"], "cost": 1, "memory": 1, "kind": "backward"},
    ]))
    assert articulation_points(g) == (1,)


def test_a_deep_chain_needs_no_recursion():
    assert len(articulation_points(chain(5000))) == 4998


@pytest.mark.parametrize("name, count", [("resnet50", 38), ("vgg_unet", 8), ("rl1000", 0)])
def test_benchmark_graphs(name, count):
    assert len(articulation_points(benchmark_graph(name))) == count


def test_a_graph_without_articulation_points_is_refused_clearly():
    with pytest.raises(StrategyNotApplicable, match="no articulation points"):
        check_articulation_points(benchmark_graph("rl100"))
