"""Checkmate schedules: the boolean matrices R (compute) and S (retain), and plans made from them.

Stage t exists to compute node t for the first time (the "frontier-advancing" form of the
Checkmate paper, section 4). ``R[t, i]``: node i is computed in stage t; ``S[t, i]``: node i is
resident at the start of stage t. Within a stage, nodes run in index order.

A schedule has two JSON forms. The compact one (``"encoding": "changes"``, what results carry) lists
each stage's computes and the changes to what is retained::

    {"encoding": "changes", "stages": [{"compute": [ids], "keep": [ids], "drop": [ids]}, ...]}

``keep`` names the values retained from this stage on that were not at the previous one, ``drop``
those retained at the previous stage that are not any more (both may be left out when empty); its
size grows with the plan. The full form (docs/plans.md) lists every stage's whole retained set,
``{"stages": [{"compute": [ids], "retain": [ids]}, ...]}``, stages x nodes entries at worst.
:class:`ScheduleEntries` reads and writes both without the dense matrices.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._errors import InvalidSchedule
from ._graph import Graph
from ._plan import Op, Plan
from ._sparse import Runs, _Held, closure_computes, merged_runs, peak_and_cost_of_entries, plan_of_entries, run_stage

__all__ = [
    "Schedule",
    "ScheduleEntries",
    "checkpoint_all_schedule",
    "plan_from_schedule",
    "plan_peak_and_cost",
    "recompute_closure",
]


class Schedule:
    """R and S, both ``(stages, nodes)`` boolean arrays, one stage per node.

    A schedule made by :meth:`of_entries` holds only its set entries (:class:`ScheduleEntries`) and makes
    R and S when something first reads them; its plan and JSON come from the entries, in time and memory
    proportional to them rather than to stages x nodes.
    """

    __slots__ = ("_entries", "_matrices")

    def __init__(self, R: np.ndarray, S: np.ndarray) -> None:
        R, S = np.asarray(R), np.asarray(S)
        if R.shape != S.shape or R.ndim != 2 or R.shape[0] != R.shape[1]:
            raise InvalidSchedule(f"R and S must be square and of one shape, got {R.shape} and {S.shape}.")
        self._matrices: tuple[np.ndarray, np.ndarray] | None = (
            np.ascontiguousarray(R, dtype=bool), np.ascontiguousarray(S, dtype=bool))
        self._entries: ScheduleEntries | None = None

    @classmethod
    def of_entries(cls, entries: ScheduleEntries) -> Schedule:
        """The schedule whose set entries are ``entries``, without making its matrices."""
        schedule = cls.__new__(cls)
        schedule._matrices, schedule._entries = None, entries
        return schedule

    def __getstate__(self) -> tuple[ScheduleEntries | None, tuple[np.ndarray, np.ndarray] | None]:
        return self._entries, self._matrices

    def __setstate__(self, state: tuple[ScheduleEntries | None, tuple[np.ndarray, np.ndarray] | None]) -> None:
        self._entries, self._matrices = state

    @property
    def R(self) -> np.ndarray:
        """``R[t, i]``: node i is computed in stage t."""
        return self._dense()[0]

    @property
    def S(self) -> np.ndarray:
        """``S[t, i]``: node i is resident at the start of stage t."""
        return self._dense()[1]

    @property
    def entries(self) -> ScheduleEntries:
        """The set entries of R and S."""
        if self._entries is None:
            self._entries = ScheduleEntries.of(self)
        return self._entries

    @property
    def has_entries(self) -> bool:
        """Whether the schedule's entries are at hand (it was made from them, or they were asked for):
        its plan then comes from them."""
        return self._entries is not None

    @property
    def stages(self) -> int:
        """How many stages (one per node of its graph)."""
        return self._entries.stages if self._entries is not None else int(self.R.shape[0])

    def to_json(self, graph: Graph, *, full: bool = False) -> dict[str, Any]:
        """The compact JSON form (see the module), or with ``full`` every stage's whole retained set."""
        return self.entries.to_json(graph, full=full)

    @classmethod
    def from_json(cls, graph: Graph, doc: Any) -> Schedule:
        """Read either JSON form; every stage lists node ids of ``graph``."""
        return cls.of_entries(ScheduleEntries.from_json(graph, doc))

    @property
    def compute_count(self) -> int:
        """How many computations R holds, recomputations included."""
        return len(self._entries.compute_node) if self._entries is not None else int(self.R.sum())

    def _dense(self) -> tuple[np.ndarray, np.ndarray]:
        if self._matrices is None:
            self._matrices = self.entries.matrices()
        return self._matrices


@dataclass(frozen=True, eq=False)
class ScheduleEntries:
    """A schedule as its set entries: R's (stage, node) pairs, and S as runs, node ``retain_node[k]``
    retained from stage ``retain_start[k]`` up to (not including) ``retain_end[k]``. Reading, writing
    and drawing it costs time and memory in proportion to its entries, not stages x nodes."""

    stages: int
    compute_stage: np.ndarray
    compute_node: np.ndarray
    retain_node: np.ndarray
    retain_start: np.ndarray
    retain_end: np.ndarray

    @property
    def runs(self) -> Runs:
        """S's runs: ``(retain_node, retain_start, retain_end)``."""
        return Runs(self.retain_node, self.retain_start, self.retain_end)

    @property
    def full_size(self) -> int:
        """Node ids in the full JSON form: every compute plus every retained (stage, node)."""
        return len(self.compute_node) + int((self.retain_end - self.retain_start).sum())

    @classmethod
    def retaining(cls, graph: Graph, node: np.ndarray, start: np.ndarray, end: np.ndarray) -> ScheduleEntries:
        """The schedule that retains ``node[k]`` over stages ``start[k] <= t < end[k]`` (runs may overlap,
        touch or be empty) and computes what :func:`recompute_closure` would for that S."""
        runs = merged_runs(node, start, end)
        return cls(graph.size, *closure_computes(graph, runs), *runs)

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleEntries:
        """The entries of a schedule's matrices."""
        stage, node = np.nonzero(schedule.R)
        starts: list[tuple[list[int], int]] = []
        ends: list[tuple[int, int]] = []
        before = np.zeros(schedule.stages, dtype=bool)
        for t, row in enumerate(schedule.S):
            changed = row ^ before
            starts.append((np.flatnonzero(changed & row).tolist(), t))
            ends += [(v, t) for v in np.flatnonzero(changed & before).tolist()]
            before = row
        return cls._of_runs(schedule.stages, stage, node, starts, ends)

    @classmethod
    def _of_runs(cls, stages: int, stage: np.ndarray, node: np.ndarray, starts: list[tuple[list[int], int]],
                 ends: list[tuple[int, int]]) -> ScheduleEntries:
        """From the runs' starts ((nodes, stage), in stage order) and ends ((node, stage), in stage order, each
        closing its node's oldest open run; a run left open lasts to the last stage)."""
        run_node = np.array([v for nodes, _ in starts for v in nodes], dtype=np.int64)
        run_start = np.array([t for nodes, t in starts for _ in nodes], dtype=np.int64)
        open_runs: dict[int, list[int]] = {}
        for k, v in enumerate(run_node.tolist()):
            open_runs.setdefault(v, []).append(k)
        run_end = np.full(len(run_node), stages, dtype=np.int64)
        for v, t in ends:
            run_end[open_runs[v].pop(0)] = t
        return cls(stages, np.asarray(stage, dtype=np.int64), np.asarray(node, dtype=np.int64), run_node,
                   run_start, run_end)

    def recomputations(self) -> tuple[np.ndarray, np.ndarray]:
        """(node, stage) of each compute in a stage other than the node's own of a value S does not hold
        there (``R & ~S`` off the diagonal), in time proportional to the entries."""
        other = self.compute_stage != self.compute_node
        node, stage = self.compute_node[other], self.compute_stage[other]
        fresh = ~_Held(self.runs, self.stages)(node, stage)
        return node[fresh], stage[fresh]

    def matrices(self) -> tuple[np.ndarray, np.ndarray]:
        """The R and S matrices (stages x nodes booleans)."""
        R = np.zeros((self.stages, self.stages), dtype=bool)
        R[self.compute_stage, self.compute_node] = True
        S = np.zeros_like(R)
        for v, a, b in zip(self.retain_node.tolist(), self.retain_start.tolist(), self.retain_end.tolist(),
                           strict=True):
            S[a:b, v] = True
        return R, S

    def to_json(self, graph: Graph, *, full: bool = False) -> dict[str, Any]:
        """The compact JSON form, or the full one (see the module)."""
        ids = graph.ids
        computes = _by_stage(self.stages, self.compute_stage, self.compute_node)
        kept = _by_stage(self.stages, self.retain_start, self.retain_node)
        dropped = _by_stage(self.stages + 1, self.retain_end, self.retain_node)  # the last: runs to the end
        if full:
            retained = np.zeros(self.stages, dtype=bool)
            stages = []
            for t in range(self.stages):
                retained[dropped[t]] = False
                retained[kept[t]] = True
                stages.append({"compute": [ids[i] for i in computes[t]],
                               "retain": [ids[i] for i in np.flatnonzero(retained)]})
            return {"stages": stages}
        stages = []
        for t in range(self.stages):
            stage: dict[str, list[str]] = {"compute": [ids[i] for i in computes[t]]}
            if len(kept[t]):
                stage["keep"] = [ids[i] for i in kept[t]]
            if len(dropped[t]):
                stage["drop"] = [ids[i] for i in dropped[t]]
            stages.append(stage)
        return {"encoding": "changes", "stages": stages}

    @classmethod
    def from_json(cls, graph: Graph, doc: Any) -> ScheduleEntries:
        """Read either JSON form of a schedule of ``graph``; InvalidSchedule names the stage of what is wrong."""
        stages = doc.get("stages") if isinstance(doc, dict) else None
        if not isinstance(stages, list) or len(stages) != graph.size:
            raise InvalidSchedule(f"A schedule must have 'stages': a list of {graph.size} stages, one per node.")
        encoding = doc.get("encoding", "full")
        if encoding not in ("full", "changes"):
            raise InvalidSchedule(f"A schedule's 'encoding' is 'changes', or left out for the full form; "
                                  f"got {encoding!r}.")
        compute_stage: list[int] = []
        compute_node: list[int] = []
        starts: list[tuple[list[int], int]] = []
        ends: list[tuple[int, int]] = []
        retained: set[int] = set()
        for t, stage in enumerate(stages):
            nodes = _node_list(graph, stage, "compute", t)
            compute_node += nodes
            compute_stage += [t] * len(nodes)
            if encoding == "full":
                now = set(_node_list(graph, stage, "retain", t))
                kept, dropped = sorted(now - retained), sorted(retained - now)
            else:
                kept, dropped = _node_list(graph, stage, "keep", t), _node_list(graph, stage, "drop", t)
                _check_changes(graph, t, retained, kept, dropped)
            ends += [(v, t) for v in dropped]
            retained.difference_update(dropped)
            retained.update(kept)
            starts.append((kept, t))
        return cls._of_runs(graph.size, np.array(compute_stage), np.array(compute_node), starts, ends)


def _node_list(graph: Graph, stage: Any, key: str, t: int) -> list[int]:
    """The node indices a stage lists under ``key`` (once each, in order); [] when it leaves the key out."""
    names = stage.get(key, []) if isinstance(stage, dict) else None
    if not isinstance(names, list):
        raise InvalidSchedule(f"Stage {t}: {key!r} must be a list of node ids.", stage=t)
    for name in names:
        if not isinstance(name, str) or name not in graph.index:
            raise InvalidSchedule(f"Stage {t}: {name!r} is not a node of the graph.", stage=t)
    return list(dict.fromkeys(graph.index[name] for name in names))


def _check_changes(graph: Graph, t: int, retained: set[int], kept: list[int], dropped: list[int]) -> None:
    for v in kept:
        if v in retained:
            raise InvalidSchedule(f"Stage {t}: 'keep' names {graph.ids[v]!r}, which is already retained.", stage=t)
    for v in dropped:
        if v not in retained:
            raise InvalidSchedule(f"Stage {t}: 'drop' names {graph.ids[v]!r}, which is not retained.", stage=t)


def _by_stage(stages: int, stage: np.ndarray, node: np.ndarray) -> list[np.ndarray]:
    """``node`` split by ``stage`` into one array per stage (nodes ascending within a stage)."""
    order = np.lexsort((node, stage))
    return np.split(node[order], np.searchsorted(stage[order], np.arange(1, stages)))


def checkpoint_all_schedule(graph: Graph) -> Schedule:
    """Every node computed once, in its own stage, and kept until its last use."""
    nodes = np.arange(graph.size, dtype=np.int64)
    last_use = np.asarray(graph.last_use, dtype=np.int64)
    kept = last_use > nodes
    runs = Runs(nodes[kept], nodes[kept] + 1, last_use[kept] + 1)
    return Schedule.of_entries(ScheduleEntries(graph.size, nodes, nodes.copy(), *runs))


def recompute_closure(graph: Graph, S: np.ndarray, *, reloads: np.ndarray | None = None) -> np.ndarray:
    """The cheapest R for a retention choice S: compute what each stage needs, nothing more.

    Stage t computes node t, every value that S keeps from stage t + 1 on but does not hold at
    the start of t, and, transitively, every dep of those that is not resident. Because deps
    come earlier, one descending sweep per stage closes the set (Checkmate's ``solve_r_opt``).
    A value that ``reloads[t]`` copies back from host memory during stage t arrives for stage t + 1
    without being computed.
    """
    n = graph.size
    S = np.asarray(S, dtype=bool)
    if S.shape != (n, n):
        raise InvalidSchedule(f"S must have shape ({n}, {n}), got {S.shape}.")
    deps = graph.deps
    R = np.zeros((n, n), dtype=bool)
    appearing = np.zeros((n, n), dtype=bool)
    appearing[:-1] = S[1:] & ~S[:-1]
    if reloads is not None:
        appearing &= ~reloads
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


def plan_from_schedule(graph: Graph, schedule: Schedule, *, offloads: np.ndarray | None = None,
                       reloads: np.ndarray | None = None, waits: bool = False) -> Plan:
    """Algorithm 1 of the Checkmate paper: the plan that runs (R, S), freeing values as early as it can.

    A value is freed at the start of a stage when the stage does not read it and S does not keep it
    into the next stage, and otherwise right after its last reader in the stage. A compute of a
    value that is already resident is redundant and dropped. Raises InvalidSchedule when a compute
    needs a value that is not resident or S keeps a value that does not exist. A schedule that has its
    entries (and no copies) is read from them, in time proportional to the plan rather than to stages x nodes.

    ``offloads`` and ``reloads`` (boolean arrays shaped like R) add copies to host memory and back:
    where ``offloads[t, i]`` the plan offloads i in stage t instead of freeing it (so S must not keep i
    into stage t + 1); ``reloads[t, i]`` reloads i at the start of stage t, before its computes, for
    stage t + 1 on (a prefetch: the copy overlaps the stage's computes). With ``waits``, stage t + 1 begins by
    waiting for the offloads of stage t, so that their values have left the device before it allocates.
    """
    n = graph.size
    if schedule.stages != n:
        raise InvalidSchedule(f"The schedule has {schedule.stages} stages; the graph has {n} nodes.")
    if schedule.has_entries and offloads is None and reloads is None:
        entries = schedule.entries
        return plan_of_entries(graph, entries.compute_stage, entries.compute_node, entries.runs)
    ids = graph.ids
    R, S = schedule.R, schedule.S
    offloads = np.zeros((n, n), dtype=bool) if offloads is None else offloads
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
        kept_offloads = np.flatnonzero(offloads[t] & keep)
        if kept_offloads.size:
            i = int(kept_offloads[0])
            raise InvalidSchedule(f"Stage {t}: {ids[i]!r} is offloaded, but S keeps it into stage {t + 1}.",
                                  stage=t, node=ids[i])
        if waits and t:
            steps.extend(("wait", int(v)) for v in np.flatnonzero(offloads[t - 1]))
        if reloads is not None:
            for v in map(int, np.flatnonzero(reloads[t])):
                steps.append(("reload", v))
                resident[v] = True
        leaving = [int(w) for w in np.flatnonzero(resident & ~keep)]

        def release(w: int, offloaded: np.ndarray = offloads[t]) -> None:
            steps.append(("offload" if offloaded[w] else "free", w))

        run_stage(graph, t, [int(v) for v in np.flatnonzero(R[t] & ~resident)], leaving, keep, resident, steps, release)
    return Plan(tuple(steps))


def plan_peak_and_cost(graph: Graph, schedule: Schedule) -> tuple[int, float]:
    """The peak memory and cost that :func:`simulate` gives the plan of ``schedule``, without making the plan.

    For searches that judge many schedules of their own making (valid by construction, as those of
    :meth:`ScheduleEntries.retaining` are) and keep one: the one kept is made into a plan and simulated.
    Time and memory in proportion to the schedule's entries.
    """
    entries = schedule.entries
    return peak_and_cost_of_entries(graph, entries.compute_stage, entries.compute_node, entries.runs)
