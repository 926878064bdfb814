"""A plan known to fit the budget, kept with its simulation: a search's start and a solve's fallback."""

from __future__ import annotations

from dataclasses import dataclass

from remat.schedules import Schedule, Simulation

from ._context import Outcome

__all__ = ["WarmStart"]


@dataclass(frozen=True)
class WarmStart:
    """A schedule that fits the budget, its simulation, and ``source``: the strategy or path that found it."""

    source: str
    schedule: Schedule
    simulation: Simulation

    @property
    def cost(self) -> float:
        return self.simulation.cost

    def as_fallback(self, outcome: Outcome) -> Outcome:
        """``outcome`` (a solver's bound, backend and log) with this plan as the answer."""
        return Outcome(self.schedule, lower_bound=outcome.lower_bound, backend=outcome.backend, fallback=self.source,
                       log=[*outcome.log, f"returning the best baseline, {self.source} (cost {self.cost:g})"])
