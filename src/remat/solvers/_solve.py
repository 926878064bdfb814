"""solve(): run a strategy, turn its schedule into a plan, simulate it, report the result.

This is the only path from a strategy to a user: whatever a strategy claims, the returned cost
and peak are the simulator's, and a plan over budget is never reported as fitting.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from remat.schedules import (
    Graph,
    InvalidRequest,
    SolverFailed,
    Transfer,
    plan_from_schedule,
    resolve_budget,
    simulate,
    simulate_schedule,
    whole_number,
)

from ._context import (
    DEFAULT_CONVERGENCE,
    DEFAULT_MIP_GAP,
    DEFAULT_TIME_LIMIT_S,
    Convergence,
    OffloadSettings,
    Outcome,
    Progress,
    SolveContext,
    SolveLimits,
    Stop,
    StopReason,
    default_threads,
)
from ._document import ResultStatus
from ._registry import get_strategy
from ._result import Result
from ._watch import watching

__all__ = ["solve"]

CONVERGENCE_POLL_S = 0.1
"""Seconds between two looks at whether a solve with a convergence rule has converged. (docs/tuning.md)"""


def solve(
    graph: Graph,
    *,
    budget: int | None = None,
    budget_ratio: float | None = None,
    strategy: str = "checkmate",
    backend: str = "auto",
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    mip_gap: float = DEFAULT_MIP_GAP,
    threads: int | None = None,
    options: Mapping[str, Any] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    stop_event: Stop | None = None,
    convergence: Convergence | None = DEFAULT_CONVERGENCE,
    transfer: Transfer | None = None,
    host_budget: int | None = None,
) -> Result:
    """Find a plan for ``graph`` within ``budget`` bytes (or ``budget_ratio`` of checkpoint-all's peak).

    ``transfer`` says how long copies to host memory and back last (strategies that offload need
    it); ``host_budget`` caps the bytes those copies hold on the host.

    The solve runs until its strategy ends, it proves its plan optimal, ``stop_event`` is set (a
    cancel, or :meth:`Stop.request` with another reason), its best plan stops improving by the
    ``convergence`` rule (by default: by less than 0.25 % in 2 s, longer while far from its bound;
    ``None`` runs to the limit) or
    ``time_limit_s`` passes. The convergence rule stops only anytime searches (``checkmate``,
    ``checkmate-offload``); the other strategies end by themselves.

    Raises InvalidRequest, UnknownStrategy or StrategyNotApplicable for requests that cannot run;
    everything that happens once the strategy runs is reported in the Result's status.
    """
    started = time.monotonic()
    limit = resolve_budget(graph, budget=budget, budget_ratio=budget_ratio)
    strat = get_strategy(strategy)
    strat.check_backend(backend)
    if not time_limit_s > 0:
        raise InvalidRequest(f"'time_limit_s' must be > 0, got {time_limit_s!r}.", field="time_limit_s")
    if not 0 <= mip_gap < 1:
        raise InvalidRequest(f"'mip_gap' must be in [0, 1), got {mip_gap!r}.", field="mip_gap")
    strat.check_options(options or {})
    strat.check_transfer(transfer, options)
    if host_budget is not None:
        host_budget = whole_number(host_budget, what="'host_budget'", field="host_budget")
    strat.check_graph(graph, options)
    ctx = SolveContext(
        SolveLimits(
            time_limit_s=time_limit_s,
            mip_gap=mip_gap,
            threads=threads or default_threads(),
            backend=backend or "auto",
            options=dict(options or {}),
            convergence=convergence if strat.anytime else None,
        ),
        OffloadSettings(transfer=transfer, host_budget=host_budget),
        stop_event=stop_event or Stop(),
        on_progress=on_progress,
        started=started,
    )
    if limit < graph.min_feasible_budget:
        outcome = Outcome(None, infeasible=True, log=[
            f"budget {limit} is below min_feasible_budget {graph.min_feasible_budget}: no plan can fit"])
    else:
        try:
            with _watching_convergence(ctx):
                outcome = strat.run(graph, limit, ctx)
        except SolverFailed as e:
            return Result(graph, strategy, None, ResultStatus.ERROR, limit, time.monotonic() - started,
                          log=[*ctx.record.log, str(e)], transfer=transfer, host_budget=host_budget)
    return _finish(graph, strategy, limit, outcome, ctx, started)


def _finish(graph: Graph, strategy: str, budget: int, outcome: Outcome, ctx: SolveContext,
            started: float) -> Result:
    """Simulate the outcome's plan and decide the status from what the simulation shows."""
    log = [*ctx.record.log, *outcome.log]
    result = Result(graph, strategy, outcome.backend, ResultStatus.TIMEOUT, budget, 0.0,
                    fallback=outcome.fallback, log=log, transfer=ctx.offload.transfer,
                    host_budget=ctx.offload.host_budget)
    reason = ctx.stop_reason
    rule = ctx.limits.convergence
    if reason is StopReason.CONVERGED and rule is not None:
        if outcome.found:
            log.append(f"stopped when converged: the best plan improved by less than {rule.tolerance:.2%} "
                       f"in {rule.window_for(ctx.record.gap(), ctx.elapsed_s()):.3g} s")
        else:
            log.append(f"stopped when converged: no plan fits, and the leanest plan's peak fell by less than "
                       f"{rule.tolerance:.2%} in {rule.floor_window_s:g} s")
    if not outcome.found and outcome.leanest is not None:
        result.smallest_peak = simulate_schedule(graph, outcome.leanest).peak_memory
        log.append(f"no plan within the budget; the leanest plan found peaks at {result.smallest_peak} bytes "
                   f"({result.smallest_peak / graph.checkpoint_all_peak:.3f} of checkpoint-all's peak)")
    if outcome.infeasible:
        result.status = ResultStatus.INFEASIBLE
    elif not outcome.found:
        result.status = ResultStatus.CANCELLED if reason is StopReason.CANCEL else ResultStatus.TIMEOUT
        result.lower_bound = outcome.lower_bound
    else:
        plan = outcome.plan if outcome.schedule is None else plan_from_schedule(graph, outcome.schedule)
        assert plan is not None, "found: a schedule or a plan"
        result.schedule = outcome.schedule
        result.plan = plan
        result.simulation = simulate(graph, plan, transfer=ctx.offload.transfer)
        bound = graph.base_cost if outcome.lower_bound is None else max(graph.base_cost, outcome.lower_bound)
        result.lower_bound = min(bound, result.simulation.cost)
        if not result.fits:
            result.status = ResultStatus.OVER_BUDGET
            if outcome.optimal:
                log.append("the strategy claimed optimality but its plan simulates over budget")
        elif reason is StopReason.CANCEL:
            result.status = ResultStatus.CANCELLED
        elif reason is StopReason.DEADLINE:  # like a cancel, a stop by the backstop outranks a proof
            result.status = ResultStatus.FEASIBLE
        elif outcome.optimal:
            result.status = ResultStatus.OPTIMAL
            result.lower_bound = result.simulation.cost if outcome.lower_bound is None else result.lower_bound
        else:
            result.status = ResultStatus.FEASIBLE
    result.solve_time_s = time.monotonic() - started
    return result


def _watching_convergence(ctx: SolveContext) -> AbstractContextManager[None]:
    """While the block runs, stop the solve (reason ``converged``) once the context's rule holds."""
    if ctx.limits.convergence is None:
        return contextlib.nullcontext()
    return watching(lambda: not ctx.stop_event.is_set() and ctx.converged(), lambda: ctx.stop(StopReason.CONVERGED),
                    every_s=CONVERGENCE_POLL_S, name="remat-convergence")
