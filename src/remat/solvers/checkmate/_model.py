"""The Checkmate MILP (Jain et al., MLSys 2020, section 4) built as an engine-neutral model.

Variables, over the lower triangle only (stage t computes node t for the first time):

- ``R[t, i]``, binary, i < t: node i is recomputed in stage t (``R[t, t] = 1`` is a constant);
- ``S[t, i]``, binary, i < t: node i is resident at the start of stage t;
- ``Free[t, i, k]``, binary: i's output is freed right after its reader k runs in stage t;
- ``U[t, k]``, memory in use right after k runs in stage t (integral: memory is scaled to units).

A pair (t, i) gets R and S variables only when i or one of its descendants is needed from stage t
on (i < t <= the largest index reachable from i); every other entry is 0 in some optimal solution,
so leaving it out changes nothing but the model's size. For binaries, ``Free`` is exactly "k runs in
stage t, S does not keep i into stage t + 1, and no later reader of i runs in stage t" (paper,
section 4.4). It is written as a flow of residency (see ``_Builder.frees``) rather than with the
paper's aggregated cast-to-boolean rows: a value can be freed at most once and only while resident,
which no integer solution violates but which keeps the LP from freeing a value more often than it
holds it. On fcn8 at budget ratio 0.8 the root LP bound rises from 0.0004 % overhead (the paper's
aggregated rows) to 0.08 % (the optimum is 0.136 %). ``R[t, i] + S[t, i] <= 1`` (never recompute
a resident value) removes only wasteful solutions.

A model may cover only a *window* of stages, first to last (``stages``): what is resident at the
start of ``first`` is then left free (no persistence row ties it to the stage before) and nothing is
owed to the stages after ``last``. Every schedule's rows over those stages satisfy it, so the window
is a relaxation: its optimum is a lower bound on the cost, and if it has no solution, no schedule
fits the budget. Its solutions are not schedules.

Memory is counted in units of the greatest common divisor of the node sizes (exact), or, when that
leaves sizes above :data:`MAX_MEMORY_UNITS`, in a coarser unit with sizes rounded up and the budget
rounded down, so that whatever fits the model fits the real budget. Costs are divided by their mean
so that objective coefficients are of order one. Fixed memory is taken off the budget, not put in U.

References
----------
P. Jain et al., "Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization",
MLSys 2020, sections 4.2 to 4.6.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from typing import NamedTuple

import numpy as np

from remat.schedules import Graph, Plan, Schedule, Simulation, recompute_closure, simulate_schedule

from ..backends import MilpBuilder, MilpModel

__all__ = ["MAX_MEMORY_UNITS", "MODEL_NODES", "CheckmateModel", "MemoryScale", "Solution", "build_checkmate_model"]

MAX_MEMORY_UNITS = 2**30
"""Largest node size, in memory units, the model keeps exact; above it sizes are rounded up."""

MODEL_NODES = 700
"""Most nodes of a graph the whole model is built for (checkmate-lp, and checkmate's paths told to solve the full
MILP): it has a variable per pair of stage and node and a row per stage and edge (678-node gpt-12: 0.9 million
variables, 1.1 GB and 16 s to build its LP; rl500: 1.7 GB; 1,635-node lstm-48: 7.6 GB and 113 s; rl1000: over
8 GB). (docs/tuning.md)"""


@dataclass(frozen=True)
class MemoryScale:
    """Node sizes and the budget in whole memory units of ``unit`` bytes.

    ``exact`` is True when no size was rounded: the model then has exactly the real feasible set.
    """

    unit: int
    exact: bool
    sizes: np.ndarray
    capacity: int

    @classmethod
    def of(cls, graph: Graph, budget: int) -> MemoryScale:
        memory = graph.memory.astype(np.int64)
        positive = [int(m) for m in memory if m > 0]
        unit = reduce(math.gcd, positive) if positive else 1
        exact = not positive or max(positive) // unit <= MAX_MEMORY_UNITS
        if not exact:
            unit = -(-max(positive) // MAX_MEMORY_UNITS)
        sizes = -(-memory // unit)
        return cls(unit=unit, exact=exact, sizes=sizes, capacity=(budget - graph.fixed_memory) // unit)


class Solution(NamedTuple):
    """What a solution of a model describes, simulated: a schedule, or (a model with copies) a plan."""

    schedule: Schedule | None
    plan: Plan | None
    simulation: Simulation


@dataclass(frozen=True, eq=False)
class CheckmateModel:
    """The MILP of one graph and budget, with the maps between its variables and a schedule.

    ``R_var[t, i]`` and ``S_var[t, i]`` hold variable indices, -1 where the variable does not
    exist; ``free_vars`` rows are (t, i, k, var) and ``u_vars`` rows (t, k, var), in stage order.
    """

    graph: Graph
    budget: int
    milp: MilpModel
    memory: MemoryScale
    cost_scale: float
    R_var: np.ndarray
    S_var: np.ndarray
    free_vars: np.ndarray
    u_vars: np.ndarray

    def real_cost(self, objective: float) -> float:
        """A model objective (or bound) in the graph's cost units."""
        return objective * self.cost_scale

    def retention_values(self, watched: np.ndarray) -> np.ndarray:
        """The S matrix, as floats, from the values of the watched (S) variables (0 where S has no variable)."""
        n = self.graph.size
        values = np.zeros((n, n))
        exists = self.S_var >= 0
        assert self.milp.watch is not None
        first = int(self.milp.watch[0]) if self.milp.watch.size else 0
        values[exists] = watched[self.S_var[exists] - first]
        return values

    def schedule(self, watched: np.ndarray) -> Schedule:
        """The schedule of a solution: its S rounded (never truncated), R re-derived as the minimal closure of S."""
        S = np.round(self.retention_values(watched)) >= 1
        return Schedule(recompute_closure(self.graph, S), S)

    def evaluate(self, watched: np.ndarray) -> Solution:
        """The schedule of a solution, simulated."""
        schedule = self.schedule(watched)
        return Solution(schedule, None, simulate_schedule(self.graph, schedule))

    @property
    def proves(self) -> bool:
        """Whether the engine's bounds and infeasibility are proofs about schedules: when no size was rounded up."""
        return self.memory.exact

    def encode(self, schedule: Schedule) -> np.ndarray | None:
        """A complete feasible assignment (R, S, Free, U) for ``schedule``, or None if it does not fit.

        Retained values that nothing reads are dropped first (the plan frees them anyway), and R
        is the minimal closure of what is left, so the model's memory equals the simulated peak.
        """
        S = _without_spurious(self.graph, schedule.S & (self.S_var >= 0))
        R = recompute_closure(self.graph, S)
        off_diagonal = R & ~np.eye(self.graph.size, dtype=bool)
        if np.any(off_diagonal & (self.R_var < 0)):
            return None
        x = np.zeros(self.milp.n_vars)
        x[self.R_var[off_diagonal]] = 1.0
        x[self.S_var[S]] = 1.0
        users = self.graph.users
        for t, i, k, var in self.free_vars:
            kept = t + 1 < self.graph.size and S[t + 1, i]
            read_later = any(k < j <= t and R[t, j] for j in users[i])
            x[var] = float(R[t, k] and not kept and not read_later)
        _fill_memory(self, x, R, S)
        if self.milp.violation(x) > 1e-9:
            return None
        return x


def build_checkmate_model(graph: Graph, budget: int, stopped: Callable[[], bool] = lambda: False, *,
                          stages: range | None = None) -> CheckmateModel | None:
    """The Checkmate MILP for ``graph`` under ``budget`` bytes (fixed memory included), or its window ``stages``.

    The build of a large graph takes seconds; it checks ``stopped`` at every stage and returns None
    once it is true, so that a cancel does not wait for a model nobody will solve.

    Examples
    --------
    >>> from remat.schedules import Graph
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 4},
    ...     {"id": "c", "deps": ["b", "a"], "cost": 1, "memory": 4}]})
    >>> m = build_checkmate_model(g, 12)
    >>> m.memory.unit, m.memory.capacity, m.milp.n_vars > 0
    (4, 3, True)
    """
    return _Builder(graph, budget, range(graph.size) if stages is None else stages).build(stopped)


class _Builder:
    """Builds the model stage by stage; each method adds one family of rows."""

    def __init__(self, graph: Graph, budget: int, stages: range) -> None:
        self.graph, self.budget, self.stages = graph, budget, stages
        self.n = n = graph.size
        self.scale = MemoryScale.of(graph, budget)
        positive = graph.cost[graph.cost > 0]
        self.cost_scale = float(positive.mean()) if positive.size else 1.0
        reach = _reach(graph)
        self.stage_nodes = [[i for i in range(t) if reach[i] >= t] for t in range(n)]
        self.b = MilpBuilder()
        self.R_var = np.full((n, n), -1, dtype=np.int64)
        self.S_var = np.full((n, n), -1, dtype=np.int64)
        self.free_vars: list[tuple[int, int, int, int]] = []
        self.u_vars: list[tuple[int, int, int]] = []

    def build(self, stopped: Callable[[], bool]) -> CheckmateModel | None:
        watch = self.variables()
        for t in self.stages:
            if stopped():
                return None
            self.rows(t)
        n = self.n
        window = "" if len(self.stages) == n else f", stages {self.stages.start} to {self.stages.stop - 1}"
        milp = self.b.build(objective_offset=float(self.graph.cost.sum()) / self.cost_scale, watch=watch,
                            name=f"{self.title} {self.graph.name or 'graph'} @ {self.budget} B{window}")
        return self.model(milp)

    title = "checkmate"
    """How the model's name begins."""

    def variables(self) -> np.ndarray:
        """Add R and S (each stage's R costs its nodes' costs); return the variables every incumbent carries: S."""
        b, cost = self.b, self.graph.cost
        for t in self.stages:
            nodes = self.stage_nodes[t]
            self.R_var[t, nodes] = b.add_variables(len(nodes), lower=0, upper=1, integer=True,
                                                   cost=cost[nodes] / self.cost_scale)
        first_s = b.n_vars
        for t in self.stages:
            nodes = self.stage_nodes[t]
            self.S_var[t, nodes] = b.add_variables(len(nodes), lower=0, upper=1, integer=True)
        return np.arange(first_s, b.n_vars, dtype=np.int64)

    def rows(self, t: int) -> None:
        """Every row of stage t."""
        self.persistence(t)
        self.dependencies(t)
        frees_after = self.frees(t)
        self.memory(t, frees_after)

    def model(self, milp: MilpModel) -> CheckmateModel:
        return CheckmateModel(
            graph=self.graph, budget=self.budget, milp=milp, memory=self.scale, cost_scale=self.cost_scale,
            R_var=self.R_var, S_var=self.S_var,
            free_vars=np.array(self.free_vars, dtype=np.int64).reshape(-1, 4),
            u_vars=np.array(self.u_vars, dtype=np.int64).reshape(-1, 3),
        )

    def arriving(self, t: int, i: int) -> list[int]:
        """Variables that bring value i onto the device during stage t other than a compute (none here; a
        model with transfers has reloads): i is then resident from stage t + 1 on."""
        return []

    def leaving(self, t: int, i: int) -> list[int]:
        """Variables that hold value i through stage t and then take it off the device without a free
        (none here; a model with transfers has offloads)."""
        return []

    def runs(self, t: int, k: int) -> tuple[list[int], float]:
        """R[t, k] as (variables, constant): node t always runs in stage t."""
        return ([], 1.0) if k == t else ([int(self.R_var[t, k])], 0.0)

    def persistence(self, t: int) -> None:
        """``S[t, i] <= S[t-1, i] + R[t-1, i]`` (resident only if kept or computed the stage before) and
        ``R[t, i] + S[t, i] <= 1`` (recomputing a resident value never pays; this only removes waste).
        The first stage of a window has no stage before it in the model: what it holds is free.
        Values that :meth:`arriving` brings count as computed, and those that :meth:`leaving` takes are gone."""
        for i in self.stage_nodes[t]:
            s, r = int(self.S_var[t, i]), int(self.R_var[t, i])
            arriving = self.arriving(t, i)
            self.b.add_row([r, s, *arriving], [1.0] * (2 + len(arriving)), -math.inf, 1.0)
            if self.S_var[t - 1, i] >= 0:
                came, went = self.arriving(t - 1, i), self.leaving(t - 1, i)
                self.b.add_row([s, int(self.S_var[t - 1, i]), int(self.R_var[t - 1, i]), *came, *went],
                               [1.0, -1.0, -1.0, *([-1.0] * len(came)), *([1.0] * len(went))], -math.inf, 0.0)

    def dependencies(self, t: int) -> None:
        """R[t, k] <= R[t, i] + S[t, i] for every dep i of every k that can run in stage t."""
        for k in (*self.stage_nodes[t], t):
            kv, kc = self.runs(t, k)
            for i in self.graph.deps[k]:
                self.b.add_row([*kv, int(self.R_var[t, i]), int(self.S_var[t, i])], [*([1.0] * len(kv)), -1.0, -1.0],
                               -math.inf, -kc)

    def frees(self, t: int) -> dict[int, list[tuple[int, int]]]:
        """Free[t, i, k] for each value i and each reader k of i in stage t, as a flow of residency.

        With readers k_1 < ... < k_m of i in the stage, i can be freed after at most one of them, only
        while it is resident (or arriving), and not before a later reader runs or when S keeps it:
        ``sum_{q<p} Free[k_q] + R[k_p] <= S[t, i] + R[t, i]`` for every p, ``sum_q Free[k_q] + S[t+1, i] <=
        S[t, i] + R[t, i]``, ``Free[k] <= R[t, k]``, and ``Free[k] >= R[t, k] - S[t+1, i] - sum of R[t, j]
        over later readers j`` (a value nothing needs any more is freed); a value :meth:`leaving` takes counts as
        kept. For binaries this is exactly Checkmate's Free; as an LP it is tighter, because no value can be
        freed more than it is resident.
        Returns, per reader k, the (value, variable) pairs freed right after it.
        """
        b, graph = self.b, self.graph
        runs = {*self.stage_nodes[t], t}
        frees_after: dict[int, list[tuple[int, int]]] = {}
        for i in self.stage_nodes[t]:
            readers = [k for k in graph.users[i] if k in runs]
            if not readers or self.scale.sizes[i] == 0:
                continue
            if readers[-1] == t:
                readers = [t]
            resident = [int(self.R_var[t, i]), int(self.S_var[t, i]), *self.arriving(t, i)]
            keep = [int(self.S_var[t + 1, i])] if t + 1 < self.n and self.S_var[t + 1, i] >= 0 else []
            keep += self.leaving(t, i)
            freed: list[int] = []
            for p, k in enumerate(readers):
                kv, kc = self.runs(t, k)
                if p:
                    b.add_row([*freed, *kv, *resident], [*([1.0] * (len(freed) + len(kv))), *([-1.0] * len(resident))],
                              -math.inf, -kc)
                f = int(b.add_variables(1, lower=0, upper=1, integer=True)[0])
                self.free_vars.append((t, i, k, f))
                frees_after.setdefault(k, []).append((i, f))
                freed.append(f)
                if kv:
                    b.add_row([f, *kv], [1.0, -1.0], -math.inf, 0.0)
                hazards = [*keep, *[int(self.R_var[t, j]) for j in readers[p + 1:]]]
                b.add_row([f, *kv, *hazards], [1.0, *([-1.0] * len(kv)), *([1.0] * len(hazards))], kc, math.inf)
            b.add_row([*freed, *keep, *resident], [*([1.0] * (len(freed) + len(keep))), *([-1.0] * len(resident))],
                      -math.inf, 0.0)
        return frees_after

    def memory(self, t: int, frees_after: dict[int, list[tuple[int, int]]]) -> None:
        """U right after each node that can run in stage t: resident values (and those arriving during the stage),
        plus what runs, minus what is freed.

        The budget is U's upper bound; U is integral because sizes are whole memory units.
        """
        b, sizes = self.b, self.scale.sizes
        positions = [*self.stage_nodes[t], t]
        u = [int(v) for v in b.add_variables(len(positions), lower=0, upper=self.scale.capacity, integer=False)]
        for p, k in enumerate(positions):
            kv, kc = self.runs(t, k)
            if p == 0:
                carried = [(int(v), float(sizes[i])) for i in self.stage_nodes[t]
                           for v in (self.S_var[t, i], *self.arriving(t, i))]
            else:
                carried = [(u[p - 1], 1.0), *[(f, -float(sizes[i])) for i, f in frees_after.get(positions[p - 1], [])]]
            b.add_row([u[p], *[v for v, _ in carried], *kv],
                      [1.0, *[-c for _, c in carried], *([-float(sizes[k])] * len(kv))],
                      kc * sizes[k], kc * sizes[k])
            self.u_vars.append((t, k, u[p]))


def _reach(graph: Graph) -> np.ndarray:
    """For every node, the largest index among itself and its descendants."""
    reach = np.arange(graph.size)
    for v in range(graph.size - 1, -1, -1):
        for w in graph.users[v]:
            reach[v] = max(reach[v], reach[w])
    return reach


def _without_spurious(graph: Graph, S: np.ndarray) -> np.ndarray:
    """S without retained values that their stage neither reads nor keeps for the next one."""
    S = S.copy()
    n = graph.size
    while True:
        R = recompute_closure(graph, S)
        read = np.zeros_like(S)
        for t in range(n):
            for v in np.flatnonzero(R[t]):
                read[t, list(graph.deps[v])] = True
        kept_on = np.zeros_like(S)
        kept_on[:-1] = S[1:]
        spurious = S & ~read & ~kept_on
        if not spurious.any():
            return S
        S &= ~spurious


def _fill_memory(model: CheckmateModel, x: np.ndarray, R: np.ndarray, S: np.ndarray) -> None:
    """Set the U variables of ``x`` by running the memory recurrence over R, S and Free."""
    sizes = model.memory.sizes
    freed_at: dict[tuple[int, int], int] = {}
    for t, i, k, var in model.free_vars:
        if x[var] > 0.5:
            freed_at[(int(t), int(k))] = freed_at.get((int(t), int(k)), 0) + int(sizes[i])
    stage = -1
    used = 0
    previous_k = -1
    for t, k, var in model.u_vars:
        if t != stage:
            stage, used = t, int(sizes[S[t]].sum())
        else:
            used -= freed_at.get((int(t), previous_k), 0)
        used += int(sizes[k]) if R[t, k] else 0
        x[var] = used
        previous_k = int(k)
