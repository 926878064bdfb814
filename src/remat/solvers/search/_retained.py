"""The plan that a retention relaxation's solution describes (:func:`remat.solvers.bounds.retention_solution`).

The relaxation says, for each value and each stage it may be needed across, whether the value is
resident at the end of that stage. Read as a plan: a value not resident across a stage is freed
after its last read before it and computed again at its first read after it, and so is every dep
that this computation needs and that is not resident there either (dropped since its newest
copy). At the relaxation's stages the plan then holds what the solution holds (less, where a
residency is fractional), and its extra cost is about the solution's; elsewhere it may peak over
the budget, which the annealer's descent takes it under. On deep graphs of identical blocks it
lands on the bound where the search alone stops points above it (the 100,000-node GPT at 0.5 of
its peak: 7.96 % against a bound of 7.95 %, where the composed start reached 10.8 %;
benchmarks/README.md).
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from remat.schedules import Graph

__all__ = ["retained_plan"]


def retained_plan(graph: Graph, dropped_value: np.ndarray, dropped_stage: np.ndarray) -> list[tuple[int, int]]:
    """The extra computations (node, stage) of the plan in which each value ``dropped_value[k]`` is not
    resident across stage ``dropped_stage[k]``, in stage order.

    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 2},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 2},
    ...     {"id": "d", "deps": ["a", "c"], "cost": 1, "memory": 1}]})
    >>> retained_plan(g, np.array([0]), np.array([2]))  # a not held across c: computed again for d
    [(0, 3)]
    """
    drops: dict[int, list[int]] = {}
    for v, t in sorted(zip(dropped_value.tolist(), dropped_stage.tolist(), strict=True)):
        drops.setdefault(v, []).append(t)
    newest: dict[int, int] = {}  # the stage of each recomputed value's newest copy
    extras: list[tuple[int, int]] = []
    for r in range(graph.size):
        todo = [r]
        while todo:
            for d in graph.deps[todo.pop()]:
                stages = drops.get(d)
                if stages is None:
                    continue
                i = bisect_right(stages, newest.get(d, d))
                if i < len(stages) and stages[i] <= r:  # dropped since its newest copy: computed again here
                    newest[d] = r
                    extras.append((d, r))
                    todo.append(d)
    return sorted(extras, key=lambda e: (e[1], e[0]))
