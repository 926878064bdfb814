"""A lower bound on cost for the fixed-order problem, from a relaxation small enough for 1,000 nodes.

Look at the moment right after node t is first computed (the end of stage t). Its deps and t
are resident then. Every other value v made before t and needed after t is either resident too,
or it is not, and then v must be computed again before it is needed. v is needed until its
*horizon*: its last read, or later while one of its readers may be computed again (that reader's
horizon). So:

- memory: for every stage t, ``fixed + m_t + sum of m over deps(t) + sum of m_v x[v, t] <= budget``,
  where ``x[v, t] = 1`` when v is resident at that moment;
- cost: each maximal run of stages where v is not resident ends with a computation of v,
  so cost >= base cost + sum over v of ``c_v * (number of such runs)``;
- dependencies: computing v again needs each dep u of v then: resident at the end of u's last
  stage with a variable before, or computed again since. Without these rows, dropping a softmax
  whose scores were not kept cost only the softmax (the 12-block GPT at 0.5: 8.6 %, plans 14 %);
  with them it costs the chain back to a value that is kept (13.4 %).

Minimizing that cost subject to those rows is a relaxation (it ignores the memory a recomputation
needs beyond the values it reads), so its optimum, and the LP optimum below it, are lower bounds on
the cost of every schedule that fits. It has one variable pair per (value, stage it may be needed
across), where the Checkmate MILP has millions. It is solved by the HiGHS backend in process (the
engine-neutral model of :mod:`remat.solvers.backends`), so it runs in a process without OR-Tools.

Only stages whose row can bind get rows and pairs, and of those only the ``stages`` most overloaded
when asked: a pair then stands for v's state until its next pair, and a recomputation anywhere in
that span needs the dep once. Each choice of stages gives a valid bound; fewer stages give a smaller
model and often a higher LP value, because the dependency rows bind harder over longer spans (the
GPT above: 13.4 % from 16 stages, 8.6 % from all 411), and more stages can give more (random
layered graphs), so callers try several.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from remat.schedules import Graph

from .._context import DEFAULT_MIP_GAP
from ..backends import Limits, MilpModel, get_backend

__all__ = ["Retention", "overloaded_stages", "retention_bound", "retention_solution"]

_SAFETY = 1e-6
"""Relative margin taken off an engine's optimum or dual bound before it is reported as proved. (docs/tuning.md)"""

_KEPT = 1e-6
"""How close to 1 a residency of the solution must be to count as kept. (docs/tuning.md)"""


class Retention(NamedTuple):
    """A solved relaxation: its proved lower bound on cost, and the (value, stage) pairs its solution does
    not keep resident (a fractional residency counts as not kept), which describe a plan
    (:func:`remat.solvers.search.retained_plan`)."""

    bound: float
    dropped_value: np.ndarray
    dropped_stage: np.ndarray


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
    (tests/solvers/test_anneal_path.py checks the bounds in a helper process instead).

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
    solved = retention_solution(graph, budget, time_limit_s=time_limit_s, integral=integral, stages=stages,
                                max_columns=max_columns)
    return None if solved is None else solved.bound


def retention_solution(graph: Graph, budget: int, *, time_limit_s: float, integral: bool = False,
                       stages: int | None = None, max_columns: int | None = None) -> Retention | None:
    """:func:`retention_bound` with what the relaxation's solution keeps resident; None when it proves no bound.

    A MIP stopped before its proof gives its dual bound and its incumbent's residency.
    """
    pairs = _Pairs.of(graph, budget, stages)
    if pairs.owner.size == 0:
        return Retention(graph.base_cost, pairs.owner, pairs.stage)
    if max_columns is not None and 2 * pairs.owner.size > max_columns:
        return None
    model = _Relaxation(graph, budget, pairs)
    limits = Limits(time_limit_s=max(float(time_limit_s), 0.01), mip_gap=DEFAULT_MIP_GAP, threads=1)
    result = get_backend("highs").solve(model.milp(integral=integral), limits, lambda _: None)
    if result.bound is None or not np.isfinite(result.bound) or result.x is None:
        return None  # the LP not solved to optimality, or no MIP dual bound
    bound = graph.base_cost + max(0.0, result.bound * model.cost_unit * (1 - _SAFETY))
    dropped = result.x[:pairs.owner.size] < 1 - _KEPT
    return Retention(bound, pairs.owner[dropped], pairs.stage[dropped])


def overloaded_stages(graph: Graph, budget: int) -> int:
    """How many stages have a memory row that can bind: more ``stages`` than that change nothing."""
    return int((_overload(graph, budget, _lives(graph)) > 0).sum())


class _Relaxation:
    """The relaxation's matrix (row-wise), with costs in units of their mean and memory in units of the largest size.

    Columns come in pairs per (value v, stage t it may be needed across): ``x`` (resident at the end of
    stage t) and ``y`` (v is computed again after t, by its next pair's stage). Rows: one memory row
    per stage; per pair, ``y - x[t + 1] + x[t] >= 0`` (or ``y + x[t] >= 1`` when v is read before
    its next pair); per pair and dep u of v, ``x[u, t_u] + y[u, p...] - y >= 0``: computing v again
    needs u then, resident since u's last pair t_u <= t or computed again since (the y of u's pairs
    from t_u until v's next pair). Values of size 0 need no variables (they may as well stay).
    Only the stages whose row can bind (at most ``stages`` of them, the most overloaded) get pairs.
    """

    def __init__(self, graph: Graph, budget: int, pairs: _Pairs) -> None:
        n = graph.size
        mem = graph.memory.astype(np.float64)
        cost = graph.cost
        scale = max(float(mem.max()), 1.0)
        positive = cost[cost > 0]
        self.cost_unit = float(positive.mean()) if positive.size else 1.0
        count = pairs.owner.size
        pair, since, term_row, term_pair = _dependency_rows(graph, pairs)
        needs = pair.size
        self.columns = 2 * count
        self.rows = n + count + needs
        self.objective = np.concatenate([np.zeros(count), cost[pairs.owner] / self.cost_unit])
        pair_rows = n + np.arange(count)
        self.row_lower = np.concatenate([np.full(n, -np.inf), np.where(pairs.forced, 1.0, 0.0), np.zeros(needs)])
        self.row_upper = np.concatenate([_room(graph, budget) / scale, np.full(count + needs, np.inf)])
        x = np.arange(count)
        y = count + x
        # Unless forced, or the last of v's, the pair after (v, t) is v's next pair, listed right after it.
        follower = np.flatnonzero(~pairs.forced & ~pairs.last)
        need_rows = n + count + np.arange(needs)
        rows = np.concatenate([pairs.stage, pair_rows, pair_rows, pair_rows[follower], need_rows, need_rows,
                               need_rows[term_row]])
        cols = np.concatenate([x, x, y, x[follower] + 1, count + pair, since, count + term_pair])
        vals = np.concatenate([mem[pairs.owner] / scale, np.ones(2 * count), -np.ones(follower.size),
                               -np.ones(needs), np.ones(needs + term_pair.size)])
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


class _Pairs(NamedTuple):
    """The (value, stage) pairs of the relaxation, grouped by value in stage order: ``until`` is the
    stage of the value's next pair (or its horizon), ``forced`` says the value is read by then,
    ``last`` marks a value's last pair; ``first`` gives the index of each value's first pair, -1 if none."""

    owner: np.ndarray
    stage: np.ndarray
    until: np.ndarray
    forced: np.ndarray
    last: np.ndarray
    first: np.ndarray

    @classmethod
    def of(cls, graph: Graph, budget: int, stages: int | None) -> _Pairs:
        """Pairs at the stages whose row can bind (at most ``stages`` of them, the most overloaded), for each
        value it may be needed across and is not read at."""
        lives = _lives(graph)
        overload = _overload(graph, budget, lives)
        rowed = overload > 0
        if stages is not None and stages < int(rowed.sum()):
            rowed[:] = False
            rowed[np.argsort(-overload, kind="stable")[:stages]] = True
        rowed_stages = np.flatnonzero(rowed)
        horizon = _horizons(graph, lives)
        first = np.full(graph.size, -1, dtype=np.int64)
        parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        total = 0
        for v, users in lives:
            span = rowed_stages[np.searchsorted(rowed_stages, v, side="right"):
                                np.searchsorted(rowed_stages, horizon[v])]
            reads = np.asarray(users, dtype=np.int64)
            at = np.minimum(np.searchsorted(reads, span), reads.size - 1)
            kept = span[reads[at] != span]  # the stages not among v's (sorted) reads
            if kept.size == 0:
                continue
            until = np.append(kept[1:], horizon[v])
            nxt = np.searchsorted(reads, kept, side="right")
            forced = (nxt < reads.size) & (reads[np.minimum(nxt, reads.size - 1)] <= until)
            first[v] = total
            total += kept.size
            parts.append((v, kept, until, forced))
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty, empty.astype(bool), empty.astype(bool), first)
        sizes = [kept.size for _, kept, _, _ in parts]
        last = np.zeros(total, dtype=bool)
        last[np.cumsum(sizes) - 1] = True
        return cls(np.repeat([v for v, *_ in parts], sizes).astype(np.int64),
                   np.concatenate([kept for _, kept, _, _ in parts]),
                   np.concatenate([until for *_, until, _ in parts]),
                   np.concatenate([forced for *_, forced in parts]), last, first)


def _dependency_rows(graph: Graph, pairs: _Pairs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One row per (pair of v at t, dep u of v with a pair at or before t): the pair, u's last pair t_u <= t
    (its x term), and per y term the row and u's pair it stands for: u's pairs from t_u until v's next pair."""
    first, counts = pairs.first, np.bincount(pairs.owner, minlength=graph.size)
    pair_parts, since_parts, end_parts = [], [], []
    for v in np.flatnonzero(first >= 0).tolist():
        own = slice(first[v], first[v] + counts[v])
        t, until = pairs.stage[own], pairs.until[own]
        for u in graph.deps[v]:
            if first[u] < 0:
                continue  # of size 0, or never held across a rowed stage: resident as far as this relaxation knows
            theirs = pairs.stage[first[u]:first[u] + counts[u]]
            last = np.searchsorted(theirs, t, side="right") - 1
            ok = last >= 0
            pair_parts.append(np.arange(own.start, own.stop)[ok])
            since_parts.append(first[u] + last[ok])
            end_parts.append(first[u] + np.searchsorted(theirs, until[ok]))
    if not pair_parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    since = np.concatenate(since_parts)
    widths = np.concatenate(end_parts) - since
    term_row = np.repeat(np.arange(since.size), widths)
    offset = np.arange(term_row.size) - np.repeat(np.cumsum(widths) - widths, widths)
    return np.concatenate(pair_parts), since, term_row, since[term_row] + offset


def _lives(graph: Graph) -> list[tuple[int, tuple[int, ...]]]:
    """The values that get variables, with their readers: read at all and of some size."""
    return [(v, users) for v, users in enumerate(graph.users) if users and graph.memory[v] > 0]


def _horizons(graph: Graph, lives: list[tuple[int, tuple[int, ...]]]) -> dict[int, int]:
    """Per value, the last stage that may need it: its last read, or later where one of its readers may be
    computed again (up to that reader's own horizon)."""
    horizon: dict[int, int] = {}
    for v, users in reversed(lives):
        horizon[v] = max([users[-1], *(horizon[w] for w in users if w in horizon)])
    return horizon


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
    over: np.ndarray = np.cumsum(diff)[:-1] - _room(graph, budget)
    return over


def _room(graph: Graph, budget: int) -> np.ndarray:
    """Per stage t, the memory left for values held across t beside fixed memory and t's own footprint."""
    return budget - graph.fixed_memory - graph.compute_footprint
