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

__all__ = ["BatchSearch", "BatchTrial", "MaxBatch", "cost_cap", "max_batch"]

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

    @classmethod
    def judged(cls, batch: int, *, status: str, overhead: float | None, fits: bool, max_overhead: float) -> BatchTrial:
        """The trial of a plan with ``overhead`` that ``fits`` (or not) the budget: ok when it fits within the cap."""
        ok = fits and overhead is not None and overhead <= max_overhead * (1 + 1e-9)
        return cls(batch, status, overhead, max_overhead, ok)


@dataclass
class BatchSearch:
    """The search of :func:`max_batch`, one trial at a time: ``next_batch`` names the batch to solve next and
    ``trials`` takes each verdict, so a caller may solve the batches wherever it likes (the service runs
    each as a job).

    It bisects between the largest batch that fit and the smallest that did not, within
    [1, ``ceiling``], starting from ``start``.

    >>> search = BatchSearch(ceiling=10, start=4)
    >>> search.next_batch()
    4
    >>> search.trials.append(BatchTrial(4, "optimal", 1.0, 1.5, True))
    >>> search.next_batch(), search.batch
    (7, 4)
    """

    ceiling: int
    """The largest batch whose smallest feasible budget fits (0: none does); no batch above it is tried."""
    start: int
    """The largest batch checkpoint-all fits (at least 1): the first batch tried."""
    trials: list[BatchTrial] = field(default_factory=list)

    @classmethod
    def over(cls, batched: BatchedGraph, budget: int) -> BatchSearch:
        """The search for ``batched`` on ``budget`` bytes, bounded by the smallest feasible budget of each batch."""
        ceiling = _largest(lambda b: batched.at(b).min_feasible_budget <= budget, 1, MAX_BATCH)
        start = _largest(lambda b: batched.at(b).checkpoint_all_peak <= budget, 1, ceiling)
        return cls(ceiling, max(1, start))

    @property
    def batch(self) -> int:
        """The largest batch that fit so far (0 when none has)."""
        return max((t.batch for t in self.trials if t.ok), default=0)

    def next_batch(self) -> int | None:
        """The batch to try next, or None once the answer is known."""
        low = self.batch + 1
        high = min((t.batch for t in self.trials if not t.ok), default=self.ceiling + 1) - 1
        if low > high:
            return None
        return self.start if not self.trials else (low + high) // 2


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
    search = BatchSearch.over(batched, budget)
    answer = MaxBatch(strategy, budget, 0, None, search.trials)
    while (batch := search.next_batch()) is not None:
        graph = batched.at(batch)
        result = solve(graph, budget=budget, strategy=strategy, **solve_options)
        trial = BatchTrial.judged(batch, status=result.status.value, overhead=result.overhead, fits=result.fits,
                                  max_overhead=cost_cap(graph, max_overhead))
        search.trials.append(trial)
        if on_trial:
            on_trial(trial)
        if trial.ok and batch > answer.batch:
            answer.batch, answer.result = batch, result
    return answer


def cost_cap(graph: Graph, max_overhead: float | None = None) -> float:
    """The largest overhead a plan for ``graph`` may have: ``max_overhead``, or by default the cap of Checkmate's
    Figure 6, one extra forward pass ((base cost + the forward nodes' cost) / base cost)."""
    if max_overhead is not None:
        return max_overhead
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
