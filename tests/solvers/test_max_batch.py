"""The largest batch that fits: graphs as lines in the batch, and the search over them."""

from __future__ import annotations

import pytest
from factories import benchmark_graph, chain

from remat.schedules import BatchedGraph, Graph, InvalidGraph, InvalidRequest, checkpoint_all_plan, simulate
from remat.solvers import Convergence, max_batch


def chain_at(batch: int, n: int = 8) -> Graph:
    """A training chain whose activations take 100 bytes per sample and 10 more, with 1,000 bytes of parameters."""
    return chain(n, cost=2.0 * batch, memory=100 * batch + 10, fixed_memory=1_000)


def test_a_line_through_two_batch_sizes_gives_every_other():
    batched = BatchedGraph.from_graphs({2: chain_at(2), 8: chain_at(8), 4: chain_at(4)})
    at_100 = batched.at(100)
    assert [n.memory for n in at_100.nodes] == [n.memory for n in chain_at(100).nodes]
    assert at_100.fixed_memory == 1_000
    assert at_100.base_cost == pytest.approx(chain_at(100).base_cost)


def test_a_graph_at_one_batch_scales_its_activations_and_keeps_its_fixed_memory():
    graph = chain(4, cost=6, memory=30, fixed_memory=7)
    at_5 = BatchedGraph.proportional(graph, batch=3).at(5)
    assert {n.memory for n in at_5.nodes} == {50} and at_5.fixed_memory == 7 and at_5.base_cost == 9 * 10


def test_memory_off_the_line_names_the_node_and_the_batch():
    bent = chain(8, cost=8.0, memory=1_000, fixed_memory=1_000)          # 1,000 bytes at batch 4, not 410
    with pytest.raises(InvalidGraph, match=r"Node 'f0' holds 1000 bytes at batch 4, not the 410 the line through "
                                           r"batch 2 and 8 gives: its memory is not affine"):
        BatchedGraph.from_graphs({2: chain_at(2), 4: bent, 8: chain_at(8)})


def test_graphs_of_another_model_are_refused():
    with pytest.raises(InvalidGraph, match="different nodes"):
        BatchedGraph.from_graphs({2: chain_at(2), 4: chain_at(4, n=9)})
    with pytest.raises(InvalidGraph, match="two or more batch sizes"):
        BatchedGraph.from_graphs({2: chain_at(2)})
    with pytest.raises(InvalidRequest, match="A batch size must be a whole number >= 1, got 0"):
        BatchedGraph.proportional(chain_at(2), batch=0)


def largest_by_hand(batched: BatchedGraph, fits) -> int:  # type: ignore[no-untyped-def]
    return max((b for b in range(1, 400) if fits(batched.at(b))), default=0)


def test_checkpoint_all_gets_the_largest_batch_whose_whole_step_fits():
    batched = BatchedGraph.from_graphs({2: chain_at(2), 4: chain_at(4)})
    budget = 50_000
    answer = max_batch(batched, budget, strategy="checkpoint-all")
    by_hand = largest_by_hand(batched, lambda g: simulate(g, checkpoint_all_plan(g)).peak_memory <= budget)
    assert answer.batch == by_hand > 0
    assert answer.result is not None and answer.result.peak_memory <= budget
    assert any(t.batch == by_hand + 1 and not t.ok for t in answer.trials)


def test_checkmate_fits_a_larger_batch_within_one_extra_forward_pass():
    batched = BatchedGraph.from_graphs({2: chain_at(2), 4: chain_at(4)})
    base = max_batch(batched, 50_000, strategy="checkpoint-all").batch
    answer = max_batch(batched, 50_000, time_limit_s=20, convergence=Convergence())
    assert answer.batch > base
    result = answer.result
    assert result is not None and result.fits
    forward = sum(n.cost for n in result.graph.nodes if n.kind == "forward")
    assert result.cost <= result.graph.base_cost + forward + 1e-9
    assert all(t.max_overhead == pytest.approx(1 + 8 / 17) for t in answer.trials)     # 8 of 17 nodes forward
    assert max(t.batch for t in answer.trials if t.ok) == answer.batch
    # A batch beyond the memory floor is never solved: the floor bounds the search.
    assert all(batched.at(t.batch).min_feasible_budget <= 50_000 for t in answer.trials)


def test_a_tighter_cost_cap_gives_a_smaller_batch_and_none_fits_under_the_floor():
    batched = BatchedGraph.proportional(benchmark_graph("vgg16"), batch=256)
    budget = 16 * 2**30
    free = max_batch(batched, budget, strategy="chen-greedy")
    capped = max_batch(batched, budget, strategy="chen-greedy", max_overhead=1.01)
    assert capped.batch < free.batch
    assert capped.result is not None and capped.result.overhead <= 1.01
    assert max_batch(batched, 2**20, strategy="chen-greedy").batch == 0
    with pytest.raises(InvalidRequest, match="max_overhead"):
        max_batch(batched, budget, max_overhead=0.5)
