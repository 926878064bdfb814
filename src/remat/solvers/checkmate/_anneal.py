"""The ``anneal`` path of the checkmate strategy: annealing chains, the baselines and a lower bound, raced.

The solve process runs one annealing chain (its greedy descent gives the first plan within a
second or so). Helper processes, one per further thread (at least one), run in parallel:

- the first runs the baselines (the best becomes the fallback, and the start of any chain that has
  found nothing that fits yet), then, when none fits a budget near the memory floor, tries to prove
  that nothing does (:mod:`._windows`), then the lower bound of :mod:`remat.solvers.bounds` (LP, then MIP while
  time allows; highspy stays out of the solve process), then a chain of its own, from the best baseline
  when one fits (a basin the solve process's chain, from checkpoint-all, can miss);
- the others run chains with other seeds.

Each LP bound that rises comes with the plan its solution describes (:func:`~remat.solvers.search.retained_plan`);
between two moves the solve process's chain descends it to the budget apart and goes on from it when
it then fits for less than the chain's best (on deep graphs it lands on the bound).

The solve process's chain cools in cycles of doubling length (:meth:`Annealer.run`), so that a solve
stopped on convergence stops at a cold chain; the helpers' chains cool once over the whole time limit:
hot for longer, they cross to basins the cycles miss (the 6-level U-Net at 0.5 of its peak).

The search ends :data:`~remat.solvers._context.FINISH_S_PER_NODE` seconds per node before the time
limit: what follows it (the best plan's schedule, the plan, its simulation) takes about that long, and
the time limit is a cap (the 100,000-node GPT: 2.1 to 2.5 s on 2 cores; without the reserve its solves
ended 4 to 6 s late).
Helpers still running then are killed at once rather than after their grace period (a baseline or an
LP on such a graph does not look at the stop flag: the wait was another 1.5 s).

Every new best, from any process, is reported at once (at most every half second after the first);
when a proved bound meets the best cost within ``ctx.limits.mip_gap``, or a proof that nothing fits comes,
everything stops with that proof. The outcome is the cheapest plan that fits: a chain's, or a
baseline's (as the fallback); when none does, the leanest state of the solve process's chain, whose
peaks it records as it goes (``ctx.report_leanest``: the convergence rule stops a solve whose floor
has stopped falling).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from remat.schedules import Graph, Schedule

from .._children import ChildFailed, spawn
from .._context import Outcome, SolveContext, Throttle
from .._supervise import GRACE_S, StopThenKill
from .._warm import WarmStart
from ..search import Annealer, Timeline, composed_start, timeline_from_schedule
from ._anneal_worker import (
    BaselineFound,
    BestCost,
    BoundFound,
    ChainBest,
    HelperRequest,
    Note,
    StartFound,
    WindowInfeasible,
    run_helper,
)

__all__ = ["anneal_path"]


def anneal_path(graph: Graph, budget: int, ctx: SolveContext, _warm: WarmStart | None) -> Outcome:
    """Race annealing chains, the baselines (unless the option ``warm_start`` is false) and the lower bound;
    keep the best. This path runs the baselines itself, so it is never given a warm start (``_warm``)."""
    ctx = ctx.finishing(graph.size)
    pool = _Pool(graph, budget, ctx)
    first = ("baselines", "bound") if ctx.limits.options.get("warm_start", True) else ("bound",)
    helpers = [
        _Helper(graph, budget, pool, seed=k + 1, time_limit_s=ctx.remaining_s(),
                tasks=(*first, "anneal") if k == 0 else ("anneal",))
        for k in range(ctx.limits.threads - 1)
    ] or [_Helper(graph, budget, pool, seed=1, time_limit_s=ctx.remaining_s(), tasks=first)]

    def tend(annealer: Annealer) -> bool:
        for helper in helpers:
            helper.tell(pool.cost)
        start = pool.take_start(annealer)
        if start is not None:
            pool.tried(*_start_again(graph, budget, ctx, annealer, start, on_best))
        return pool.tend(annealer)

    def on_best(cost: float, extras: list[tuple[int, int]], source: str = "anneal") -> None:
        ctx.report_chain(cost)
        pool.offer(cost, extras, source)

    try:
        annealer = Annealer(graph, budget, seed=0)
        reused = composed_start(graph, budget, ctx, annealer,
                                lambda cost, extras: on_best(cost, extras, "repeated blocks"),
                                give_way=lambda: pool.start is not None)
        if reused is not None:
            pool.note(reused)
        annealer.run(ctx, on_best=on_best, every=tend, on_leanest=ctx.report_leanest)
    finally:
        for helper in helpers:
            helper.stop()
        for helper in helpers:
            helper.join(ctx.remaining_s())
    pool.flush()
    outcome = pool.outcome()
    if not outcome.found:
        outcome.leanest = annealer.leanest_schedule()
    return outcome


def _start_again(graph: Graph, budget: int, ctx: SolveContext, annealer: Annealer, start: StartFound,
                 on_best: Callable[[float, list[tuple[int, int]]], None]) -> tuple[bool, str]:
    """Descend from a relaxation's plan to the budget, and move the chain there when it then fits for less than
    the chain's best (reported to ``on_best``); whether it came down to the budget, and a line for the log."""
    trial = Annealer(graph, budget, seed=0)
    trial.adopt(start.extras)
    trial.descend(ctx)
    cost = trial.tl.total_cost
    head = f"the plan of the {start.how} (cost {start.cost:.6g})"
    if trial.excess > 0:
        return False, f"{head} did not come down to the budget: no more such plans are tried"
    if annealer.best_cost is not None and cost >= annealer.best_cost:
        return True, f"{head} fits at {cost:.6g}, no less than the chain's best"
    annealer.adopt(trial.extras)
    if annealer.best_cost is not None:
        on_best(annealer.best_cost, list(annealer.best or ()))
    return True, f"{head} fits at {cost:.6g}: the chain goes on from it"


@dataclass
class _Pool:
    """The best plan and the best bound from every process; thread-safe; reports to the context."""

    graph: Graph
    budget: int
    ctx: SolveContext
    cost: float = math.inf
    extras: list[tuple[int, int]] | None = None
    source: str = ""
    baseline: tuple[str, Schedule, float] | None = None
    start: StartFound | None = None
    """A plan read off a relaxation that the solve process's chain has not tried yet."""
    starts_wanted: bool = True
    """False once such a plan did not come down to the budget (the later rungs' plans cost more: rl500 at 0.5,
    three in a row, each descent pausing the chain for seconds)."""
    bound: float | None = None
    infeasible: bool = False
    log: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _throttle: Throttle = field(default_factory=Throttle)
    _pending: bool = False
    _handed: str = ""

    def offer(self, cost: float, extras: list[tuple[int, int]], source: str) -> None:
        with self._lock:
            if cost < self.cost:
                self.cost, self.extras, self.source = cost, extras, source
                self._report(force=False)

    def offer_baseline(self, name: str, schedule: Schedule, cost: float) -> None:
        """A baseline's plan: the fallback, and (as extra computations) a start for chains that have none."""
        extras = timeline_from_schedule(self.graph, schedule).extras()
        with self._lock:
            if cost < self.cost:
                self.baseline = (name, schedule, cost)
                self.cost, self.extras, self.source = cost, extras, name
                self._report(force=False)

    def offer_bound(self, bound: float, how: str) -> None:
        with self._lock:
            self.log.append(f"lower bound ({how}): {bound:.6g}")
            if self.bound is None or bound > self.bound:
                self.bound = bound
                self._report(force=True)

    def offer_start(self, start: StartFound) -> None:
        """A relaxation's plan for the chain to try; the solve has not converged until it has."""
        with self._lock:
            if self.starts_wanted:
                self.start = start
                self.ctx.record.trying = True

    def take_start(self, annealer: Annealer) -> StartFound | None:
        """The relaxation's plan that came last, once, when it costs less than the chain's best (before its
        descent to the budget); :meth:`tried` is then to be called."""
        with self._lock:
            start, self.start = self.start, None
            due = start is not None and (annealer.best_cost is None or start.cost < annealer.best_cost)
            self.ctx.record.trying = due
        return start if due else None

    def tried(self, fits: bool, line: str) -> None:
        """The plan :meth:`take_start` gave was tried, as ``line`` says; it came down to the budget if ``fits``."""
        with self._lock:
            self.log.append(line)
            self.starts_wanted = self.starts_wanted and fits
            self.start = self.start if self.starts_wanted else None
            self.ctx.record.trying = self.start is not None

    def offer_infeasible(self, first: int, last: int) -> None:
        with self._lock:
            self.infeasible = True
            self.log.append(f"stages {first} to {last} cannot run within the budget (window of the MILP, "
                            "proved infeasible): no schedule of Checkmate's form fits")

    def note(self, line: str) -> None:
        with self._lock:
            self.log.append(line)

    def proved(self) -> bool:
        """True when the bound shows the best cost is optimal within the context's gap."""
        return self.ctx.proves(self.cost, self.bound)

    def tend(self, annealer: Annealer) -> bool:
        """Between moves: hand a chain the best plan when it has none or a baseline beats it; flush a
        held report; True to stop (the bound proves the best plan optimal, or nothing fits)."""
        with self._lock:
            baseline_news = self.baseline is not None and self.source == self.baseline[0] \
                and self._handed != self.source and (annealer.best_cost is None or self.cost < annealer.best_cost)
            if self.extras is not None and (annealer.best is None or baseline_news):
                annealer.adopt(self.extras)
                self._handed = self.source
            if self._pending:
                self._report(force=False)
        return self.proved() or self.infeasible

    def flush(self) -> None:
        """Report the best plan and bound if the last report did not show them."""
        with self._lock:
            if self._pending:
                self._report(force=True)

    def _report(self, *, force: bool) -> None:
        """Report the best plan and bound now, or mark them pending when the last report was too recent."""
        self._pending = not self._throttle.due(force=force)
        if self._pending:
            return
        cost = self.cost if self.cost < math.inf else None
        self.ctx.report(incumbent_cost=cost, lower_bound=self.bound)

    def outcome(self) -> Outcome:
        """The best plan: a chain's, or the baseline's as the fallback; with the bound and, if proved, optimal."""
        log = [*self.log, f"best plan from {self.source or 'nothing'}"]
        bound = self.bound
        if self.extras is None:
            return Outcome(None, infeasible=self.infeasible, lower_bound=bound, log=log)
        if self.infeasible:
            log.append("a plan fits although a window was proved infeasible: check the window model")
        if self.baseline is not None and self.source == self.baseline[0]:
            name, schedule, _ = self.baseline
            outcome = Outcome(schedule, lower_bound=bound, fallback=name, log=log)
        else:
            outcome = Outcome(Timeline.with_extras(self.graph, self.extras).schedule(), lower_bound=bound, log=log)
        outcome.optimal = self.proved()
        return outcome


class _Helper:
    """A helper process (:mod:`._anneal_worker`) and the thread that reads what it sends.

    It stays in the solve's process group: killing the solve's group (as the service does) takes it too.
    """

    def __init__(self, graph: Graph, budget: int, pool: _Pool, *, seed: int, time_limit_s: float,
                 tasks: tuple[str, ...]) -> None:
        self.pool, self.seed, self.told = pool, seed, math.inf
        self.child = spawn(run_helper, HelperRequest(graph, budget, seed, time_limit_s, tasks), own_group=False)
        self.stopper = StopThenKill(lambda _: self.child.stop(), self.child.kill)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def tell(self, cost: float) -> None:
        """Let the helper know the best cost so far (it decides whether a MIP bound is worth its time)."""
        if cost < self.told:
            self.told = cost
            self.child.send(BestCost(cost))

    def stop(self) -> None:
        """Ask the helper to stop (it is killed ``GRACE_S`` later at the latest, by :meth:`join`)."""
        self.stopper.stop()

    def join(self, left_s: float = math.inf) -> None:
        """Wait for the helper to end, killing it once the grace period after its stop has passed, or
        once ``left_s`` seconds have (the search's time left: at once when none is)."""
        if not self.child.wait(min(self.stopper.grace_left(), left_s)):
            self.stopper.kill()
            if not self.child.started:
                self.pool.note(f"helper {self.seed} did not start")
        self.reader.join(GRACE_S)
        self.child.close()

    def _read(self) -> None:
        pool = self.pool
        while not self.child.ended:
            for message in self.child.receive(GRACE_S):
                match message:
                    case ChainBest():
                        pool.offer(message.cost, message.extras, f"anneal (helper {self.seed})")
                    case BaselineFound():
                        pool.offer_baseline(message.name, message.schedule, message.cost)
                    case WindowInfeasible():
                        pool.offer_infeasible(message.first, message.last)
                    case BoundFound():
                        pool.offer_bound(message.value, message.how)
                    case StartFound():
                        pool.offer_start(message)
                    case Note():
                        pool.note(message.line)
                    case ChildFailed():
                        pool.note(f"helper {self.seed} failed: {message.traceback}")
