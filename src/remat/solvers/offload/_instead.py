"""Copies instead of recomputations (:func:`offload_instead_of_recomputing`): a remat plan made cheaper over a link.

A plan without transfers frees a value and computes it again later, paying its cost and that of the
ancestors computed again only for it. Keeping the value instead, and letting :func:`offload_to_fit` move
what then exceeds the budget to the host, costs nothing where the copies hide behind computes. The
search is greedy, one pass: the values computed again, highest cost per byte first (the shortest copy
for what it saves), each kept where the simulator says the plan, moved down to the budget, costs less.
"""

from __future__ import annotations

from collections.abc import Callable

from remat.schedules import Graph, Op, Plan, Simulation, Transfer, simulate

from ._squeeze import offload_to_fit

__all__ = ["offload_instead_of_recomputing"]


def offload_instead_of_recomputing(graph: Graph, plan: Plan, budget: int, transfer: Transfer, *,
                                   host_budget: int | None = None,
                                   stopped: Callable[[], bool] = lambda: False) -> tuple[Plan, Simulation] | None:
    """``plan`` (without transfers) with recomputations replaced by values kept and moved to the host, while the
    simulated cost within ``budget`` falls; None when no replacement lowers it or ``stopped()`` came first.

    Examples
    --------
    >>> from remat.schedules import Graph, Plan, Transfer
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 4, "memory": 2},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 2},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 2},
    ...     {"id": "d", "deps": ["c", "a"], "cost": 1, "memory": 1}]})
    >>> recompute_a = Plan.of([("compute", 0), ("compute", 1), ("free", 0), ("compute", 2), ("free", 1),
    ...                        ("compute", 0), ("compute", 3)])
    >>> simulate(g, recompute_a).cost, simulate(g, recompute_a).peak_memory
    (11.0, 5)
    >>> plan, simulation = offload_instead_of_recomputing(g, recompute_a, 5, Transfer(bandwidth=4))
    >>> " ".join(f"{op}:{g.ids[v]}" for op, v in plan.steps)
    'compute:a compute:b offload:a compute:c free:b reload:a compute:d'
    >>> simulation.cost, simulation.peak_memory   # no room for a beside b and c: d waits for its reload
    (7.5, 5)
    >>> offload_instead_of_recomputing(g, recompute_a, 5, Transfer(bandwidth=0.5)) is None   # copies of 4
    True
    """
    steps = list(plan.steps)
    cost = simulate(graph, plan, transfer=transfer).cost
    best: tuple[Plan, Simulation] | None = None
    for v in _by_cost_per_byte(graph, _recomputed(steps)):
        if stopped():
            break
        if v not in _recomputed(steps):
            continue  # no longer computed again: its readers' recomputations went with an earlier change
        kept = _keep(graph, steps, v)
        fitted = offload_to_fit(graph, Plan.of(kept), budget, transfer, host_budget=host_budget, stopped=stopped)
        if fitted is not None and fitted[1].cost < cost:
            steps, best, cost = kept, fitted, fitted[1].cost
    return best


def _recomputed(steps: list[tuple[Op, int]]) -> set[int]:
    """The values computed more than once."""
    seen: set[int] = set()
    again: set[int] = set()
    for op, v in steps:
        if op == "compute":
            (again if v in seen else seen).add(v)
    return again


def _by_cost_per_byte(graph: Graph, values: set[int]) -> list[int]:
    """``values``, highest cost per byte first (values of no bytes first of all), then in graph order."""
    costs, sizes = graph.cost.tolist(), graph.memory.tolist()
    return sorted(values, key=lambda v: (-costs[v] / sizes[v] if sizes[v] else -float("inf"), v))


def _keep(graph: Graph, steps: list[tuple[Op, int]], v: int) -> list[tuple[Op, int]]:
    """``steps`` with v kept from its first computation to where it was computed again, that computation gone,
    and every computation left unread gone with its free."""
    first = next(k for k, (op, u) in enumerate(steps) if op == "compute" and u == v)
    freed = next(k for k in range(first + 1, len(steps)) if steps[k] == ("free", v))
    again = next(k for k in range(freed + 1, len(steps)) if steps[k] == ("compute", v))
    return _without_unread([s for k, s in enumerate(steps) if k not in (freed, again)], graph)


def _without_unread(steps: list[tuple[Op, int]], graph: Graph) -> list[tuple[Op, int]]:
    """``steps`` less each computation, other than a value's first, that no computation reads before the value is
    freed, with that free. One pass from the end: a computation dropped reads nothing, so what only it read
    is dropped in turn."""
    deps = graph.deps
    first: dict[int, int] = {}
    for k, (op, v) in enumerate(steps):
        if op == "compute":
            first.setdefault(v, k)
    read: set[int] = set()
    free_at: dict[int, int] = {}
    dropped: set[int] = set()
    for k in range(len(steps) - 1, -1, -1):
        op, v = steps[k]
        if op == "free":
            read.discard(v)
            free_at[v] = k
        elif op == "compute":
            if v not in read and first[v] != k:
                dropped.add(k)
                if v in free_at:
                    dropped.add(free_at[v])
            else:
                read.update(deps[v])
            free_at.pop(v, None)
    return [s for k, s in enumerate(steps) if k not in dropped]
