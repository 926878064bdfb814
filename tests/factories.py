"""Named small graphs and hypothesis strategies for random ones, shared by the whole suite."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st

from remat.schedules import Graph, GraphLimits, Plan, Transfer, checkpoint_all_plan, simulate

if TYPE_CHECKING:
    from remat.solvers import ResultDocument

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


def three_layers() -> Graph:
    """A chain of three layers and its backward, one activation (x1, 100 bytes) ten times the others:
    the graph the offload tests work out by hand (tests/solvers/test_offload_insert.py)."""
    return Graph.from_json(graph_doc([
        {"id": "x1", "deps": [], "cost": 1, "memory": 100},
        {"id": "x2", "deps": ["x1"], "cost": 2, "memory": 10},
        {"id": "x3", "deps": ["x2"], "cost": 2, "memory": 10},
        {"id": "loss", "deps": ["x3"], "cost": 1, "memory": 1, "kind": "backward"},
        {"id": "g3", "deps": ["loss", "x3"], "cost": 2, "memory": 10, "kind": "backward"},
        {"id": "g2", "deps": ["g3", "x2"], "cost": 2, "memory": 10, "kind": "backward"},
        {"id": "g1", "deps": ["g2", "x1"], "cost": 1, "memory": 10, "kind": "backward"},
    ], name="three-layers"))


def skip_read() -> Graph:
    """a (40 bytes) read by b and again by d after c: the four-node graph the simulator's offload tests work out
    by hand (tests/schedules/test_offload.py), with 100 bytes of fixed memory."""
    return Graph.from_json(graph_doc([
        {"id": "a", "deps": [], "cost": 2, "memory": 40},
        {"id": "b", "deps": ["a"], "cost": 3, "memory": 10},
        {"id": "c", "deps": ["b"], "cost": 1, "memory": 20},
        {"id": "d", "deps": ["c", "a"], "cost": 2, "memory": 5},
    ], fixed_memory=100))


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


BLOCK_FORWARD = (("ln", ("x",), 1.0, 4), ("q", ("ln",), 2.0, 4), ("k", ("ln",), 2.0, 4), ("s", ("q", "k"), 3.0, 8),
                 ("o", ("s", "ln"), 2.0, 4), ("out", ("x", "o"), 1.0, 4))
BLOCK_BACKWARD = (("go", ("g", "s"), 2.0, 4), ("gs", ("go", "q", "k"), 4.0, 8), ("gln", ("gs", "go", "ln"), 2.0, 4),
                  ("gx", ("gln", "g"), 1.0, 4))
"""A transformer-like block: (role, deps, cost, memory). ``x`` is the block's input (the block before's ``out``),
``g`` the gradient coming back (the block after's ``gx``)."""


def stacked_blocks(count: int, *, names: Callable[[int, str], str] = lambda i, role: f"{role}{i}",
                   change: Callable[[int, str, dict[str, Any]], None] = lambda i, role, node: None,
                   limits: GraphLimits | None = None) -> Graph:
    """A training graph of ``count`` copies of a transformer-like block between an embedding and a loss.

    ``names(i, role)`` names block i's node of that role (renamed copies); ``change(i, role, node)`` may
    edit the node's JSON before the graph is built (near-copies).
    """
    nodes: list[dict[str, Any]] = [{"id": "embed", "deps": [], "cost": 1.0, "memory": 4}]

    def add(i: int, role: str, deps: tuple[str, ...], cost: float, memory: int, kind: str,
            outer: dict[str, str]) -> None:
        node = {"id": names(i, role), "deps": [outer.get(d) or names(i, d) for d in deps], "cost": cost,
                "memory": memory, "kind": kind}
        change(i, role, node)
        nodes.append(node)

    for i in range(count):
        for role, deps, cost, memory in BLOCK_FORWARD:
            add(i, role, deps, cost, memory, "forward", {"x": names(i - 1, "out") if i else "embed"})
    nodes.append({"id": "loss", "deps": [names(count - 1, "out")], "cost": 5.0, "memory": 1})
    nodes.append({"id": "gloss", "deps": ["loss"], "cost": 1.0, "memory": 4, "kind": "backward"})
    for i in reversed(range(count)):
        for role, deps, cost, memory in BLOCK_BACKWARD:
            add(i, role, deps, cost, memory, "backward", {"g": names(i + 1, "gx") if i + 1 < count else "gloss"})
    return Graph.from_json(graph_doc(nodes, name=f"stacked{count}"), limits=limits)


def to_json_text(graph: Graph) -> str:
    return json.dumps(graph.to_json())


def offloading_plan(graph: Graph) -> Plan:
    """Checkpoint-all with every forward value the backward reads offloaded after its last forward read and
    reloaded just before its first backward read (the offload baseline, written for tests)."""
    kinds = [n.kind for n in graph.nodes]
    offload_after: dict[int, list[int]] = {}
    reload_before: dict[int, list[int]] = {}
    for v in graph.forward_nodes:
        readers = graph.users[v]
        after = max((u for u in readers if kinds[u] == "forward"), default=v)
        before = min((u for u in readers if kinds[u] == "backward"), default=-1)
        if before > after + 1:  # a backward reader, and computes between the two to hide the copies behind
            offload_after.setdefault(after, []).append(v)
            reload_before.setdefault(before, []).append(v)
    steps: list[tuple[str, int]] = []
    for op, v in checkpoint_all_plan(graph).steps:
        if op == "compute":
            steps += [("reload", u) for u in reload_before.get(v, ())]
        steps.append((op, v))
        if op == "compute":
            steps += [("offload", u) for u in offload_after.get(v, ())]
    return Plan.of(steps)


def offload_result(graph: Graph, transfer: Transfer, *, strategy: str = "offload-test", budget: int | None = None,
                   host_budget: int | None = None) -> ResultDocument:
    """The remat.result/v1 of :func:`offloading_plan`, simulated with ``transfer`` as solve() would report it."""
    from remat.solvers import Result, ResultStatus

    plan = offloading_plan(graph)
    sim = simulate(graph, plan, transfer=transfer)
    result = Result(graph, strategy, None, ResultStatus.FEASIBLE, budget or sim.peak_memory, 0.01, plan=plan,
                    simulation=sim, lower_bound=graph.base_cost, transfer=transfer, host_budget=host_budget)
    if not result.fits:
        result.status = ResultStatus.OVER_BUDGET
    return result.document()


def store_offload_job(data_dir: Path, graph: Graph, transfer: Transfer, *, budget: int | None = None) -> str:
    """Write a finished job whose result is :func:`offload_result` into the embedded store under ``data_dir``;
    its id. Call it before the service starts, which then serves the job as any other."""
    from remat.service import Claim, SolveSpec, SqliteStore

    result = offload_result(graph, transfer, budget=budget)
    store = SqliteStore(data_dir / "jobs.sqlite3")
    try:
        store.put_graph(graph.sha256, graph.to_json())
        spec = SolveSpec(graph.sha256, result.budget, result.strategy, transfer=transfer.to_json())
        job, _ = store.submit(spec, graph_name=graph.name, token=None)
        running = store.mark_running(job.id, "test:1:a")
        assert running is not None
        store.mark_finished(Claim(job.id, "test:1:a", running.attempts), result)
    finally:
        store.close()
    return job.id


def result_document(**fields: Any) -> ResultDocument:
    """A remat.result/v1 with made-up numbers (a feasible plan of a small graph), ``fields`` replacing them."""
    from remat.solvers import ResultDocument, ResultStatus

    status = fields.pop("status", ResultStatus.FEASIBLE)
    values: dict[str, Any] = {
        "graph_name": "g", "graph_sha256": "0" * 64, "strategy": "checkpoint-all", "backend": None,
        "status": ResultStatus(status), "budget": 100, "peak_memory": 80, "cost": 12.0, "base_cost": 10.0,
        "overhead": 1.2, "lower_bound": None, "gap": None, "host_peak_memory": 0, "host_budget": None,
        "transfer": None, "min_feasible_budget": 20, "smallest_peak": None, "checkpoint_all_peak": 80,
        "solve_time_s": 0.5, "schedule": None, "plan": [], "fallback": None, "log": (), **fields}
    return ResultDocument(**values)
