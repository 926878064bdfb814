"""remat.result/v1: a strategy's answer after simulation."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from remat.schedules import Graph, Plan, Schedule, Simulation, Transfer

from ._context import relative_gap

__all__ = ["FITTING_STATUSES", "RESULT_FORMAT", "Result", "ResultStatus"]

RESULT_FORMAT: Final = "remat.result/v1"


class ResultStatus(StrEnum):
    """How a solve ended; the values are the wire strings of docs/results.md."""

    OPTIMAL = "optimal"
    """The plan fits and is proved optimal within the requested gap."""
    FEASIBLE = "feasible"
    """The plan fits; optimality is not proved."""
    OVER_BUDGET = "over_budget"
    """A heuristic's best plan does not fit the budget; plan and peak are still given."""
    INFEASIBLE = "infeasible"
    """Proved: no plan fits the budget."""
    TIMEOUT = "timeout"
    """Nothing was found in time and no fallback applied."""
    CANCELLED = "cancelled"
    """Stopped on request; the best plan found so far, if any, is given."""
    ERROR = "error"
    """The solver failed; ``log`` says why."""


FITTING_STATUSES = (ResultStatus.OPTIMAL, ResultStatus.FEASIBLE)
"""The statuses of a result whose plan fits the budget (compare wire strings with ``in``)."""


@dataclass
class Result:
    """The simulated outcome of one solve. ``cost`` and ``peak_memory`` come from the simulator."""

    graph: Graph
    strategy: str
    backend: str | None
    status: ResultStatus
    budget: int
    solve_time_s: float
    schedule: Schedule | None = None
    plan: Plan | None = None
    simulation: Simulation | None = None
    lower_bound: float | None = None
    fallback: str | None = None
    log: list[str] = field(default_factory=list)
    transfer: Transfer | None = None
    """The copy times the plan was simulated with, when the request gave them."""
    host_budget: int | None = None
    smallest_peak: int | None = None
    """When no plan fits: the lowest peak of a plan the strategy reached (simulated), a budget that has a plan."""

    @property
    def cost(self) -> float | None:
        return self.simulation.cost if self.simulation else None

    @property
    def peak_memory(self) -> int | None:
        return self.simulation.peak_memory if self.simulation else None

    @property
    def overhead(self) -> float | None:
        if self.simulation is None or self.graph.base_cost == 0:
            return None
        return self.simulation.cost / self.graph.base_cost

    @property
    def gap(self) -> float | None:
        """(cost - lower bound) / cost, when both are known."""
        return relative_gap(self.cost, self.lower_bound)

    @property
    def host_peak_memory(self) -> int | None:
        """Bytes of host memory the plan's copies hold at most (0 for a plan without transfers)."""
        return self.simulation.host_peak_memory if self.simulation else None

    @property
    def fits(self) -> bool:
        """Whether the plan's device peak fits the budget, and its host memory the host budget if one was given."""
        return self.simulation is not None and self.simulation.fits(self.budget, self.host_budget)

    def to_json(self, *, log_tail: int = 50, full_schedule: bool = False) -> dict[str, Any]:
        """The remat.result/v1 document; its schedule in the compact form (which grows with the plan), or with
        ``full_schedule`` every stage's whole retained set (stages x nodes entries at worst)."""
        g = self.graph
        return {
            "format": RESULT_FORMAT,
            "graph_name": g.name,
            "graph_sha256": g.sha256,
            "strategy": self.strategy,
            "backend": self.backend,
            "status": self.status.value,
            "budget": self.budget,
            "peak_memory": self.peak_memory,
            "cost": self.cost,
            "base_cost": g.base_cost,
            "overhead": self.overhead,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "host_peak_memory": self.host_peak_memory,
            "host_budget": self.host_budget,
            "transfer": None if self.transfer is None else self.transfer.to_json(),
            "min_feasible_budget": g.min_feasible_budget,
            "smallest_peak": self.smallest_peak,
            "checkpoint_all_peak": g.checkpoint_all_peak,
            "solve_time_s": round(self.solve_time_s, 4),
            "schedule": self.schedule.to_json(g, full=full_schedule) if self.schedule is not None else None,
            "plan": self.plan.to_json(g) if self.plan is not None else None,
            "fallback": self.fallback,
            "log": self.log[-log_tail:],
        }
