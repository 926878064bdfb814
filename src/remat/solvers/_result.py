"""A strategy's answer after simulation, which writes its remat.result/v1 (a ResultDocument)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remat.schedules import Graph, Plan, Schedule, Simulation, Transfer

from ._context import relative_gap
from ._document import ResultDocument, ResultStatus

__all__ = ["Result"]


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

    def document(self, *, log_tail: int = 50, full_schedule: bool = False) -> ResultDocument:
        """The remat.result/v1 of this outcome; its schedule in the compact form (which grows with the plan), or
        with ``full_schedule`` every stage's whole retained set (stages x nodes entries at worst)."""
        g = self.graph
        return ResultDocument(
            graph_name=g.name,
            graph_sha256=g.sha256,
            strategy=self.strategy,
            backend=self.backend,
            status=self.status,
            budget=self.budget,
            peak_memory=self.peak_memory,
            cost=self.cost,
            base_cost=g.base_cost,
            overhead=self.overhead,
            lower_bound=self.lower_bound,
            gap=self.gap,
            host_peak_memory=self.host_peak_memory,
            host_budget=self.host_budget,
            transfer=self.transfer,
            min_feasible_budget=g.min_feasible_budget,
            smallest_peak=self.smallest_peak,
            checkpoint_all_peak=g.checkpoint_all_peak,
            solve_time_s=round(self.solve_time_s, 4),
            schedule=self.schedule.to_json(g, full=full_schedule) if self.schedule is not None else None,
            plan=self.plan.to_json(g) if self.plan is not None else None,
            fallback=self.fallback,
            log=tuple(self.log[-log_tail:]),
        )

    def to_json(self, *, log_tail: int = 50, full_schedule: bool = False) -> dict[str, Any]:
        """The remat.result/v1 dict: :meth:`document`'s JSON."""
        return self.document(log_tail=log_tail, full_schedule=full_schedule).to_json()
