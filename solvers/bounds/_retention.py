"""A lower bound on cost for the fixed-order problem, from a relaxation small enough for 1,000 nodes.

Look at the moment right after node t is first computed (the end of stage t). Its deps and t
are resident then. Every other value v made before t and read after t (``t < last_use(v)``) is
either resident too, or it is not, and then v must be computed again before its next read. So:

- memory: for every stage t, ``fixed + m_t + sum of m over deps(t) + sum of m_v x[v, t] <= budget``,
  where ``x[v, t] = 1`` when v is resident at that moment;
- cost: each maximal run of stages where v is not resident ends with a computation of v in a
  stage of its own, so cost >= base cost + sum over v of ``c_v * (number of such runs)``.

Minimizing that cost subject to those rows is a relaxation (it ignores the memory a recomputation
needs and everything kept past its last read), so its optimum, and the LP optimum below it, are
lower bounds on the cost of every schedule that fits. It has one variable pair per (value, stage
it lives across): about 190,000 on a 1,000-node random graph, where the Checkmate MILP has
millions. It is tight on layer graphs (ResNet-50) and loose where recomputing needs long chains
(random layered graphs). It is solved by the HiGHS backend in process (the engine-neutral model of
:mod:`remat.solvers.backends`), so it runs in a process without OR-Tools.

Two reductions keep it small. A stage where everything that may be resident fits has a row that
cannot bind: it is left out, and so are its pairs (v is then free to stay, so a run of v's absence
spans only stages with rows, and it is forced to end where v is read in between); the optimum is
unchanged. Keeping only the rows of the ``stages`` most overloaded stages relaxes further: the
bound is weaker or equal, found much faster (on a 1,635-node LSTM at 0.6 of its peak, the 64 most
overloaded stages give the whole LP's value in 1 s, where the whole LP takes over a minute).
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from remat.schedules import Graph

from .._context import DEFAULT_MIP_GAP
from ..backends import Limits, MilpModel, get_backend

__all__ = ["overloaded_stages", "retention_bound"]

_SAFETY = 1e-6
"""Relative margin taken off an engine's optimum or dual bound before it is reported as proved."""


def retention_bound(graph: Graph, budget: int, *, time_limit_s: float, integral: bool = False,
                    stages: int | None = None, max_columns: int | None = None) -> float | None:
    """A proved lower bound on the cost of any schedule within ``budget``; None if none was proved in time.

    ``integral`` solves the relaxation as a MIP and returns its dual bound (tighter, slower);
    otherwise the LP optimum is returned, and only when the LP was solved to optimality.
    ``stages`` keeps the memory rows of only that many stages, the most overloaded ones.
    A relaxation with more than ``max_columns`` variables is not solved (None).

    Examples
    --------
    Not run as doctests: running HiGHS here would keep OR-Tools out of the test process
    (tests/solvers/test_portfolio.py checks the bounds in a helper process instead).

    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 2},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 2},
    ...     {"id": "d", "deps": ["a", "c"], "cost": 1, "memory": 1}]})
    >>> round(retention_bound(g, 7, time_limit_s=10), 3)  # doctest: +SKIP
    4.25
    >>> round(retention_bound(g, 7, time_limit_s=10, integral=True), 3)  # doctest: +SKIP
    5.0

    The LP drops a quarter of a across stage c; the MIP must drop all of it, one more computation.
    """
    model = _Relaxation(graph, budget, stages)
    if model.columns == 0:
        return graph.base_cost
    if max_columns is not None and model.columns > max_columns:
        return None
    limits = Limits(time_limit_s=max(float(time_limit_s), 0.01), mip_gap=DEFAULT_MIP_GAP, threads=1)
    result = get_backend("highs").solve(model.milp(integral=integral), limits, lambda _: None)
    if result.bound is None or not np.isfinite(result.bound):
        return None  # the LP not solved to optimality, or no MIP dual bound
    return graph.base_cost + max(0.0, result.bound * model.cost_unit * (1 - _SAFETY))


def overloaded_stages(graph: Graph, budget: int) -> int:
    """How many stages have a memory row that can bind: more ``stages`` than that change nothing."""
    return int((_overload(graph, budget, _lives(graph)) > 0).sum())


class _Relaxation:
    """The relaxation's matrix (row-wise), with costs in units of their mean and memory in units of the largest size.

    Columns come in pairs per (value v, stage t it lives across): ``x`` (resident at the end of
    stage t) and ``y`` (v is computed again in stage t + 1 after being dropped at t). Rows: one
    memory row per stage, then one row per pair, ``y - x[t + 1] + x[t] >= 0`` (or
    ``y + x[t] >= 1`` when stage t + 1 reads v). Values of size 0 or cost 0 need no variables.
    Only the stages whose row can bind (at most ``stages`` of them, the most overloaded) get pairs;
    then the pair after (v, t) is v's next pair, and the row is forced when v is read before it.
    """

    def __init__(self, graph: Graph, budget: int, stages: int | None = None) -> None:
        n = graph.size
        mem = graph.memory.astype(np.float64)
        cost = graph.cost
        scale = max(float(mem.max()), 1.0)
        positive = cost[cost > 0]
        self.cost_unit = float(positive.mean()) if positive.size else 1.0
        room = _room(graph, budget)
        lives = _lives(graph)
        overload = _overload(graph, budget, lives)
        rowed = overload > 0
        if stages is not None and stages < int(rowed.sum()):
            rowed[:] = False
            rowed[np.argsort(-overload, kind="stable")[:stages]] = True
        owners: list[int] = []
        at: list[int] = []
        forced_next: list[bool] = []
        for v, users in lives:
            reads = set(users)
            kept = [t for t in range(v + 1, users[-1]) if rowed[t] and t not in reads]
            for i, t in enumerate(kept):
                owners.append(v)
                at.append(t)
                following = kept[i + 1] if i + 1 < len(kept) else users[-1]
                forced_next.append(users[bisect_right(users, t)] <= following)
        pairs = len(owners)
        self.columns = 2 * pairs
        self.rows = n + pairs
        owner = np.asarray(owners, dtype=np.int64)
        stage = np.asarray(at, dtype=np.int64)
        forced = np.asarray(forced_next, dtype=bool)
        self.objective = np.concatenate([np.zeros(pairs), cost[owner] / self.cost_unit])
        pair_rows = n + np.arange(pairs)
        self.row_lower = np.concatenate([np.full(n, -np.inf), np.where(forced, 1.0, 0.0)])
        self.row_upper = np.concatenate([room / scale, np.full(pairs, np.inf)])
        x = np.arange(pairs)
        y = pairs + x
        # Unless forced, the pair after (v, t) is v's next pair, listed right after it.
        follower = np.flatnonzero(~forced)
        rows = np.concatenate([stage, pair_rows, pair_rows, pair_rows[follower]])
        cols = np.concatenate([x, x, y, x[follower] + 1])
        vals = np.concatenate([mem[owner] / scale, np.ones(pairs), np.ones(pairs), -np.ones(follower.size)])
        order = np.lexsort((cols, rows))
        self.row_index = cols[order]
        self.row_value = vals[order]
        self.row_start = np.searchsorted(rows[order], np.arange(self.rows + 1))

    def milp(self, *, integral: bool) -> MilpModel:
        """The relaxation as the backends' model: every variable in [0, 1], integer if ``integral``."""
        return MilpModel(
            objective=self.objective, objective_offset=0.0, lower=np.zeros(self.columns),
            upper=np.ones(self.columns), integer=np.full(self.columns, integral), row_start=self.row_start,
            row_index=self.row_index, row_value=self.row_value, row_lower=self.row_lower,
            row_upper=self.row_upper, relaxation=not integral, name="retention relaxation",
        )


def _lives(graph: Graph) -> list[tuple[int, tuple[int, ...]]]:
    """The values that get variables, with their readers: read at all, of some size and some cost."""
    return [(v, users) for v, users in enumerate(graph.users) if users and graph.memory[v] > 0 and graph.cost[v] > 0]


def _overload(graph: Graph, budget: int, lives: list[tuple[int, tuple[int, ...]]]) -> np.ndarray:
    """Per stage t, how far the values that have a pair there (made before t, read after t, not read at
    t) exceed the room left beside t's own footprint: the row of t can bind only where this is positive."""
    memory = graph.memory
    diff = np.zeros(graph.size + 1, dtype=np.int64)
    for v, users in lives:
        diff[v + 1] += memory[v]
        diff[users[-1]] -= memory[v]
        for u in users[:-1]:
            diff[u] -= memory[v]
            diff[u + 1] += memory[v]
    return np.cumsum(diff)[:-1] - _room(graph, budget)


def _room(graph: Graph, budget: int) -> np.ndarray:
    """Per stage t, the memory left for values held across t beside fixed memory and t's own footprint."""
    return budget - graph.fixed_memory - graph.compute_footprint
