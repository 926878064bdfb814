"""Checkmate schedules: the boolean matrices R (compute) and S (retain), and plans made from them.

Stage t exists to compute node t for the first time (the "frontier-advancing" form of the
Checkmate paper, section 4). ``R[t, i]``: node i is computed in stage t; ``S[t, i]``: node i is
resident at the start of stage t. Within a stage, nodes run in index order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._errors import InvalidSchedule
from ._graph import Graph
from ._plan import Op, Plan

__all__ = [
    "Schedule",
    "checkpoint_all_schedule",
    "plan_from_schedule",
    "recompute_closure",
]


@dataclass(frozen=True, eq=False)
class Schedule:
    """R and S, both ``(stages, nodes)`` boolean arrays, one stage per node."""

    R: np.ndarray
    S: np.ndarray

    def __post_init__(self) -> None:
        if self.R.shape != self.S.shape or self.R.ndim != 2 or self.R.shape[0] != self.R.shape[1]:
            raise InvalidSchedule(f"R and S must be square and of one shape, got {self.R.shape} and {self.S.shape}.")
        object.__setattr__(self, "R", np.ascontiguousarray(self.R, dtype=bool))
        object.__setattr__(self, "S", np.ascontiguousarray(self.S, dtype=bool))

    @property
    def stages(self) -> int:
        """How many stages (one per node of its graph)."""
        return int(self.R.shape[0])

    def to_json(self, graph: Graph) -> dict[str, Any]:
        """``{"stages": [{"compute": [ids], "retain": [ids]}, ...]}``."""
        ids = graph.ids
        return {
            "stages": [
                {"compute": [ids[i] for i in np.flatnonzero(r)], "retain": [ids[i] for i in np.flatnonzero(s)]}
                for r, s in zip(self.R, self.S, strict=True)
            ]
        }

    @classmethod
    def from_json(cls, graph: Graph, doc: Any) -> Schedule:
        """Read the JSON form; every stage lists node ids of ``graph``."""
        stages = doc.get("stages") if isinstance(doc, dict) else None
        if not isinstance(stages, list) or len(stages) != graph.size:
            raise InvalidSchedule(f"A schedule must have 'stages': a list of {graph.size} stages, one per node.")
        R = np.zeros((graph.size, graph.size), dtype=bool)
        S = np.zeros_like(R)
        for t, stage in enumerate(stages):
            for key, matrix in (("compute", R), ("retain", S)):
                names = stage.get(key, []) if isinstance(stage, dict) else None
                if not isinstance(names, list):
                    raise InvalidSchedule(f"Stage {t}: {key!r} must be a list of node ids.", stage=t)
                for name in names:
                    if not isinstance(name, str) or name not in graph.index:
                        raise InvalidSchedule(f"Stage {t}: {name!r} is not a node of the graph.", stage=t)
                    matrix[t, graph.index[name]] = True
        return cls(R, S)

    @property
    def compute_count(self) -> int:
        """How many computations R holds, recomputations included."""
        return int(self.R.sum())


def checkpoint_all_schedule(graph: Graph) -> Schedule:
    """Every node computed once, in its own stage, and kept until its last use."""
    n = graph.size
    R = np.eye(n, dtype=bool)
    S = np.zeros((n, n), dtype=bool)
    for v, last in enumerate(graph.last_use):
        S[v + 1:last + 1, v] = True
    return Schedule(R, S)


def recompute_closure(graph: Graph, S: np.ndarray) -> np.ndarray:
    """The cheapest R for a retention choice S: compute what each stage needs, nothing more.

    Stage t computes node t, every value that S keeps from stage t + 1 on but does not hold at
    the start of t, and, transitively, every dep of those that is not resident. Because deps
    come earlier, one descending sweep per stage closes the set (Checkmate's ``solve_r_opt``).
    """
    n = graph.size
    S = np.asarray(S, dtype=bool)
    if S.shape != (n, n):
        raise InvalidSchedule(f"S must have shape ({n}, {n}), got {S.shape}.")
    deps = graph.deps
    R = np.zeros((n, n), dtype=bool)
    appearing = np.zeros((n, n), dtype=bool)
    appearing[:-1] = S[1:] & ~S[:-1]
    for t in range(n):
        needed = R[t]
        held = S[t]
        todo = [-t] + [-int(i) for i in np.flatnonzero(appearing[t])]
        heapq.heapify(todo)
        while todo:
            v = -heapq.heappop(todo)
            if needed[v]:
                continue
            needed[v] = True
            for u in deps[v]:
                if not needed[u] and not held[u]:
                    heapq.heappush(todo, -u)
    return R


def plan_from_schedule(graph: Graph, schedule: Schedule) -> Plan:
    """Algorithm 1 of the Checkmate paper: the plan that runs (R, S), freeing values as early as it can.

    A value is freed at the start of a stage when the stage does not read it and S does not keep it
    into the next stage, and otherwise right after its last reader in the stage. A compute of a
    value that is already resident is redundant and dropped. Raises InvalidSchedule when a compute
    needs a value that is not resident or S keeps a value that does not exist.
    """
    n = graph.size
    if schedule.R.shape != (n, n):
        raise InvalidSchedule(f"The schedule has {schedule.stages} stages; the graph has {n} nodes.")
    ids = graph.ids
    deps = graph.deps
    R, S = schedule.R, schedule.S
    resident = np.zeros(n, dtype=bool)
    steps: list[tuple[Op, int]] = []
    no_retain = np.zeros(n, dtype=bool)
    for t in range(n):
        lost = np.flatnonzero(S[t] & ~resident)
        if lost.size:
            i = int(lost[0])
            raise InvalidSchedule(
                f"Stage {t}: S keeps {ids[i]!r}, which is not resident after stage {t - 1}.", stage=t, node=ids[i]
            )
        keep = S[t + 1] if t + 1 < n else no_retain
        computed = [int(v) for v in np.flatnonzero(R[t] & ~resident)]
        last_read: dict[int, int] = {}
        for pos, v in enumerate(computed):
            for u in deps[v]:
                last_read[u] = pos
        for w in map(int, np.flatnonzero(resident & ~keep)):
            if w not in last_read:
                steps.append(("free", w))
                resident[w] = False
        for pos, v in enumerate(computed):
            for u in deps[v]:
                if not resident[u]:
                    raise InvalidSchedule(
                        f"Stage {t}: computing {ids[v]!r} needs {ids[u]!r}, which is neither retained nor "
                        f"computed earlier in the stage.", stage=t, node=ids[v],
                    )
            steps.append(("compute", v))
            resident[v] = True
            for u in (*deps[v], v):
                if resident[u] and not keep[u] and last_read.get(u, -1) <= pos:
                    steps.append(("free", u))
                    resident[u] = False
    return Plan(tuple(steps))
