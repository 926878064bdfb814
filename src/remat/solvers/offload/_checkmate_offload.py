"""The ``checkmate-offload`` strategy: keep, recompute or offload each value, for the least simulated cost.

Every candidate plan is simulated with the request's transfer; the cheapest that fits the budget (and
the host budget) is returned. The candidates:

1. the engine-free strategies that offload (:data:`OFFLOAD_BASELINES`), at the budget;
2. the ladder: an anneal (:func:`remat.solvers.search.anneal`) at the budget (remat only, in process), then
   checkpoint-all's plan (no recomputation at all) and shorter anneals' plans at budgets between the
   requested one and checkpoint-all's peak (a geometric ladder, highest first), each cheaper than a plan
   at the budget, with idle values moved to the host until they fit (:func:`offload_to_fit`); together
   :data:`LADDER_SHARE` of the time at most;
3. remat only: the ``checkmate`` strategy at the budget, as it would run on its own, with the time limit less
   step 3b's share (:data:`REMAT_SHARE` of it when step 4 follows); then (3b) its plan with values kept and
   moved to the host instead of computed again wherever that costs less
   (:func:`offload_instead_of_recomputing`), within :data:`INSTEAD_SHARE` of the time limit;
4. on graphs of up to :data:`JOINT_MILP_NODES` nodes, the joint MILP (keep, recompute or offload per value
   and stage, :mod:`remat.solvers.checkmate._offload_model`), warm-started from step 3's schedule, with
   the time left.

Steps 1 and 2 run in a thread beside step 3 (whose work is mostly in its solver processes), so the
answer is never worse than remat only or any offload baseline at the same budget and time limit. They
report their plans (as the best so far) only once step 3 has ended: with a convergence rule, the solve
ends when the best plan stops improving, and the rule then judges the remat-only search from its own
first plan, as it would on its own. Steps 1, 2 and 3b are bounded work and finish after such a stop (not
after a cancel or the deadline); step 4 does not run after it.

The lower bound is the graph's base cost (the compute stream runs every node at least once, one at a
time): the MILP's bound is not one, since the simulator overlaps what the model runs stage by stage.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress

from remat.schedules import (
    Graph,
    Plan,
    RematError,
    Schedule,
    Simulation,
    StrategyNotApplicable,
    Transfer,
    checkpoint_all_plan,
    plan_from_schedule,
    simulate,
)

from .._context import Outcome, Progress, SolveContext, Stop, StopReason, relative_gap
from .._options import Option
from .._warm import WarmStart
from .._watch import watching
from ..checkmate import OPTIONS as CHECKMATE_OPTIONS
from ..checkmate import checkmate, solve_offload_milp
from ..search import anneal
from ._instead import offload_instead_of_recomputing
from ._squeeze import offload_to_fit
from ._table import OFFLOAD_BASELINES
from ._transfer import required_transfer

__all__ = ["JOINT_MILP_NODES", "LADDER_RUNGS", "OPTIONS", "checkmate_offload", "checkmate_or_offload"]

JOINT_MILP_NODES = 40
"""Largest graph (in nodes) on which the joint MILP runs; larger ones rely on the ladder. (docs/tuning.md)"""

LADDER_RUNGS = 4
"""Budgets between the requested one and checkpoint-all's peak whose remat-only plans are moved down to it.
(docs/tuning.md)"""

LADDER_SHARE = 0.6
"""Share of the time limit for the ladder, its anneals and its moves to the host together (step 2). (docs/tuning.md)"""

AT_BUDGET_SHARE = 2 / 3
"""Share of the ladder's time for the anneal at the budget itself (0.4 of the time limit). (docs/tuning.md)"""

INSTEAD_SHARE = 0.25
"""Share of the time limit for step 3b: copies instead of step 3's recomputations (remat only gets the rest on
graphs too large for the joint MILP). (docs/tuning.md)"""

REMAT_SHARE = 0.5
"""Share of the time limit for remat only at the budget (step 3) when the joint MILP runs after it. (docs/tuning.md)"""

RUNG_SHARE = 0.8
"""Share of a rung's time for its anneal; the rest is kept for moving its plan down to the budget. (docs/tuning.md)"""

MOVES_PER_NODE = 10
"""Moves per node of the anneal at each rung of the ladder: on gpt-12 (678 nodes) a fraction of the time
checkmate's anneal path takes to a plan about as good. (docs/tuning.md)"""

MOVES_AT_BUDGET = 50
"""Moves per node of the anneal at the budget itself, the first remat-only plan: on gpt-12 at 0.35 of its
peak, 1.28 times the base cost (1.30 with 10 moves per node). (docs/tuning.md)"""

LADDER_NICENESS = 10
"""The nice value of the thread of steps 1 and 2: it yields most of a contended core to step 3's processes.
(docs/tuning.md)"""

STOP_POLL_S = 0.1
"""Seconds between two looks at whether remat only can stop: the solve was stopped, or a plan proved optimal.
(docs/tuning.md)"""

OPTIONS: Mapping[str, Option] = {
    name: option.with_summary(f"{option.summary} (for its plans without transfers)")
    for name, option in CHECKMATE_OPTIONS.items()
}
"""The options ``checkmate-offload`` reads: checkmate's, passed to its remat-only solves."""


def checkmate_or_offload(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """The ``checkmate`` strategy: remat only, or :func:`checkmate_offload` when ``options.offload`` is true."""
    if ctx.limits.options.get("offload", False) is True:
        return checkmate_offload(graph, budget, ctx)
    return checkmate(graph, budget, ctx)


def checkmate_offload(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """The cheapest plan within ``budget`` among the module's candidates, simulated with ``ctx.offload.transfer``.

    Raises InvalidRequest without ``ctx.offload.transfer``.
    """
    transfer = required_transfer(ctx, "checkmate-offload")
    best = _Best(graph, budget, transfer, ctx)
    total = ctx.remaining_s()
    exact = graph.size <= JOINT_MILP_NODES

    def fast_candidates(stop: Stop) -> None:
        _yield_cpu()
        lane = ctx.detached(LADDER_SHARE * total).stopped_by(stop)
        _offload_baselines(graph, budget, lane, best)
        _ladder(graph, budget, transfer, lane, best)

    with (_stopping(lambda: _ended(ctx) or best.proved(), ctx) as lane_stop,
          _beside(lambda: fast_candidates(lane_stop), name="remat-offload-ladder"),
          _stopping(best.done, ctx) as remat_stop):
        remat = _remat(graph, budget, _share(ctx, (REMAT_SHARE if exact else 1 - INSTEAD_SHARE) * total, best)
                       .stopped_by(remat_stop))
    if remat is not None:
        plan = plan_from_schedule(graph, remat.schedule)
        best.offer("checkmate (remat only)", plan, remat.schedule)
        best.offer("checkmate, copies instead of recomputations",
                   _copies_instead(graph, budget, transfer, plan, ctx, best, INSTEAD_SHARE * total))
    best.announce()
    if exact and not best.done():
        found = solve_offload_milp(graph, budget, transfer, _share(ctx, ctx.remaining_s(), best), remat)
        best.offer("joint MILP", _plan_of(graph, found), found.schedule)
        ctx.record.log.extend(found.log)
    return best.outcome()


def _yield_cpu() -> None:
    """Lower the calling thread's CPU priority (Linux keeps a nice value per thread), so that remat only's
    solver processes run first where they compete for cores: there the ladder's thread took a share of
    their time and remat only beside it returned dearer plans than on its own (benchmarks/LOG.md,
    2026-11-24 12:49 UTC)."""
    with suppress(AttributeError, OSError):  # no setpriority (Windows), or not allowed
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LADDER_NICENESS)


@contextmanager
def _beside(work: Callable[[], None], *, name: str) -> Iterator[None]:
    """Run ``work`` in a thread while the block runs; after the block, wait for it and raise what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # handed to the caller's thread
            raised.append(e)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
    if raised:
        raise raised[0]


@contextmanager
def _stopping(condition: Callable[[], bool], ctx: SolveContext) -> Iterator[Stop]:
    """A stop event for a part of the solve, set once ``condition`` holds while the block runs (with the solve's
    stop reason, if it has one).

    Remat only stops when the solve does or a plan is proved optimal; the fast candidates go on after a
    convergence stop (theirs is bounded work), but not after a cancel, the deadline or a proof.
    """
    stop = Stop()
    with watching(condition, lambda: stop.request(ctx.stop_reason or StopReason.CONVERGED), every_s=STOP_POLL_S,
                  name="remat-offload-stop"):
        yield stop


class _Best:
    """The cheapest candidate that fits, kept with its simulation; a new best is reported unless offered quietly.

    Offers may come from two threads at once.
    """

    def __init__(self, graph: Graph, budget: int, transfer: Transfer, ctx: SolveContext) -> None:
        self.graph, self.budget, self.transfer, self.ctx = graph, budget, transfer, ctx
        self.lock = threading.Lock()
        self.plan: Plan | None = None
        self.schedule: Schedule | None = None
        self.simulation: Simulation | None = None
        self.source: str | None = None
        self.reported = True

    @property
    def cost(self) -> float:
        return math.inf if self.simulation is None else self.simulation.cost

    def offer(self, source: str, plan: Plan | None, schedule: Schedule | None = None, *, quiet: bool = False) -> None:
        """Simulate ``plan`` (``schedule``'s, if it has one) and keep it if it fits and is the cheapest so far;
        ``quiet`` leaves the report of a new best to :meth:`announce`."""
        if plan is None:
            return
        simulation = simulate(self.graph, plan, transfer=self.transfer)
        fits = simulation.fits(self.budget, self.ctx.offload.host_budget)
        with self.lock:
            if not fits or simulation.cost >= self.cost:
                self.ctx.record.log.append(f"{source}: cost {simulation.cost:g}, peak {simulation.peak_memory} B"
                                    f"{'' if fits else ' (does not fit)'}")
                return
            self.plan, self.schedule, self.simulation, self.source = plan, schedule, simulation, source
            self.reported = False
        if not quiet:
            self.announce()

    def announce(self) -> None:
        """Report the best plan, if it was not."""
        with self.lock:
            if self.reported or self.simulation is None:
                return
            self.reported = True
            cost, source = self.cost, self.source
        self.ctx.report(incumbent_cost=cost, lower_bound=self.graph.base_cost,
                        message=f"{source}: cost {cost:g}, best so far")

    def proved(self) -> bool:
        """Whether the best plan's cost is proved optimal by the base cost."""
        return self.ctx.proves(self.cost, self.graph.base_cost)

    def done(self) -> bool:
        """Whether to stop: the solve was stopped, or the best plan is proved optimal."""
        return self.ctx.stopped() or self.proved()

    def outcome(self) -> Outcome:
        """The best plan, as a schedule when it has no transfers; the base cost as its lower bound."""
        if self.simulation is None:
            return Outcome(None, lower_bound=self.graph.base_cost, log=["no candidate plan fits the budget"])
        return Outcome(self.schedule, plan=None if self.schedule is not None else self.plan,
                       optimal=self.ctx.proves(self.cost, self.graph.base_cost), lower_bound=self.graph.base_cost,
                       log=[f"best plan: {self.source}"])


def _offload_baselines(graph: Graph, budget: int, ctx: SolveContext, best: _Best) -> None:
    """Offer, quietly, the plan of every engine-free offload strategy that applies."""
    for strategy in OFFLOAD_BASELINES:
        if ctx.stopped():
            return
        try:
            strategy.check_graph(graph)
            found = strategy.run(graph, budget, ctx.detached(ctx.remaining_s()))
        except StrategyNotApplicable:
            continue
        except RematError as e:
            best.ctx.record.log.append(f"{strategy.name} failed: {e}")
            continue
        best.offer(strategy.name, _plan_of(graph, found), found.schedule, quiet=True)


def _copies_instead(graph: Graph, budget: int, transfer: Transfer, plan: Plan, ctx: SolveContext, best: _Best,
                    seconds: float) -> Plan | None:
    """Step 3's plan with values kept and moved to the host instead of computed again, where that costs less
    (:func:`offload_instead_of_recomputing`); bounded work like steps 1 and 2, at most ``seconds`` long."""
    until = min(ctx.elapsed_s() + seconds, ctx.limits.time_limit_s)
    found = offload_instead_of_recomputing(
        graph, plan, budget, transfer, host_budget=ctx.offload.host_budget,
        stopped=lambda: _ended(ctx) or best.proved() or ctx.elapsed_s() > until)
    return None if found is None else found[0]


def _ended(ctx: SolveContext) -> bool:
    """Whether the solve was cancelled or reached its deadline (a convergence stop lets bounded work finish)."""
    return ctx.stop_reason in (StopReason.CANCEL, StopReason.DEADLINE)


def _ladder(graph: Graph, budget: int, transfer: Transfer, ctx: SolveContext, best: _Best) -> None:
    """Offer, quietly, the annealer's plan at ``budget``, then checkpoint-all's and the annealer's at each rung
    moved down to ``budget`` (step 2).

    The anneal at the budget makes :data:`MOVES_AT_BUDGET` moves per node, each rung's :data:`MOVES_PER_NODE`
    (runs that do not depend on the machine's speed), within a share of ``ctx``'s time:
    :data:`AT_BUDGET_SHARE` for the one at the budget, then for each rung an even share of what is left, less
    a fifth kept for moving its plan down.
    """
    at_budget = _anneal(graph, budget, ctx, AT_BUDGET_SHARE * ctx.remaining_s(), MOVES_AT_BUDGET)
    best.offer("anneal (remat only)", None if at_budget is None else plan_from_schedule(graph, at_budget), at_budget,
               quiet=True)
    best.offer("checkpoint-all, offloaded to fit", _squeezed(graph, checkpoint_all_plan(graph), budget, transfer, ctx),
               quiet=True)
    rungs = _rungs(graph, budget)
    for k, rung in enumerate(rungs):
        if best.proved() or ctx.stopped():
            return
        found = _anneal(graph, rung, ctx, RUNG_SHARE * ctx.remaining_s() / (len(rungs) - k), MOVES_PER_NODE)
        if found is not None:
            plan = _squeezed(graph, plan_from_schedule(graph, found), budget, transfer, ctx)
            best.offer(f"anneal at {rung} B, offloaded to fit", plan, quiet=True)


def _anneal(graph: Graph, budget: int, ctx: SolveContext, seconds: float, moves_per_node: int) -> Schedule | None:
    """The annealer's schedule at ``budget`` (None if it found none that fits) after ``moves_per_node`` moves per
    node, or what it has after ``seconds``."""
    return anneal(graph, budget, ctx.within(seconds), max_moves=moves_per_node * graph.size).schedule


def _plan_of(graph: Graph, found: Outcome) -> Plan | None:
    """The plan of what a strategy found: its plan, or its schedule's."""
    return found.plan if found.schedule is None else plan_from_schedule(graph, found.schedule)


def _remat(graph: Graph, budget: int, ctx: SolveContext) -> WarmStart | None:
    """The ``checkmate`` strategy's schedule at ``budget`` (no transfers), simulated; None if it found none."""
    found = checkmate(graph, budget, ctx)
    if found.infeasible:
        ctx.record.log.append(f"no schedule without transfers fits {budget} B")
    if found.schedule is None:
        return None
    simulation = simulate(graph, plan_from_schedule(graph, found.schedule))
    return WarmStart("checkmate", found.schedule, simulation) if simulation.peak_memory <= budget else None


def _squeezed(graph: Graph, plan: Plan, budget: int, transfer: Transfer, ctx: SolveContext) -> Plan | None:
    """``plan`` with idle values moved to the host until it fits ``budget``; None when it cannot be made to."""
    fitted = offload_to_fit(graph, plan, budget, transfer, host_budget=ctx.offload.host_budget, stopped=ctx.stopped)
    return None if fitted is None else fitted[0]


def _rungs(graph: Graph, budget: int) -> list[int]:
    """The ladder's budgets, from the highest down: a geometric sequence strictly between ``budget`` and
    checkpoint-all's peak."""
    top = graph.checkpoint_all_peak
    if budget >= top:
        return []
    ratio = top / budget
    rungs = {int(budget * ratio ** (k / (LADDER_RUNGS + 1))) for k in range(LADDER_RUNGS, 0, -1)}
    return sorted((b for b in rungs if budget < b < top), reverse=True)


def _share(ctx: SolveContext, seconds: float, best: _Best) -> SolveContext:
    """``ctx`` for a part that may take ``seconds`` and finds plans within the budget: its progress shows them,
    or the best plan so far where it is cheaper; it shares the stop flag and the record."""
    sink = ctx.on_progress

    def report(progress: Progress) -> None:
        if sink is None:
            return
        if progress.incumbent_cost is None or progress.incumbent_cost > best.cost:
            progress = dataclasses.replace(progress, incumbent_cost=None if best.simulation is None else best.cost)
        bound = best.graph.base_cost
        sink(dataclasses.replace(progress, lower_bound=bound, gap=relative_gap(progress.incumbent_cost, bound)))

    return ctx.within(seconds).reporting_to(report)
