"""A plan read value by value, and grouped by the module that made each value."""

from __future__ import annotations

from factories import chain, offloading_plan

from remat.schedules import Graph, Node, PlanValues, Transfer, by_module, checkpoint_all_plan, has_sources, simulate
from remat.solvers import solve


def with_modules(graph: Graph) -> Graph:
    """``graph`` with module and line metadata as the PyTorch client writes it: two values per module."""
    nodes = [Node(n.id, n.deps, n.cost, n.memory, n.kind,
                  meta={"op": f"op{v}", "module": f"block.{v // 2}", "line": f"model.py:{10 + v}"})
             for v, n in enumerate(graph.nodes)]
    return Graph(nodes, name=graph.name, fixed_memory=graph.fixed_memory)


def test_the_values_live_at_the_peak_hold_the_peak():
    graph = with_modules(chain(8, memory=2**20))
    result = solve(graph, budget=graph.checkpoint_all_peak * 2 // 3, strategy="chen-sqrtn")
    read = PlanValues.of(graph, result.plan, result.simulation)
    assert len(read.values) == graph.size
    assert sum(v.bytes for v in read.live_at_peak) == result.simulation.peak_memory
    assert [v.bytes for v in read.live_at_peak] == sorted((v.bytes for v in read.live_at_peak), reverse=True)
    again = {v.name: v.fate for v in read.again}
    assert again and set(again.values()) == {"recomputed x1"}
    assert all(v.fate == "kept" for v in read.values if v.name not in again)
    f0 = next(v for v in read.values if v.name == "f0")
    assert (f0.module, f0.line, f0.op, f0.extra_cost) == ("block.0", "model.py:10", "op0", 1.0)


def test_values_are_grouped_by_module_the_most_bytes_first():
    graph = with_modules(chain(8, memory=2**20))
    read = PlanValues.of(graph, checkpoint_all_plan(graph), simulate(graph, checkpoint_all_plan(graph)))
    groups = by_module(read.values)
    assert [len(g.values) for g in groups] == [2] * (graph.size // 2) + [1] * (graph.size % 2)
    assert sum(g.bytes for g in groups) == sum(n.memory for n in graph.nodes)
    assert {g.module for g in groups} == {f"block.{k}" for k in range((graph.size + 1) // 2)}
    assert all(v.module == g.module for g in groups for v in g.values)
    assert not read.again and all(g.extra_cost == 0 for g in groups)


def test_offloaded_values_say_so_and_skipped_nodes_are_left_out():
    graph = chain(8, memory=2**20)
    plan = offloading_plan(graph)
    read = PlanValues.of(graph, plan, simulate(graph, plan, transfer=Transfer(bandwidth=2**19, latency=0.1)),
                         skip=["loss"])
    assert read.again and all(v.fate == "offloaded, kept" and v.offloads == 1 for v in read.again)
    assert "loss" not in {v.name for v in read.values} and len(read.values) == graph.size - 1
    assert [g.module for g in by_module(read.values)] == [""]


def test_only_graphs_whose_nodes_name_a_module_have_sources():
    assert has_sources(with_modules(chain(2))) and not has_sources(chain(2))
