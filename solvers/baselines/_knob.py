"""Searching a heuristic's knob for the cheapest plan that fits the budget.

A knob (Chen-greedy's segment budget, revolve's snapshot count) maps each of its values to a
schedule. Each candidate is judged by simulating its plan. The cheapest plan that fits wins; when
none fits, the lowest peak does, and solve() reports it as over budget.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from remat.schedules import Graph, Schedule, simulate_schedule, whole_number

from .._context import Outcome, SolveContext

__all__ = ["EXHAUSTIVE_LIMIT", "TRIAL_LIMIT", "KnobValue", "search_knob", "whole_option"]

EXHAUSTIVE_LIMIT = 24
"""Up to this many distinct candidates are all simulated; beyond it the search samples and zooms."""

TRIAL_LIMIT = 2 * EXHAUSTIVE_LIMIT
"""No search simulates more candidates than this."""

KnobValue = Any


@dataclass(frozen=True)
class _Trial:
    position: int
    value: KnobValue
    schedule: Schedule
    peak: int
    cost: float

    def rank(self, budget: int) -> tuple[bool, float, float]:
        """Sort key: fitting first, then the cheaper (fitting) or the lower peak (not fitting)."""
        fits = self.peak <= budget
        return (not fits, self.cost if fits else self.peak, self.peak if fits else self.cost)


def search_knob(
    graph: Graph,
    budget: int,
    ctx: SolveContext,
    *,
    knob: str,
    values: Sequence[KnobValue],
    build: Callable[[KnobValue], Schedule],
    key: Callable[[KnobValue], Hashable] | None = None,
    parse: Callable[[Any], KnobValue] | None = None,
) -> Outcome:
    """The best schedule over ``values`` (ordered along the knob), simulating each candidate tried.

    ``key`` maps a knob value to what determines its schedule, so equal neighbours are tried once.
    Up to :data:`EXHAUSTIVE_LIMIT` distinct candidates are all tried; otherwise an evenly spread
    sample is tried, then the search bisects the gaps on both sides of the best candidate until
    its neighbours are adjacent or :data:`TRIAL_LIMIT` candidates were tried (with cost and peak
    monotone along the knob, as for revolve, that finds the fit boundary exactly).
    ``ctx.options[knob]``, when given and ``parse`` accepts it, pins the knob to one value instead.
    """
    if knob in ctx.options and parse is not None:
        values = [parse(ctx.options[knob])]
    distinct = _distinct(values, key)
    trials: dict[int, _Trial] = {}

    def attempt(position: int) -> None:
        if position not in trials:
            value = distinct[position]
            schedule = build(value)
            sim = simulate_schedule(graph, schedule)
            trials[position] = _Trial(position, value, schedule, sim.peak_memory, sim.cost)

    def best() -> _Trial:
        return min(trials.values(), key=lambda t: (*t.rank(budget), t.position))

    sample = _spread(len(distinct), EXHAUSTIVE_LIMIT)
    for position in sample:
        if trials and ctx.stopped():
            break
        attempt(position)
    while len(trials) < TRIAL_LIMIT and not ctx.stopped():
        pivot = best().position
        tried = sorted(trials)
        at = tried.index(pivot)
        left = tried[at - 1] if at else -1
        right = tried[at + 1] if at + 1 < len(tried) else len(distinct)
        if right - pivot > 1:
            attempt((pivot + right) // 2)
        elif pivot - left > 1:
            attempt((left + pivot + 1) // 2)
        else:
            break
    chosen = best()
    fits = "fits" if chosen.peak <= budget else "does not fit"
    message = (f"{knob}={chosen.value}: peak {chosen.peak}, cost {chosen.cost:g}, {fits} budget {budget} "
               f"({len(trials)} of {len(distinct)} distinct {knob} values simulated)")
    ctx.report(incumbent_cost=chosen.cost if chosen.peak <= budget else None, message=message)
    return Outcome(chosen.schedule)


def whole_option(knob: str) -> Callable[[Any], int]:
    """A parser for a knob given in ``options``: a whole number >= 0."""

    return lambda value: whole_number(value, what=f"Option {knob!r}", field="options")


def _distinct(values: Sequence[KnobValue], key: Callable[[KnobValue], Hashable] | None) -> list[KnobValue]:
    """``values`` with each run of neighbours that share a key reduced to its first member."""
    out: list[KnobValue] = []
    previous: Hashable = object()
    for value in values:
        k = key(value) if key is not None else value
        if k != previous:
            out.append(value)
            previous = k
    return out


def _spread(count: int, limit: int) -> list[int]:
    """All positions when ``count <= limit``, else ``limit`` positions spread evenly, ends included."""
    if count <= limit:
        return list(range(count))
    return sorted({round(i * (count - 1) / (limit - 1)) for i in range(limit)})
