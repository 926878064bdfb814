"""Runs of identical blocks: renamed copies are found, near-copies are never merged into a run."""

import random

import numpy as np
import pytest
from factories import BENCHMARK_DIR, BLOCK_BACKWARD, BLOCK_FORWARD, chain, stacked_blocks
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import Graph
from remat.schedules._repeats import BlockRun, find_repeats

CAPTURED = BENCHMARK_DIR / "captured"
ROLES = [role for role, *_ in BLOCK_FORWARD + BLOCK_BACKWARD]


def _roles(graph: Graph, run: BlockRun, k: int) -> list[str]:
    """Block k's node ids with the block number taken out: its roles, position by position."""
    return [graph.ids[v].rstrip("0123456789") for v in run.nodes[k].tolist()]


def _covered(run: BlockRun, graph: Graph) -> list[int]:
    """Which stacked block each block of the run is (by the digits of its first node's id)."""
    return [int(graph.ids[v].lstrip("abcdefghijklmnopqrstuvwxyz")) for v in run.nodes[:, 0].tolist()]


def _check_copies(graph: Graph, run: BlockRun) -> None:
    """Every block of the run is the first one up to renaming: labels and in-block edges position by position."""
    for k in range(run.count):
        where = {v: i for i, v in enumerate(run.nodes[k].tolist())}
        first = {v: i for i, v in enumerate(run.nodes[0].tolist())}
        for v, v0 in zip(run.nodes[k].tolist(), run.nodes[0].tolist(), strict=True):
            a, b = graph.nodes[v], graph.nodes[v0]
            assert (a.kind, a.cost, a.memory) == (b.kind, b.cost, b.memory)
            inside = sorted(where[u] for u in a.deps if u in where)
            assert inside == sorted(first[u] for u in b.deps if u in first)


def test_renamed_copies_are_one_run_with_their_roles_aligned():
    rng = random.Random(7)
    names = {(i, role): f"t{rng.getrandbits(48):x}" for i in range(-1, 12) for role in ROLES}
    graph = stacked_blocks(12, names=lambda i, role: names[(i, role)])
    (run,) = find_repeats(graph)
    assert (run.count, run.size, run.forward) == (12, len(ROLES), len(BLOCK_FORWARD))
    _check_copies(graph, run)
    by_id = {name: role for (_, role), name in names.items()}
    for k in range(run.count):
        assert [by_id[graph.ids[v]] for v in run.nodes[k].tolist()] == ROLES


@pytest.mark.parametrize(("role", "field", "value"), [
    ("s", "cost", 3.5),        # a forward node's cost
    ("q", "memory", 6),        # a forward node's memory
    ("gs", "cost", 4.25),      # a backward node's cost
    ("gln", "memory", 5),      # a backward node's memory
])
def test_a_near_copy_is_not_merged(role, field, value):
    def change(i, r, node):
        if i == 5 and r == role:
            node[field] = value

    graph = stacked_blocks(12, change=change)
    runs = find_repeats(graph)
    assert sorted(_covered(run, graph) for run in runs) == [[0, 1, 2, 3, 4], [6, 7, 8, 9, 10, 11]]
    for run in runs:
        _check_copies(graph, run)
        assert all(_roles(graph, run, k) == ROLES for k in range(run.count))


@pytest.mark.parametrize(("role", "dep"), [("o", "q"), ("gln", "s")])
def test_a_block_with_another_edge_is_not_merged(role, dep):
    def change(i, r, node):
        if i == 4 and r == role:
            node["deps"].append(f"{dep}4")

    graph = stacked_blocks(10, change=change)
    covered = sorted(_covered(run, graph) for run in find_repeats(graph))
    assert all(4 not in blocks for blocks in covered)
    assert [6, 7, 8, 9] in covered or [5, 6, 7, 8, 9] in covered


@settings(max_examples=40, deadline=None)
@given(count=st.integers(3, 9), changed=st.sets(st.integers(0, 8)), role=st.sampled_from(ROLES),
       field=st.sampled_from(["cost", "memory"]))
def test_no_run_holds_a_changed_block(count, changed, role, field):
    def change(i, r, node):
        if i in changed and r == role:
            node[field] += 1

    graph = stacked_blocks(count, change=change)
    for run in find_repeats(graph):
        _check_copies(graph, run)
        layers = run.size // len(ROLES)  # a run's block may be several stacked blocks (every other one changed)
        blocks = _covered(run, graph)
        assert run.size % len(ROLES) == 0 and blocks == list(range(blocks[0], blocks[0] + layers * run.count, layers))
        for offset in range(layers):  # each layer of a block is changed in every block of the run or in none
            assert len({b + offset in changed for b in blocks}) == 1


def test_a_chain_is_a_run_of_one_node_blocks_and_a_unet_has_none():
    (run,) = find_repeats(chain(30))
    assert (run.size, run.forward) == (2, 1) and run.count >= 27  # f0 reads nothing; the loss joins f29's block
    assert find_repeats(Graph.from_path(str(CAPTURED / "unet-6.json"))) == []


def test_runs_do_not_overlap():
    graph = stacked_blocks(9)
    nodes = np.concatenate([run.nodes.ravel() for run in find_repeats(graph)])
    assert len(nodes) == len(set(nodes.tolist()))


@pytest.mark.parametrize("reads", ["what its kernel reads", "nothing"])
def test_a_kernels_workspace_joins_the_block_of_the_kernel_that_reads_it(reads):
    """Captured graphs give a backward kernel's workspace a node of its own, which reads what the kernel reads (read
    nothing before)."""
    doc = stacked_blocks(8).to_json()
    nodes = []
    for node in doc["nodes"]:
        if node["id"].startswith("gs"):
            nodes.append({"id": f"<workspace of {node['id']}>", "deps": [] if reads == "nothing" else node["deps"],
                          "cost": 0.0, "memory": 3, "kind": "backward"})
            node = {**node, "deps": [*node["deps"], nodes[-1]["id"]]}
        nodes.append(node)
    graph = Graph.from_json({**doc, "nodes": nodes})
    (run,) = find_repeats(graph)
    assert (run.count, run.size) == (8, len(ROLES) + 1)
    _check_copies(graph, run)
    assert all(f"<workspace of gs{k}>" in _roles(graph, run, k) for k in range(8))
