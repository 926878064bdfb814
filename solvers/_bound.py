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
(random layered graphs). Needs highspy, so it runs in a process without OR-Tools.
"""

from __future__ import annotations

import numpy as np

from remat.schedules import Graph

__all__ = ["retention_bound"]

_SAFETY = 1e-6
"""Relative margin taken off an engine's optimum or dual bound before it is reported as proved."""


def retention_bound(graph: Graph, budget: int, *, time_limit_s: float, integral: bool = False) -> float | None:
    """A proved lower bound on the cost of any schedule within ``budget``; None if none was proved in time.

    ``integral`` solves the relaxation as a MIP and returns its dual bound (tighter, slower);
    otherwise the LP optimum is returned, and only when the LP was solved to optimality.

    Examples
    --------
    Not run as doctests: importing highspy here would keep OR-Tools out of the test process
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
    import highspy

    model = _Relaxation(graph, budget)
    if model.columns == 0:
        return graph.base_cost
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", max(float(time_limit_s), 0.01))
    h.setOptionValue("threads", 1)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = model.columns, model.rows
    lp.col_cost_ = model.objective
    lp.col_lower_ = np.zeros(model.columns)
    lp.col_upper_ = np.ones(model.columns)
    lp.row_lower_ = model.row_lower
    lp.row_upper_ = model.row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = model.start
    lp.a_matrix_.index_ = model.index
    lp.a_matrix_.value_ = model.value
    if integral:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * model.columns
    h.passModel(lp)
    h.run()
    info = h.getInfo()
    if integral:
        value = info.mip_dual_bound
    elif h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
        value = info.objective_function_value
    else:
        return None
    if not np.isfinite(value):
        return None
    return graph.base_cost + max(0.0, value * model.cost_unit * (1 - _SAFETY))


class _Relaxation:
    """The relaxation's matrix (column-wise), with costs in units of their mean and memory in units of the largest size.

    Columns come in pairs per (value v, stage t it lives across): ``x`` (resident at the end of
    stage t) and ``y`` (v is computed again in stage t + 1 after being dropped at t). Rows: one
    memory row per stage, then one row per pair, ``y - x[t + 1] + x[t] >= 0`` (or
    ``y + x[t] >= 1`` when stage t + 1 reads v). Values of size 0 or cost 0 need no variables.
    """

    def __init__(self, graph: Graph, budget: int) -> None:
        n = graph.size
        mem = graph.memory.astype(np.float64)
        cost = graph.cost
        scale = max(float(mem.max()), 1.0)
        positive = cost[cost > 0]
        self.cost_unit = float(positive.mean()) if positive.size else 1.0
        owners: list[int] = []
        stages: list[int] = []
        forced_next: list[bool] = []
        for v, users in enumerate(graph.users):
            if mem[v] == 0 or cost[v] == 0 or not users:
                continue
            reads = set(users)
            for t in range(v + 1, users[-1]):
                if t not in reads:
                    owners.append(v)
                    stages.append(t)
                    forced_next.append(t + 1 in reads)
        pairs = len(owners)
        self.columns = 2 * pairs
        self.rows = n + pairs
        owner = np.asarray(owners, dtype=np.int64)
        stage = np.asarray(stages, dtype=np.int64)
        forced = np.asarray(forced_next, dtype=bool)
        self.objective = np.concatenate([np.zeros(pairs), cost[owner] / self.cost_unit])
        capacity = (budget - graph.fixed_memory - graph.compute_footprint) / scale
        pair_rows = n + np.arange(pairs)
        self.row_lower = np.concatenate([np.full(n, -np.inf), np.where(forced, 1.0, 0.0)])
        self.row_upper = np.concatenate([capacity, np.full(pairs, np.inf)])
        x = np.arange(pairs)
        y = pairs + x
        # x[v, t + 1] is the pair after (v, t) when stage t + 1 does not read v.
        follower = np.flatnonzero(~forced)
        rows = np.concatenate([stage, pair_rows, pair_rows, pair_rows[follower]])
        cols = np.concatenate([x, x, y, x[follower] + 1])
        vals = np.concatenate([mem[owner] / scale, np.ones(pairs), np.ones(pairs), -np.ones(follower.size)])
        order = np.lexsort((rows, cols))
        self.index = rows[order].astype(np.int32)
        self.value = vals[order]
        self.start = np.searchsorted(cols[order], np.arange(self.columns + 1)).astype(np.int32)
