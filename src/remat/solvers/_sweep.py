"""Budget sweeps: the (strategy, budget) points that show a graph's memory/overhead trade-off.

A sweep runs every applicable strategy at about a dozen budgets evenly spaced from
``min_feasible_budget`` to the checkpoint-all peak, plus each heuristic's natural point: the peak of
its plan when the budget does not constrain it (Chen's sqrt(n) or Griewank's plan, as single points
in the Checkmate paper's Figure 4). Every strategy runs at every budget, so the results form a grid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from remat.schedules import Graph, InvalidRequest, StrategyNotApplicable, Transfer

from ._registry import STRATEGIES, get_strategy
from ._solve import solve
from ._strategy import StrategyKind

__all__ = ["SWEEP_POINTS", "SweepPlan", "plan_sweep", "sweep_budgets", "sweep_strategies"]

SWEEP_POINTS = 12
"""Evenly spaced budgets in a default sweep (natural points come on top). (docs/tuning.md)"""


@dataclass(frozen=True)
class SweepPlan:
    """The strategies and budgets of a sweep; ``natural`` maps each heuristic to its own peak."""

    strategies: tuple[str, ...]
    budgets: tuple[int, ...]
    natural: Mapping[str, int]

    @property
    def points(self) -> list[tuple[str, int]]:
        """Every (strategy, budget), strategy by strategy, budgets ascending."""
        return [(s, b) for s in self.strategies for b in self.budgets]


def sweep_budgets(graph: Graph, points: int = SWEEP_POINTS) -> list[int]:
    """``points`` budgets from ``min_feasible_budget`` to the checkpoint-all peak, both included, ascending.

    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 10},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 10},
    ...     {"id": "c", "deps": ["a", "b"], "cost": 1, "memory": 10}]})
    >>> sweep_budgets(g, 3)
    [30]
    """
    low, high = graph.min_feasible_budget, graph.checkpoint_all_peak
    steps = max(1, points - 1)
    return sorted({low + round((high - low) * k / steps) for k in range(steps + 1)})


def plan_sweep(graph: Graph, *, strategies: Sequence[str] | None = None, budgets: Sequence[int] | None = None,
               points: int = SWEEP_POINTS, time_limit_s: float = 60.0, transfer: Transfer | None = None) -> SweepPlan:
    """Choose a sweep's strategies and budgets.

    Parameters
    ----------
    strategies : sequence of str, optional
        Default: every registered strategy that applies to the graph. Named strategies must exist
        and apply (UnknownStrategy, StrategyNotApplicable otherwise).
    budgets : sequence of int, optional
        Bytes. Default: ``sweep_budgets(graph, points)`` plus the heuristics' natural points, which
        are found by running each heuristic (a strategy of kind ``baseline``) once, unconstrained.
    time_limit_s : float
        Limit for each of those runs.
    transfer : Transfer, optional
        Copy times to host memory and back; with them the default strategies include those that offload.
    """
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise InvalidRequest(f"A sweep needs at least 2 points (the smallest feasible budget and the "
                             f"checkpoint-all peak), got {points!r}.", field="points")
    names = sweep_strategies(graph, strategies, transfer=transfer)
    natural = _natural_budgets(graph, names, time_limit_s, transfer) if budgets is None else {}
    chosen = sorted(set(sweep_budgets(graph, points)) | set(natural.values())) if budgets is None else budgets
    return SweepPlan(tuple(names), tuple(dict.fromkeys(chosen)), natural)


def sweep_strategies(graph: Graph, strategies: Sequence[str] | None = None, *,
                     transfer: Transfer | None = None) -> list[str]:
    """The strategies of a sweep: those named (each must exist and apply; UnknownStrategy,
    StrategyNotApplicable or, for one that offloads without ``transfer``, InvalidRequest otherwise), or
    every registered strategy that applies to ``graph`` (those that offload only with ``transfer``)."""
    if strategies is not None:
        for name in strategies:
            get_strategy(name).check_transfer(transfer)
            get_strategy(name).check_graph(graph)
        return list(dict.fromkeys(strategies))
    names = []
    for name, strategy in STRATEGIES.items():
        if strategy.offloads and transfer is None:
            continue
        try:
            strategy.check_graph(graph)
        except StrategyNotApplicable:
            continue
        names.append(name)
    return names


def _natural_budgets(graph: Graph, names: Sequence[str], time_limit_s: float,
                     transfer: Transfer | None) -> dict[str, int]:
    natural = {}
    for name in names:
        if get_strategy(name).kind is not StrategyKind.BASELINE:
            continue
        result = solve(graph, budget=graph.checkpoint_all_peak, strategy=name, time_limit_s=time_limit_s,
                       transfer=transfer)
        if result.peak_memory is not None:
            natural[name] = result.peak_memory
    return natural
