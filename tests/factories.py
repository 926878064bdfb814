"""Named small graphs and hypothesis strategies for random ones, shared by the whole suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from remat.schedules import Graph

BENCHMARK_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "graphs"
BENCHMARK_NAMES = sorted(p.stem for p in BENCHMARK_DIR.glob("*.json"))


def benchmark_graph(name: str) -> Graph:
    """One of the paper graphs shipped in benchmarks/graphs."""
    return Graph.from_path(str(BENCHMARK_DIR / f"{name}.json"))


FCN8_AT_08_OPTIMUM = 10_289_323_652_736.0
"""fcn8 at budget ratio 0.8: proved by highs, cbc and cpsat alike (0.136 % overhead; published 0.1 %)."""


def graph_doc(nodes: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A remat.graph/v1 document around ``nodes``."""
    return {"format": "remat.graph/v1", "name": extra.pop("name", "test"), "nodes": nodes, **extra}


def chain(n: int, *, cost: float = 1.0, memory: int = 1, fixed_memory: int = 0) -> Graph:
    """A training chain as in Checkmate's gen_linear_graph: n forward nodes, a loss, n gradients.

    Forward f_i reads f_{i-1}; the loss reads f_{n-1}; gradient g_i reads g_{i+1} (or the loss)
    and f_i (the activation its backward needs).
    """
    nodes: list[dict[str, Any]] = []
    for i in range(n):
        nodes.append({"id": f"f{i}", "deps": [f"f{i - 1}"] if i else [], "cost": cost, "memory": memory})
    nodes.append({"id": "loss", "deps": [f"f{n - 1}"], "cost": cost, "memory": memory, "kind": "backward"})
    for i in reversed(range(n)):
        upstream = f"g{i + 1}" if i + 1 < n else "loss"
        nodes.append({"id": f"g{i}", "deps": [upstream, f"f{i}"], "cost": cost, "memory": memory,
                      "kind": "backward"})
    return Graph.from_json(graph_doc(nodes, name=f"chain{n}", fixed_memory=fixed_memory))


@st.composite
def random_dags(draw: st.DrawFn, *, min_nodes: int = 1, max_nodes: int = 12,
                training: bool | None = None) -> Graph:
    """Random DAGs in topological order with random costs and sizes; training graphs mark a backward tail."""
    n = draw(st.integers(min_nodes, max_nodes))
    nodes: list[dict[str, Any]] = []
    with_backward = draw(st.booleans()) if training is None else training
    first_backward = draw(st.integers(1, n)) if with_backward and n > 1 else n
    for v in range(n):
        deps = draw(st.lists(st.integers(0, v - 1), max_size=min(3, v), unique=True)) if v else []
        if v and not deps and draw(st.booleans()):
            deps = [v - 1]
        nodes.append({
            "id": f"n{v}",
            "deps": [f"n{u}" for u in sorted(deps)],
            "cost": draw(st.sampled_from([0.0, 1.0, 2.0, 3.5, 10.0])),
            "memory": draw(st.integers(0, 50)),
            "kind": "backward" if v >= first_backward else "forward",
        })
    fixed = draw(st.integers(0, 20))
    return Graph.from_json(graph_doc(nodes, name="random", fixed_memory=fixed))


@st.composite
def random_chains(draw: st.DrawFn, *, max_length: int = 10) -> Graph:
    """Training chains with random costs and sizes; gradients read one or two activations (as in VGG)."""
    n = draw(st.integers(1, max_length))
    wide = draw(st.booleans())  # g_i also reads f_{i-1}, as a layer's backward reads its input

    def numbers() -> dict[str, Any]:
        return {"cost": draw(st.sampled_from([0.0, 1.0, 2.0, 5.0])), "memory": draw(st.integers(0, 40))}

    nodes: list[dict[str, Any]] = [
        {"id": f"f{i}", "deps": [f"f{i - 1}"] if i else [], **numbers()} for i in range(n)]
    nodes.append({"id": "loss", "deps": [f"f{n - 1}"], "kind": "backward", **numbers()})
    for i in reversed(range(n)):
        reads = [f"g{i + 1}" if i + 1 < n else "loss", f"f{i}"] + ([f"f{i - 1}"] if wide and i else [])
        nodes.append({"id": f"g{i}", "deps": reads, "kind": "backward", **numbers()})
    return Graph.from_json(graph_doc(nodes, name="random-chain", fixed_memory=draw(st.integers(0, 20))))


def to_json_text(graph: Graph) -> str:
    return json.dumps(graph.to_json())
