"""The largest batch whose training step fits a device, at a bounded cost.

Checkmate's Figure 6 question: how large a batch does a strategy fit in a device's memory when a
step may cost at most one extra forward pass? The step's memory grows with the batch, so the
answer is found by bisection over the batch, each step a solve whose plan is simulated; a batch
counts when its plan fits the budget and costs no more than the cap. The search assumes a strategy
that fits a batch fits every smaller one; the batch it returns has been solved and simulated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from remat.schedules import BatchedGraph, Graph, InvalidRequest

from ._result import Result
from ._solve import solve

__all__ = ["BatchTrial", "MaxBatch", "max_batch"]

MAX_BATCH = 2**31
"""The search never looks beyond this batch."""


@dataclass(frozen=True)
class BatchTrial:
    """One batch tried: whether its plan fit the budget within the cost cap."""

    batch: int
    status: str
    overhead: float | None
    max_overhead: float
    ok: bool


@dataclass
class MaxBatch:
    """The largest batch ``strategy`` fits (0 when not even batch 1 does), with its result and every trial."""

    strategy: str
    budget: int
    batch: int
    result: Result | None
    trials: list[BatchTrial] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The answer as JSON: the batch, its plan's numbers, and the batches tried."""
        r = self.result
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "batch": self.batch,
            "overhead": r.overhead if r else None,
            "peak_memory": r.peak_memory if r else None,
            "result": r.to_json() if r else None,
            "trials": [vars(t) for t in self.trials],
        }


def max_batch(
    batched: BatchedGraph,
    budget: int,
    *,
    strategy: str = "checkmate",
    max_overhead: float | None = None,
    on_trial: Callable[[BatchTrial], None] | None = None,
    **solve_options: Any,
) -> MaxBatch:
    """The largest batch whose step, planned by ``strategy``, fits ``budget`` bytes (fixed memory included).

    A plan may cost at most ``max_overhead`` times the step's base cost; by default, one extra
    forward pass (the base cost plus the forward nodes' cost, at each batch). ``solve_options`` go
    to :func:`solve` for every trial (``time_limit_s``, ``backend``, ``convergence``, ...).
    """
    if max_overhead is not None and not max_overhead >= 1:
        raise InvalidRequest(f"'max_overhead' must be >= 1 (cost over base cost), got {max_overhead!r}.",
                             field="max_overhead")
    answer = MaxBatch(strategy, budget, 0, None)

    def fits(batch: int) -> bool:
        graph = batched.at(batch)
        cap = max_overhead if max_overhead is not None else _one_extra_forward(graph)
        result = solve(graph, budget=budget, strategy=strategy, **solve_options)
        ok = result.fits and result.overhead is not None and result.overhead <= cap * (1 + 1e-9)
        trial = BatchTrial(batch, result.status.value, result.overhead, cap, ok)
        answer.trials.append(trial)
        if on_trial:
            on_trial(trial)
        if ok and batch > answer.batch:
            answer.batch, answer.result = batch, result
        return ok

    ceiling = _largest(lambda b: batched.at(b).min_feasible_budget <= budget, 1, MAX_BATCH)
    if ceiling == 0:
        return answer
    start = max(1, _largest(lambda b: batched.at(b).checkpoint_all_peak <= budget, 1, ceiling))
    if fits(start):
        _largest(fits, start + 1, ceiling)
    else:
        _largest(fits, 1, start - 1)
    return answer


def _one_extra_forward(graph: Graph) -> float:
    """The cost cap of Checkmate's Figure 6, as a ratio: (base cost + the forward nodes' cost) / base cost."""
    if graph.base_cost == 0:
        return 1.0
    forward = float(graph.cost[list(graph.forward_nodes)].sum())
    return (graph.base_cost + forward) / graph.base_cost


def _largest(ok: Callable[[int], bool], low: int, high: int) -> int:
    """The largest b in [low, high] with ``ok(b)`` (``low - 1`` if none), for an ``ok`` true up to some b only."""
    while low <= high:
        mid = (low + high) // 2
        if ok(mid):
            low = mid + 1
        else:
            high = mid - 1
    return high
