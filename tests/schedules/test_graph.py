import math
import re

import pytest
from factories import BENCHMARK_NAMES, benchmark_graph, chain, graph_doc

from remat.schedules import Graph, GraphLimits, InvalidGraph, InvalidRequest, parse_size, resolve_budget


def node(id, deps=(), cost=1.0, memory=1, **kw):
    return {"id": id, "deps": list(deps), "cost": cost, "memory": memory, **kw}


def test_reads_and_writes_the_same_document():
    doc = graph_doc([node("a", memory=4), node("b", ["a"], cost=2, memory=8, kind="backward", op="mm")],
                    fixed_memory=3, cost_unit="flops")
    g = Graph.from_json(doc)
    assert Graph.from_json(g.to_json()).to_json() == g.to_json()
    assert g.to_json()["nodes"][1]["op"] == "mm"
    assert g.deps == ((), (0,)) and g.users == ((1,), ())
    assert g.compute_footprint.tolist() == [4, 12] and g.min_feasible_budget == 3 + 12
    assert g.base_cost == 3.0


def test_a_repeated_dep_counts_once_in_its_first_place():
    g = Graph.from_json(graph_doc([node("a"), node("b"), node("c", ["b", "a", "b", "a"])]))
    assert g.deps[2] == (1, 0)


def test_hash_ignores_metadata_but_not_costs():
    a = Graph.from_json(graph_doc([node("a", op="x", name="first")], name="one"))
    b = Graph.from_json(graph_doc([node("a")], name="two"))
    c = Graph.from_json(graph_doc([node("a", cost=2.0)]))
    assert a.sha256 == b.sha256 != c.sha256


@pytest.mark.parametrize(
    ("nodes", "node_id", "field", "words"),
    [
        ([node("a", ["zz"])], "a", "deps", "'zz' is not a node"),
        ([node("a", ["b"]), node("b")], "a", "deps", "comes later"),
        ([node("a", ["b"]), node("b", ["a"])], "a", "deps", "cycle"),
        ([node("a", ["a"])], "a", "deps", "cycle"),
        ([node("a"), node("a")], "a", "id", "duplicate"),
        ([node("a", cost=-1)], "a", "cost", ">= 0"),
        ([node("a", cost=math.nan)], "a", "cost", "finite"),
        ([node("a", cost=math.inf)], "a", "cost", "finite"),
        ([node("a", cost="3")], "a", "cost", "number"),
        ([node("a", memory=-5)], "a", "memory", ">= 0"),
        ([node("a", memory=1.5)], "a", "memory", "whole number"),
        ([node("a", memory=2**70)], "a", "memory", "above"),
        ([node("a", memory=2**61), node("b", ["a"], memory=2**61 + 1)], "b", "memory", "total"),
        ([node("a", cost=6e307), node("b", cost=1.2e308)], "a", "cost", "total cost"),
        ([node("a", cost=6e299), node("b", ["a"], cost=6e299)], "b", "cost", "total cost"),
        ([node("a", kind="sideways")], "a", "kind", "forward"),
        ([{"id": "a", "deps": "b", "cost": 1, "memory": 1}], "a", "deps", "list"),
        ([node("a", cost=10**400)], "a", "cost", "finite"),
        # a later node's malformed deps do not get in the way of the earlier node's error
        ([node("a", ["b"]), {"id": "b", "deps": 5, "cost": 1, "memory": 1}], "a", "deps", "comes later"),
        ([node("a", ["b"]), {"id": "b", "deps": [["x"]], "cost": 1, "memory": 1}], "a", "deps", "comes later"),
        ([{"deps": []}], None, "id", "non-empty string"),
    ],
)
def test_each_invalid_graph_names_node_and_field(nodes, node_id, field, words):
    with pytest.raises(InvalidGraph) as err:
        Graph.from_json(graph_doc(nodes))
    assert err.value.node == node_id
    assert err.value.field == field
    assert words in str(err.value)


def test_empty_and_malformed_documents():
    with pytest.raises(InvalidGraph, match="empty"):
        Graph.from_json(graph_doc([]))
    with pytest.raises(InvalidGraph, match="format"):
        Graph.from_json({"format": "other", "nodes": [node("a")]})
    with pytest.raises(InvalidGraph, match="JSON object"):
        Graph.from_json([1, 2])
    with pytest.raises(InvalidGraph, match="fixed_memory"):
        Graph.from_json(graph_doc([node("a")], fixed_memory=-1))
    with pytest.raises(InvalidGraph, match="fixed_memory") as err:
        Graph.from_json(graph_doc([node("a")], fixed_memory=2**63))
    assert err.value.field == "fixed_memory" and err.value.node is None


def test_a_file_that_is_not_utf8_json_is_refused_by_name(tmp_path):
    path = tmp_path / "graph.json"
    path.write_bytes("{}".encode("utf-16"))
    with pytest.raises(InvalidGraph, match="not valid JSON"):
        Graph.from_path(str(path))


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"budget_ratio": 1e308}, "budget_ratio", "in (0, 1000]"),
    ({"budget_ratio": math.nan}, "budget_ratio", "in (0, 1000]"),
    ({"budget_ratio": 0}, "budget_ratio", "in (0, 1000]"),
    ({"budget": 2**63}, "budget", "whole number of bytes in [0,"),
    ({"budget": -1}, "budget", "whole number of bytes in [0,"),
])
def test_budgets_out_of_range_are_refused_by_field(kwargs, field, words):
    with pytest.raises(InvalidRequest, match=re.escape(words)) as err:
        resolve_budget(chain(3), **kwargs)
    assert err.value.field == field


@pytest.mark.parametrize(("text", "words"), [("1e400", "at most"), ("99999999TiB", "at most"), ("-3", "Cannot read"),
                                             (-3, ">= 0"), ("12 parsecs", "Cannot read")])
def test_sizes_that_cannot_be_bytes_are_refused(text, words):
    with pytest.raises(InvalidRequest, match=words):
        parse_size(text)


def test_size_limits():
    nodes = [node(f"n{i}", [f"n{i - 1}"] if i else []) for i in range(10)]
    with pytest.raises(InvalidGraph, match="limit is 5") as err:
        Graph.from_json(graph_doc(nodes), limits=GraphLimits(max_nodes=5))
    assert err.value.field == "nodes"
    with pytest.raises(InvalidGraph, match="edges"):
        Graph.from_json(graph_doc(nodes), limits=GraphLimits(max_edges=3))


def test_cycle_message_lists_the_cycle():
    with pytest.raises(InvalidGraph) as err:
        Graph.from_json(graph_doc([node("a", ["c"]), node("b", ["a"]), node("c", ["b"])]))
    assert "'a' -> 'b' -> 'c' -> 'a'" in str(err.value) or "->" in str(err.value)


def test_chain_factory_shape():
    g = chain(4)
    assert g.size == 9 and len(g.forward_nodes) == 4 and g.backward.sum() == 5


@pytest.mark.parametrize("name", BENCHMARK_NAMES)
def test_benchmark_graphs_load(name):
    g = benchmark_graph(name)
    assert g.size > 0 and g.min_feasible_budget <= g.checkpoint_all_peak
