"""Searching a heuristic's knob for the cheapest plan that fits the budget.

A knob (Chen-greedy's segment budget, revolve's snapshot count, offload-window's window) maps each of
its values to a schedule, or to a plan with transfers. A schedule is judged by the peak and cost the
simulator would give its plan (:func:`remat.schedules.plan_peak_and_cost`, without making the plan), a
plan with transfers by simulating it with the context's transfer parameters. The cheapest plan that
fits the budget, and the host budget when one is given, wins; when none fits, the one that overshoots
them by the fewest bytes does, and solve() simulates it and reports it as over budget.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from remat.schedules import Graph, Plan, Schedule, plan_peak_and_cost, simulate

from .._context import Outcome, SolveContext

__all__ = ["EXHAUSTIVE_LIMIT", "TRIAL_LIMIT", "KnobValue", "search_knob"]

EXHAUSTIVE_LIMIT = 24
"""Up to this many distinct candidates are all tried; beyond it the search samples and zooms. (docs/tuning.md)"""

TRIAL_LIMIT = 2 * EXHAUSTIVE_LIMIT
"""No search tries more candidates than this. (docs/tuning.md)"""

KnobValue = Any


@dataclass(frozen=True)
class _Trial:
    position: int
    value: KnobValue
    peak: int
    host_peak: int
    cost: float

    def excess(self, budget: int, host_budget: int | None) -> int:
        """Bytes over the budget plus bytes over the host budget (0 when the plan fits both)."""
        over_host = 0 if host_budget is None else max(0, self.host_peak - host_budget)
        return max(0, self.peak - budget) + over_host

    def key(self, budget: int, host_budget: int | None) -> tuple[bool, float, float, int]:
        """Sort key: fitting first, then the cheaper (fitting) or the fewer bytes over (not fitting), then
        the earlier along the knob."""
        excess = self.excess(budget, host_budget)
        fits = excess == 0
        return (not fits, self.cost if fits else excess, self.peak if fits else self.cost, self.position)


def search_knob(
    graph: Graph,
    budget: int,
    ctx: SolveContext,
    *,
    knob: str,
    values: Sequence[KnobValue],
    build: Callable[[KnobValue], Schedule | Plan | None],
    key: Callable[[KnobValue], Hashable] | None = None,
) -> Outcome:
    """The best schedule or plan over ``values`` (ordered along the knob), each candidate tried judged by
    its plan's peak and cost.

    ``key`` maps a knob value to what determines its schedule, so equal neighbours are tried once.
    ``build`` may give None when the solve was stopped while it built the candidate (not the first), which is
    then not tried.
    Up to :data:`EXHAUSTIVE_LIMIT` distinct candidates are all tried; otherwise an evenly spread
    sample is tried, then the search bisects the gaps on both sides of the best candidate until
    its neighbours are adjacent or :data:`TRIAL_LIMIT` candidates were tried (with cost and peak
    monotone along the knob, as for revolve, that finds the fit boundary exactly).
    ``ctx.limits.options[knob]``, when given (solve() has checked it against the strategy's declaration), pins
    the knob to that one value instead.
    """
    if knob in ctx.limits.options:
        values = [ctx.limits.options[knob]]
    transfer, host_budget = ctx.offload.transfer, ctx.offload.host_budget
    distinct = _distinct(values, key)
    trials: dict[int, _Trial] = {}
    kept: list[Schedule | Plan] = []  # the best trial's alone: a schedule can hold O(n^2) computes

    def attempt(position: int) -> bool:
        """Try the candidate at ``position`` (once); False when the solve was stopped while it was built (then,
        but for the first candidate, it is not simulated either)."""
        if position not in trials:
            value = distinct[position]
            found = build(value)
            if found is None or (trials and ctx.stopped()):
                return False
            if isinstance(found, Schedule):
                peak, cost = plan_peak_and_cost(graph, found)
                host_peak = 0
            else:
                sim = simulate(graph, found, transfer=transfer)
                peak, host_peak, cost = sim.peak_memory, sim.host_peak_memory, sim.cost
            trial = trials[position] = _Trial(position, value, peak, host_peak, cost)
            if best() is trial:
                kept[:] = [found]
        return True

    def best() -> _Trial:
        return min(trials.values(), key=lambda t: t.key(budget, host_budget))

    sample = _spread(len(distinct), EXHAUSTIVE_LIMIT)
    for position in sample:
        if (trials and ctx.stopped()) or not attempt(position):
            break
    while len(trials) < TRIAL_LIMIT and not ctx.stopped():
        pivot = best().position
        tried = sorted(trials)
        at = tried.index(pivot)
        left = tried[at - 1] if at else -1
        right = tried[at + 1] if at + 1 < len(tried) else len(distinct)
        if right - pivot > 1:
            position = (pivot + right) // 2
        elif pivot - left > 1:
            position = (left + pivot + 1) // 2
        else:
            break
        if not attempt(position):
            break
    chosen = best()
    fits = chosen.excess(budget, host_budget) == 0
    host = f", host {chosen.host_peak} (host budget {host_budget})" if host_budget is not None else ""
    message = (f"{knob}={chosen.value}: peak {chosen.peak}, cost {chosen.cost:g}{host}, "
               f"{'fits' if fits else 'does not fit'} budget {budget} "
               f"({len(trials)} of {len(distinct)} distinct {knob} values tried)")
    ctx.report(incumbent_cost=chosen.cost if fits else None, message=message)
    found = kept[0]
    return Outcome(found) if isinstance(found, Schedule) else Outcome(None, plan=found)


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
