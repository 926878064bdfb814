"""The ``checkmate`` strategy: optimal rematerialization, with the baselines as start and fallback.

A solve runs in three steps:

1. the baselines run (:func:`best_baseline`); the cheapest plan that fits is the first incumbent;
2. one *solution path* searches for a better plan, starting from that incumbent, and proves what
   it can (a lower bound, optimality, infeasibility);
3. the cheaper of the path's plan and the baseline is returned; when it is the baseline, the
   outcome's ``fallback`` names it.

Paths live in :data:`PATHS`, in order of preference. The ``path`` option forces one; otherwise
the first path whose ``fits(graph)`` is true is taken: ``anneal`` above :data:`MILP_NODES` nodes,
``anneal-milp`` up to it, so the full MILP alone (``milp``) runs only when forced. A path's
``run(graph, budget, ctx, warm)`` receives the best baseline (or None) to start from, must stop
when ``ctx.stopped()``, reports progress through ``ctx.report``, and returns an Outcome whose
``optimal``, ``infeasible`` and ``lower_bound`` are proofs, never guesses. A path with
``baselines_first=False`` (``anneal``) skips step 1 and runs the baselines itself, in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remat.schedules import Graph, StrategyNotApplicable, simulate_schedule

from .._context import Outcome, SolveContext
from .._options import Option
from .._warm import WarmStart
from ..baselines import best_baseline
from ._anneal import anneal_path
from ._anneal_milp import MILP_NODES, anneal_then_milp
from ._milp import solve_milp
from ._model import MODEL_NODES

__all__ = ["OPTIONS", "PATHS", "SolutionPath", "check_path", "checkmate"]


@dataclass(frozen=True)
class SolutionPath:
    """One way of solving the checkmate problem; ``fits`` says whether ``auto`` picks it for a graph."""

    name: str
    summary: str
    run: Callable[[Graph, int, SolveContext, WarmStart | None], Outcome]
    fits: Callable[[Graph], bool] = lambda graph: True
    baselines_first: bool = True
    """False for a path that runs the baselines itself, alongside its search (so that they do not
    delay its first plan), and never returns a plan worse than theirs; it then gets no warm start."""
    whole_model: bool = False
    """True for a path that builds the whole MILP, so that forcing it on a graph over :data:`MODEL_NODES` nodes
    is refused."""


PATHS: dict[str, SolutionPath] = {
    p.name: p
    for p in (
        SolutionPath("anneal", "Annealing chains raced with the baselines and a lower bound (graphs over "
                     f"{MILP_NODES} nodes).", anneal_path, fits=lambda graph: graph.size > MILP_NODES,
                     baselines_first=False),
        SolutionPath("anneal-milp", "A short anneal from the best baseline, then the full MILP warm-started "
                     "from it.", anneal_then_milp, fits=lambda graph: graph.size <= MILP_NODES, whole_model=True),
        SolutionPath("milp", "The full MILP of the Checkmate paper (R, S, U, Free) on a MILP engine.", solve_milp,
                     whole_model=True),
    )
}

OPTIONS: Mapping[str, Option] = {
    "path": Option.choice("force a solution path (default: the first that fits the graph)", tuple(PATHS)),
    "warm_start": Option.flag("true (default) to start from the best baseline, false to start from nothing"),
}
"""The options the checkmate strategy reads from ``ctx.limits.options``: what each does and accepts."""


def checkmate(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """Solve to optimality (or as far as the time limit allows), never returning worse than the best baseline."""
    path, warm_start = _read_options(ctx.limits.options, graph)
    warm = best_baseline(graph, budget, ctx) if path.baselines_first else None
    outcome = Outcome(None)
    if not ctx.stopped():
        outcome = path.run(graph, budget, ctx, warm if warm_start else None)
    return _better(graph, budget, ctx, outcome, warm)


def _read_options(options: Mapping[str, Any], graph: Graph) -> tuple[SolutionPath, bool]:
    """The solution path and whether to warm-start, from options solve() has checked against :data:`OPTIONS`.

    Raises StrategyNotApplicable as :func:`check_path` does.
    """
    check_path(graph, options)
    name = options.get("path")
    path = PATHS[name] if name is not None else next(p for p in PATHS.values() if p.fits(graph))
    return path, options.get("warm_start", True) is True


def check_path(graph: Graph, options: Mapping[str, Any]) -> None:
    """Raise StrategyNotApplicable (``field`` ``options``) when ``options`` force a path that builds the whole MILP
    on a graph over :data:`MODEL_NODES` nodes (the paths picked by default build it only up to :data:`MILP_NODES`)."""
    path = PATHS.get(str(options.get("path")))
    if path is not None and path.whole_model and graph.size > MODEL_NODES:
        raise StrategyNotApplicable(
            f"Path {path.name!r} builds the whole MILP, which takes graphs of at most {MODEL_NODES:,} nodes (it has a "
            f"variable for every pair of nodes); this one has {graph.size:,}. Leave 'path' unset: checkmate's "
            f"'anneal' path takes it.", field="options")


def _better(graph: Graph, budget: int, ctx: SolveContext, outcome: Outcome, warm: WarmStart | None) -> Outcome:
    """The path's outcome when its plan fits and is cheaper than the baseline or proved optimal; else the baseline.

    The baseline then comes back as a fallback, with the path's bound (which may still prove it optimal).
    """
    if warm is None:
        return outcome
    if outcome.schedule is not None:
        simulation = simulate_schedule(graph, outcome.schedule)
        cheaper = simulation.cost < warm.cost * (1 - 1e-12) or (outcome.optimal and simulation.cost <= warm.cost)
        if simulation.peak_memory <= budget and cheaper:
            return outcome
    if outcome.infeasible:
        outcome.log.append(f"the path claimed that nothing fits, but {warm.source} does: check the path")
    fallback = warm.as_fallback(outcome)
    fallback.optimal = ctx.proves(warm.cost, outcome.lower_bound)
    return fallback
