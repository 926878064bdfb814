import math
import re

import pytest
from factories import BENCHMARK_NAMES, benchmark_graph, chain, graph_doc

from remat.schedules import Graph, GraphLimits, InvalidGraph, InvalidRequest, Node, parse_size, resolve_budget


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
        # the JSON shapes are read before any rule is checked: a later node's malformed deps come first
        ([node("a", ["b"]), {"id": "b", "deps": 5, "cost": 1, "memory": 1}], "b", "deps", "list of node ids"),
        ([node("a", ["b"]), {"id": "b", "deps": [["x"]], "cost": 1, "memory": 1}], "b", "deps", "list of node ids"),
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


def _doc_of(nodes, **fields):
    """The JSON document of Python-built nodes, deps written as ids (``to_json`` needs a valid Graph)."""
    return graph_doc([{"id": n.id, "deps": [nodes[u].id for u in n.deps], "cost": n.cost, "memory": n.memory,
                       "kind": n.kind} for n in nodes], **fields)


@pytest.mark.parametrize(("nodes", "fields", "limits"), [
    pytest.param([], {}, None, id="empty"),
    pytest.param([Node("a", (), 1.0, 1), Node("b", (), 1.0, 1)], {}, GraphLimits(max_nodes=1), id="too many nodes"),
    pytest.param([Node("a", (), 1.0, 1)], {"name": 3}, None, id="name"),
    pytest.param([Node("a", (), 1.0, 1)], {"cost_unit": None}, None, id="cost unit"),
    pytest.param([Node("a", (), 1.0, 1)], {"fixed_memory": -1}, None, id="negative fixed memory"),
    pytest.param([Node("a", (), 1.0, 1)], {"fixed_memory": 1.5}, None, id="fractional fixed memory"),
    pytest.param([Node("a", (), 1.0, 1)], {"fixed_memory": 2**63}, None, id="fixed memory too large"),
    pytest.param([Node("a", (), 1.0, 1), Node("b", (0,), 1.0, 1), Node("c", (0, 1), 1.0, 1)], {},
                 GraphLimits(max_edges=2), id="too many edges"),
    pytest.param([Node("", (), 1.0, 1)], {}, None, id="empty id"),
    pytest.param([Node("a", (), 1.0, 1), Node("a", (), 1.0, 1)], {}, None, id="duplicate id"),
    pytest.param([Node("a", (0,), 1.0, 1)], {}, None, id="self dep"),
    pytest.param([Node("a", (1,), 1.0, 1), Node("b", (), 1.0, 1)], {}, None, id="later dep"),
    pytest.param([Node("a", (2,), 1.0, 1), Node("b", (0,), 1.0, 1), Node("c", (1,), 1.0, 1)], {}, None, id="cycle"),
    pytest.param([Node("a", (), 1.0, 1, kind="sideways")], {}, None, id="kind"),  # type: ignore[arg-type]
    pytest.param([Node("a", (), "3", 1)], {}, None, id="cost not a number"),
    pytest.param([Node("a", (), True, 1)], {}, None, id="cost a boolean"),
    pytest.param([Node("a", (), -1.0, 1)], {}, None, id="negative cost"),
    pytest.param([Node("a", (), math.nan, 1)], {}, None, id="cost nan"),
    pytest.param([Node("a", (), 10**400, 1)], {}, None, id="cost beyond floats"),
    pytest.param([Node("a", (), 1.0, 1.5)], {}, None, id="fractional memory"),
    pytest.param([Node("a", (), 1.0, None)], {}, None, id="missing memory"),
    pytest.param([Node("a", (), 1.0, -3)], {}, None, id="negative memory"),
    pytest.param([Node("a", (), 1.0, 2**61), Node("b", (0,), 1.0, 2**61 + 1)], {}, None, id="total memory"),
    pytest.param([Node("a", (), 6e299, 1), Node("b", (0,), 6e299, 1)], {}, None, id="total cost"),
])
def test_python_and_json_graphs_break_each_rule_with_the_same_message(nodes, fields, limits):
    with pytest.raises(InvalidGraph) as built:
        Graph(nodes, limits=limits, **fields)
    with pytest.raises(InvalidGraph) as read:
        Graph.from_json(_doc_of(nodes, **fields), limits=limits)
    assert (str(built.value), built.value.node, built.value.field) == (
        str(read.value), read.value.node, read.value.field)


def test_a_python_dep_that_is_no_index_is_not_a_node():
    with pytest.raises(InvalidGraph, match=re.escape("Node 'a': dep #7 is not a node of the graph.")) as err:
        Graph([Node("a", (7,), 1.0, 1)])
    assert (err.value.node, err.value.field) == ("a", "deps")
