"""Solving a Checkmate model on a backend: limits from the context, progress in real units, plans.

Every incumbent an engine reports becomes a schedule (S rounded, R the minimal closure) and is
simulated at once; the cheapest one that fits the budget is kept, so a plan survives even when the
engine has to be killed. Bounds are converted back to the graph's cost units. A solution is
``optimal`` only when the simulated cost is within the requested gap of a proved bound, and bounds
and infeasibility count as proofs only when the model's memory is exact (no size was rounded up).
"""

from __future__ import annotations

import math

import numpy as np

from remat.schedules import Graph

from .._context import Outcome, SolveContext
from .._warm import WarmStart
from ..backends import BackendResult, EngineStatus, Limits, SolverProgress, choose_backend, run_backend
from ._model import CheckmateModel, Solution, build_checkmate_model

__all__ = ["FINISH_S", "engine_limits", "run_checkmate_model", "run_model", "solve_milp"]

FINISH_S = 1.0
"""Seconds of the time limit kept back for starting the solver process and building the plan. (docs/tuning.md)"""


def engine_limits(ctx: SolveContext) -> Limits:
    """The engine's share of the context's limits; the context's stop event stops the engine."""
    return Limits(time_limit_s=max(ctx.remaining_s() - FINISH_S, 0.1), mip_gap=ctx.limits.mip_gap,
                  threads=ctx.limits.threads, stop=ctx.stop_event)


def solve_milp(graph: Graph, budget: int, ctx: SolveContext, warm: WarmStart | None) -> Outcome:
    """The ``milp`` path of the checkmate strategy: the full MILP, warm-started from ``warm``."""
    model = build_checkmate_model(graph, budget, ctx.stopped)
    if model is None:
        return Outcome(None, log=["stopped while building the model"])
    start = model.encode(warm.schedule) if warm is not None else None
    if warm is not None:
        ctx.report(message=f"MIP start: {warm.source} (cost {warm.cost:g})" if start is not None
                   else f"no MIP start: {warm.source} does not fit the model")
    return run_checkmate_model(model, ctx, start=start)


def run_checkmate_model(model: CheckmateModel, ctx: SolveContext, *, start: np.ndarray | None = None) -> Outcome:
    """Solve ``model`` on the context's backend in a solver process and turn the result into an Outcome."""
    return run_model(model, ctx, start=start)[0]


def run_model(model: CheckmateModel, ctx: SolveContext, *, start: np.ndarray | None = None,
              budget: int | None = None) -> tuple[Outcome, Solution | None]:
    """:func:`run_checkmate_model` keeping plans within ``budget`` (the model's by default); also returns the
    engine's last solution, simulated (for a caller that tries again when it does not fit), or None."""
    backend = choose_backend(ctx.limits.backend, model.milp)
    scale = model.memory
    ctx.report(message=f"{model.milp.describe()}; backend {backend.name}; memory in units of {scale.unit} B"
                       f"{'' if scale.exact else ' (sizes rounded up: bounds are not proofs)'}")
    tracker = _Incumbents(model, ctx, model.budget if budget is None else budget)
    result = run_backend(backend, model.milp.with_start(start), engine_limits(ctx), tracker.progress)
    return tracker.outcome(result, backend.name), tracker.last


class _Incumbents:
    """Keeps the cheapest plan within ``budget`` among the engine's incumbents and reports progress.

    ``last`` is the solution offered last, fitting or not: the engine's final one once it has returned.
    """

    def __init__(self, model: CheckmateModel, ctx: SolveContext, budget: int) -> None:
        self.model, self.ctx, self.budget = model, ctx, budget
        self.best: Solution | None = None
        self.last: Solution | None = None
        self.bound: float | None = None

    def offer(self, watched: np.ndarray) -> None:
        """Simulate the plan of an incumbent; keep it if it fits and is the cheapest so far."""
        found = self.model.evaluate(watched)
        simulation = found.simulation
        if simulation.peak_memory <= self.budget and (self.best is None or simulation.cost < self.best.simulation.cost):
            self.best = found
        self.last = found

    def progress(self, progress: SolverProgress) -> None:
        if progress.bound is not None and math.isfinite(progress.bound) and self.model.proves:
            bound = self.model.real_cost(progress.bound)
            self.bound = bound if self.bound is None else max(self.bound, bound)
        if progress.watched is not None:
            self.offer(progress.watched)
        self.ctx.report(incumbent_cost=self.best.simulation.cost if self.best else None, lower_bound=self.bound)

    def outcome(self, result: BackendResult, backend: str) -> Outcome:
        """The best plan, the best bound, and whether they prove optimality within the requested gap."""
        log = result.log[-20:]
        if result.status is EngineStatus.INFEASIBLE:
            if self.model.proves:
                return Outcome(None, infeasible=True, backend=backend,
                               log=[*log, "the engine proved that no schedule of this form fits the budget"])
            return Outcome(None, backend=backend, log=[*log, "the engine found no solution (not a proof: the model "
                                                            "rounds sizes up or approximates the plans' time)"])
        if result.watched is not None:
            self.offer(result.watched)
        if result.bound is not None:
            self.progress(SolverProgress(self.ctx.elapsed_s(), bound=result.bound))
        if self.best is None:
            return Outcome(None, lower_bound=self.bound, backend=backend, log=log)
        cost, bound = self.best.simulation.cost, self.bound
        return Outcome(self.best.schedule, optimal=self.ctx.proves(cost, bound),
                       lower_bound=None if bound is None else min(bound, cost), backend=backend, log=log,
                       plan=self.best.plan)
