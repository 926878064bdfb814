"""The ``checkmate-lp`` strategy: the LP relaxation of the Checkmate MILP and two-phase rounding.

Phase one rounds the fractional retention matrix S* of the LP optimum: a deterministic sweep of
thresholds (S = S* >= theta for every distinct value theta of S*, thinned to at most
:data:`MAX_THRESHOLDS`) and randomized rounding (each S[t, i] kept with probability S*[t, i]).
Phase two completes each candidate with R = the minimal recomputation closure of S. Every candidate
is simulated and the cheapest that fits the budget is returned; the best baseline (run first, so
that there is a plan while the LP solves) is returned instead when it is cheaper or when no rounding
fits. The LP optimum is a proved lower bound on the
cost of every schedule of Checkmate's form and is reported as such.

References
----------
P. Jain et al., "Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization",
MLSys 2020, section 5 (approximation via LP rounding).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from remat.schedules import (
    Graph,
    Schedule,
    Simulation,
    recompute_closure,
    simulate_schedule,
)

from .._context import Outcome, SolveContext
from .._options import Option
from ..backends import BackendResult, EngineStatus, choose_backend, run_backend
from ..baselines import best_baseline
from ._milp import engine_limits
from ._model import CheckmateModel, build_checkmate_model

__all__ = ["DEFAULT_ROUNDS", "MAX_ROUNDS", "MAX_THRESHOLDS", "OPTIONS", "checkmate_lp",
           "rounding_candidates"]

DEFAULT_ROUNDS = 64
"""Randomized roundings tried by default. (docs/tuning.md)"""

MAX_THRESHOLDS = 64
"""Most thresholds the deterministic sweep tries. (docs/tuning.md)"""

BUDGET_FACTORS = (1.0, 0.9, 0.8, 0.7)
"""Shares of the activation budget the LP is solved at, in turn, until a rounding fits the real budget.
(docs/tuning.md)"""

MAX_ROUNDS = 100_000
"""Most randomized roundings a request may ask for (each is simulated; the time limit stops them anyway)."""

OPTIONS: Mapping[str, Option] = {
    "rounds": Option.whole(f"randomized roundings to try (default {DEFAULT_ROUNDS})", most=MAX_ROUNDS),
    "seed": Option.whole("seed of the randomized rounding (default 0), so a solve can be repeated exactly",
                         most=2**63 - 1),
}
"""The options the checkmate-lp strategy reads from ``ctx.limits.options``: what each does and accepts."""


def checkmate_lp(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """Solve the LP relaxation, round its S in two phases, return the cheapest rounding that fits.

    The LP at the full budget gives the lower bound. Its roundings often overshoot the budget (the
    LP spreads memory fractionally), so while none fits, the LP is solved again with the memory
    available to activations scaled by each of :data:`BUDGET_FACTORS` and rounded again, as the
    Checkmate authors did with a fixed 0.9.
    """
    rounds, seed = _read_options(ctx.limits.options)
    warm = best_baseline(graph, budget, ctx)
    outcome = Outcome(None)
    best: tuple[Schedule, Simulation] | None = None
    for factor in BUDGET_FACTORS:
        lp_budget = graph.fixed_memory + int(factor * (budget - graph.fixed_memory))
        if best is not None or ctx.stopped() or lp_budget < graph.min_feasible_budget:
            break
        model = build_checkmate_model(graph, lp_budget, ctx.stopped)
        if model is None:
            break
        result = _solve_relaxation(model, ctx, outcome)
        if result.status is EngineStatus.INFEASIBLE and factor == 1.0 and model.memory.exact:
            outcome.infeasible = True
            outcome.log.append("the LP relaxation is infeasible: no schedule of this form fits the budget")
        if result.status is not EngineStatus.OPTIMAL or result.watched is None or result.objective is None:
            outcome.log.append(f"the LP relaxation at {factor:g} of the budget was not solved ({result.status.value})")
            break
        if factor == 1.0 and model.memory.exact:
            outcome.lower_bound = model.real_cost(result.objective)
            ctx.report(lower_bound=outcome.lower_bound, message="LP relaxation solved")
        fractional = np.clip(model.retention_values(result.watched), 0.0, 1.0)
        best = _best_rounding(graph, budget, fractional, rounds, seed, ctx)
        if best is not None:
            outcome.schedule = best[0]
            ctx.report(incumbent_cost=best[1].cost, lower_bound=outcome.lower_bound,
                       message=f"a rounding fits (LP at {factor:g} of the budget)")
    if warm is not None and (best is None or warm.cost < best[1].cost):
        return warm.as_fallback(outcome)
    return outcome


def _solve_relaxation(model: CheckmateModel, ctx: SolveContext, outcome: Outcome) -> BackendResult:
    relaxation = model.milp.relaxed()
    backend = choose_backend(ctx.limits.backend, relaxation)
    ctx.report(message=f"{relaxation.describe()}; backend {backend.name}")
    result = run_backend(backend, relaxation, engine_limits(ctx), lambda progress: None)
    outcome.backend = backend.name
    outcome.log.extend(result.log[-5:])
    return result


def rounding_candidates(fractional: np.ndarray, *, rounds: int, seed: int) -> Iterator[np.ndarray]:
    """Boolean S matrices from a fractional one: the threshold sweep, then ``rounds`` randomized roundings."""
    values = np.unique(fractional[fractional > 1e-6])
    if values.size > MAX_THRESHOLDS:
        values = values[np.linspace(0, values.size - 1, MAX_THRESHOLDS).round().astype(int)]
    for theta in values[::-1]:
        yield fractional >= theta - 1e-9
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        yield rng.random(fractional.shape) < fractional


def _best_rounding(graph: Graph, budget: int, fractional: np.ndarray, rounds: int, seed: int,
                   ctx: SolveContext) -> tuple[Schedule, Simulation] | None:
    """The cheapest candidate that fits ``budget``, each completed by the closure and simulated."""
    best: tuple[Schedule, Simulation] | None = None
    seen: set[bytes] = set()
    for S in rounding_candidates(fractional, rounds=rounds, seed=seed):
        if ctx.stopped():
            break
        key = np.packbits(S).tobytes()
        if key in seen:
            continue
        seen.add(key)
        schedule = Schedule(recompute_closure(graph, S), S)
        simulation = simulate_schedule(graph, schedule)
        if simulation.peak_memory <= budget and (best is None or simulation.cost < best[1].cost):
            best = (schedule, simulation)
    return best


def _read_options(options: Mapping[str, Any]) -> tuple[int, int]:
    """Rounds and seed, from options solve() has checked against :data:`OPTIONS`."""
    return int(options.get("rounds", DEFAULT_ROUNDS)), int(options.get("seed", 0))
