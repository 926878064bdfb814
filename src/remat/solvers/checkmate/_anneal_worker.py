"""A helper process of the anneal path, a child of :func:`~remat.solvers._children.spawn`.

Its request is a :class:`HelperRequest` (the graph, already validated, and the tasks); it runs the
tasks and sends what they find:

- ``baselines``: a :class:`BaselineFound` for the cheapest baseline that fits;
- ``bound``: first, while no plan is known (no baseline fits and the parent has told of none),
  :class:`WindowInfeasible` if :mod:`._windows` proves (within :data:`WINDOW_SHARE` of the time
  limit) that no schedule fits stages first to last, which ends the task; then :class:`BoundFound`
  for the LP bounds of :mod:`remat.solvers.bounds` over more and more stages (:data:`LP_ROWS`,
  within :data:`LP_SHARE` of the time limit, up to :data:`LP_COLUMNS`), then, when the relaxation
  is small enough, the MIP bound (within :data:`MIP_SHARE`) once the LP bound accounts for the
  share ``explained`` of the best plan's overhead and is within :data:`MIP_WITHIN` of its cost
  (``explained`` 0: at once; the parent asks for :data:`MIP_WHEN_EXPLAINED`);
- on a graph of :data:`BOUND_FIRST_NODES` nodes or more, the LP bounds come before the baselines, and
  their rungs start at one stage (:data:`LARGE_LP_ROWS`) and may take the whole time limit;
- before each LP bound that rises, a :class:`StartFound`: the plan its solution describes
  (:func:`~remat.solvers.search.retained_plan`), when it costs less than the best plan so far, for the
  solve process's chain to start again from;
- ``anneal``: a :class:`ChainBest` for each new best of an annealing chain (from the best
  baseline, when one fits).

:class:`Note` messages carry notes. The parent sends :class:`BestCost` to tell the best cost found
so far, and a stop request (or goes away) to stop the work.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from remat.schedules import Graph, Schedule

from .._children import Parent
from .._context import SolveContext, SolveLimits
from ..baselines import best_baseline
from ..bounds import overloaded_stages, retention_bound, retention_solution
from ..search import Annealer, retained_plan
from ._windows import prove_infeasible

__all__ = ["BOUND_FIRST_NODES", "LARGE_LP_ROWS", "LP_COLUMNS", "LP_ROWS", "LP_SHARE", "MIP_COLUMNS", "MIP_SHARE",
           "MIP_WHEN_EXPLAINED", "MIP_WITHIN", "WINDOW_SHARE", "BaselineFound", "BestCost", "BoundFound",
           "ChainBest", "HelperRequest", "Note", "StartFound", "WindowInfeasible", "mip_worth_it", "run_helper",
           "run_tasks"]

WINDOW_SHARE = 0.75
"""Share of the time limit the proof may spend (the chains search for a plan meanwhile). (docs/tuning.md)"""

LP_SHARE = 0.5
"""Share of the time limit the bound may spend on its LPs (an LP not solved by then proves nothing). (docs/tuning.md)"""

LP_ROWS = (4, 16, 64, 256, None)
"""Memory rows of the successive LP bounds: the most overloaded stages, then all that can bind. Fewer
stages can give the higher bound (their pairs span longer, so the rows for what recomputing needs bind
harder: the 12-block GPT at 0.5 gets 13.4 % from 4 or 16 stages and 8.6 % from all 411), more can too
(random layered graphs): the rungs go on while they raise the bound. On the captured and random layered
graphs at 0.9 to 0.5 of their peaks, the bound rises up to one rung and falls after it, never to
rise again: the rungs after the first that falls, which can take longer than a whole converged solve
(the 48-step LSTM, the 12-block GPT: benchmarks/LOG.md, 2026-11-25 01:00 UTC), are not solved. The
MIP bound keeps the rows of the rung that gave the best. (docs/tuning.md)"""

BOUND_FIRST_NODES = 20_000
"""Graphs of this many nodes or more get their LP bound before the baselines: there the baselines take
longer than a 30-s solve (the 100,000-node GPT: not done after 23 s), and the solve process's chain (from
the repeated blocks, or its descent) gives the first plan anyway. (docs/tuning.md)"""

LARGE_LP_ROWS = (1, *LP_ROWS)
"""The rungs on such graphs: one stage first, whose relaxation is the smallest (the 100,000-node GPT at
0.5: 85,000 columns, an LP bound of 7.9 % in 9 s, while 4 stages take 341,000, over
:data:`LP_COLUMNS`). Their LPs may take the whole time limit rather than :data:`LP_SHARE` of it: the
helper has nothing quicker to do there, and on 2 loaded cores that LP was not solved within 15 s of a
30-s solve. (docs/tuning.md)"""

LP_COLUMNS = 200_000
"""Largest relaxation (in columns) solved as an LP: on the 7,956-node GPT, 16 stages (127,000 columns)
are solved and 64 (509,000, 400 MB for the helper) are not, which keeps the solve's processes under 1 GB.
(docs/tuning.md)"""

MIP_SHARE = 0.25
"""Share of the time limit the bound may spend as a MIP once its LP is solved. (docs/tuning.md)"""

MIP_COLUMNS = 300_000
"""Largest relaxation (in columns) worth solving as a MIP. (docs/tuning.md)"""

MIP_WHEN_EXPLAINED = 0.7
"""The MIP runs only when the LP bound accounts for this share of the best plan's overhead (the
MIP closes small gaps, as on layer graphs, not the large ones of random layered graphs, where the
LP explains 15 to 55 %; mobilenet at 0.9, which the MIP proves optimal, is at 79 %). (docs/tuning.md)"""

MIP_WITHIN = 0.01
"""The MIP also waits until the LP bound is within this fraction of the best plan's cost. The chain
pauses for the MIP, which cannot close a gap of several points in the time a converged solve takes:
the 48-step LSTM at 0.5 of its peak (LP 19.9 %, plans 21.5 to 22.5 %: 88 % explained, 2 % of the
cost) kept its chain waiting for most of a converged solve and gained nothing; the 6-level U-Net at 0.8
(0.3 %) and the LSTM at 0.8 (0.05 %) are proved optimal by it within one (benchmarks/LOG.md, 2026-11-25
01:00 UTC). (docs/tuning.md)"""



@dataclass(frozen=True)
class HelperRequest:
    """What a helper is asked: the tasks to run on the graph at the budget, its seed and time limit."""

    graph: Graph
    budget: int
    seed: int
    time_limit_s: float
    tasks: tuple[str, ...]
    explained: float = MIP_WHEN_EXPLAINED


@dataclass(frozen=True)
class BestCost:
    """From the parent: the best cost found so far, anywhere."""

    cost: float


@dataclass(frozen=True)
class BaselineFound:
    """The cheapest baseline that fits."""

    name: str
    schedule: Schedule
    cost: float


@dataclass(frozen=True)
class WindowInfeasible:
    """Proved: no schedule fits stages ``first`` to ``last``, so nothing fits."""

    first: int
    last: int


@dataclass(frozen=True)
class BoundFound:
    """A proved lower bound on cost, and how it was proved."""

    value: float
    how: str


@dataclass(frozen=True)
class ChainBest:
    """A new best of the helper's annealing chain: its cost, and its extra computations."""

    cost: float
    extras: list[tuple[int, int]]


@dataclass(frozen=True)
class StartFound:
    """A plan read off a relaxation's solution: its cost, its extra computations (it may peak over the
    budget), and the relaxation."""

    cost: float
    extras: list[tuple[int, int]]
    how: str


@dataclass(frozen=True)
class Note:
    """A line for the solve's log."""

    line: str


Send = Callable[[object], None]


def run_helper(parent: Parent, request: HelperRequest) -> None:
    """The helper's entry: run the request's tasks until they end or the parent stops them."""
    ctx = SolveContext(SolveLimits(time_limit_s=request.time_limit_s, threads=1), stop_event=parent.stop)
    best = [math.inf]

    def told(message: BestCost) -> None:
        best[0] = min(best[0], message.cost)

    parent.on(BestCost, told)
    run_tasks(request.graph, request.budget, request.seed, ctx, request.tasks, parent.send, best,
              explained=request.explained)


def run_tasks(graph: Graph, budget: int, seed: int, ctx: SolveContext, tasks: tuple[str, ...], send: Send,
              best: list[float], *, explained: float = MIP_WHEN_EXPLAINED) -> None:
    """Run ``tasks`` until ``ctx`` stops, sending what they find; ``best[0]`` is the parent's best cost.

    The MIP bound waits until the LP bound explains the share ``explained`` of the best plan's
    overhead and is within :data:`MIP_WITHIN` of its cost (the chain, if any, pauses for it), and gets
    :data:`MIP_SHARE` of the time limit.
    """
    started = time.monotonic()
    large = graph.size >= BOUND_FIRST_NODES
    lp, rows = (_lp_bound(graph, budget, ctx, send, best, LARGE_LP_ROWS, 1.0) if "bound" in tasks and large
                else (None, None))
    baseline = None
    if "baselines" in tasks:
        baseline = best_baseline(graph, budget, ctx)
        if baseline is not None:
            send(BaselineFound(baseline.source, baseline.schedule, baseline.cost))
            best[0] = min(best[0], baseline.cost)
        for line in ctx.record.log:  # what the baselines noted: failures, and the best of them
            send(Note(line))
        send(Note(f"baselines done after {time.monotonic() - started:.1f} s"))
    if "bound" in tasks and best[0] == math.inf:
        window_s = WINDOW_SHARE * ctx.limits.time_limit_s - ctx.elapsed_s()  # a share of the time limit, from its start
        window = prove_infeasible(graph, budget, ctx.within(window_s))
        if window is not None:
            send(WindowInfeasible(window.start, window.stop - 1))
            return
    if "bound" in tasks and not large:
        lp, rows = _lp_bound(graph, budget, ctx, send, best, LP_ROWS, LP_SHARE)
    mip_wanted = lp is not None

    def mip_due(_: Annealer | None = None) -> bool:
        return mip_wanted and lp is not None and mip_worth_it(best[0], lp, graph.base_cost, explained)

    start = baseline.schedule if baseline is not None else None
    annealer = Annealer(graph, budget, seed=seed, start=start) if "anneal" in tasks else None
    while not ctx.stopped():
        if mip_due():
            mip_wanted = False
            mip_s = min(ctx.remaining_s(), MIP_SHARE * ctx.limits.time_limit_s)
            mip = retention_bound(graph, budget, time_limit_s=mip_s, integral=True, stages=rows,
                                  max_columns=MIP_COLUMNS)
            if mip is not None and lp is not None and mip > lp:
                send(BoundFound(mip, "retention MIP"))
        elif annealer is not None:
            annealer.run(ctx, on_best=lambda cost, extras: send(ChainBest(cost, extras)), every=mip_due,
                         first_cycle_s=math.inf)
        elif mip_wanted:
            ctx.stop_event.wait(0.2)
        else:
            break


def mip_worth_it(best: float, lp: float, base_cost: float, explained: float) -> bool:
    """Whether the MIP bound may close the gap between the best plan's cost and the LP bound: the LP
    explains the share ``explained`` of the plan's overhead (0: always) and is within :data:`MIP_WITHIN`
    of its cost.

    >>> mip_worth_it(121.5, 119.9, 100.0, 0.7)   # the 48-step LSTM at 0.5: 92 % explained, 1.3 % off
    False
    >>> mip_worth_it(102.52, 102.23, 100.0, 0.7)  # the 6-level U-Net at 0.8: 88 %, 0.3 % off
    True
    """
    if explained <= 0:
        return True
    overhead = best - base_cost
    return 0 < overhead <= (lp - base_cost) / explained and best - lp <= MIP_WITHIN * best


def _lp_bound(graph: Graph, budget: int, ctx: SolveContext, send: Send, best: list[float],
              rungs: tuple[int | None, ...], share: float) -> tuple[float | None, int | None]:
    """The best LP bound over the ``rungs`` (stages of each LP) solved within the ``share`` of the time
    limit, and the fewest stages that gave it (the MIP bound uses them: smaller, it gets further); each
    bound that rises is sent, after the plan its solution describes when that costs less than ``best[0]``."""
    deadline = time.monotonic() + share * ctx.limits.time_limit_s
    overloaded = overloaded_stages(graph, budget)
    bound, bound_rows = None, None
    for rows in dict.fromkeys(None if k is None or k >= overloaded else k for k in rungs):
        left = min(ctx.remaining_s(), deadline - time.monotonic())
        if ctx.stopped() or left <= 0:
            break
        solved = retention_solution(graph, budget, time_limit_s=left, stages=rows, max_columns=LP_COLUMNS)
        if solved is None or (bound is not None and solved.bound <= bound * (1 + 1e-9)):
            break  # too large, not solved in time, or past the rung that binds hardest: the next is larger still
        bound, bound_rows = solved.bound, rows
        how = f"retention LP, {rows or 'all'} stages"
        extras = retained_plan(graph, solved.dropped_value, solved.dropped_stage)
        cost = graph.base_cost + math.fsum(float(graph.cost[v]) for v, _ in extras)
        if cost < best[0]:
            send(StartFound(cost, extras, how))  # first: the bound may show the best plan converged
        send(BoundFound(bound, how))
    return bound, bound_rows
