"""Bringing a plan's peak down to a budget by moving idle values to the host (:func:`offload_to_fit`).

A plan that recomputes little needs more memory than a budget allows; moving to host memory the
values it holds without reading them over the peak lowers that peak, and costs nothing where the copies
hide behind computes. The search is greedy: simulate, find the compute at the peak, and move values
idle across it to the host (or, for one moved already, reload it after the peak rather than before)
until the bytes moved cover the excess; repeat until the peak fits. It prefers, in order, values whose
offload can end before the peak (enough computes between its last read and the peak), the least copy
time left exposed (the reload goes as far ahead of the next read as its copy lasts, but after the
peak), then the largest. Once it fits, unless every copy hides, each move, latest first, is undone
where the plan still fits and costs no more without it, then each reload is tried at every other place
in its gap, nearest first, and kept where the plan fits and costs less. Every step is judged by the
simulator alone.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate

from remat.schedules import Graph, Plan, Simulation, Transfer, simulate

from ._insert import Computes, IdleInterval, idle_intervals, insert_transfers

__all__ = ["REFINE_TRIALS", "offload_to_fit"]

REFINE_TRIALS = 200
"""Most simulations spent improving a plan that fits (when some copy shows): undoing moves, then moving reloads.
(docs/tuning.md)"""


def offload_to_fit(graph: Graph, plan: Plan, budget: int, transfer: Transfer, *, host_budget: int | None = None,
                   stopped: Callable[[], bool] = lambda: False) -> tuple[Plan, Simulation] | None:
    """``plan`` (without transfers) with idle values moved to the host until its simulated peak fits ``budget``.

    Returns the plan and its simulation, or None when no more moves are possible (every value idle
    over the peak is moved, or the host budget is spent) or ``stopped()`` became true.

    Examples
    --------
    >>> from remat.schedules import Graph, Transfer, checkpoint_all_plan
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 1},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 2},
    ...     {"id": "d", "deps": ["c"], "cost": 1, "memory": 1},
    ...     {"id": "e", "deps": ["d", "a"], "cost": 1, "memory": 1}]})
    >>> simulate(g, checkpoint_all_plan(g)).peak_memory        # a, b and c at c's compute
    7
    >>> plan, sim = offload_to_fit(g, checkpoint_all_plan(g), 6, Transfer(bandwidth=8))
    >>> " ".join(f"{op}:{g.ids[v]}" for op, v in plan.steps)
    'compute:a compute:b offload:a compute:c free:b compute:d free:c reload:a compute:e free:a free:d free:e'
    >>> sim.peak_memory, sim.cost   # no room for a before d ends: e waits for half of a's copy
    (6, 5.5)
    """
    squeeze = _Squeeze(graph, plan, transfer)
    moves: dict[IdleInterval, int] = {}
    room = host_budget
    current, simulation = plan, simulate(graph, plan, transfer=transfer)
    while simulation.peak_memory > budget:
        if stopped():
            return None
        excess = simulation.peak_memory - budget
        chosen = 0
        for interval, reload_step in squeeze.moves_at(squeeze.peak_compute(current, simulation), moves):
            if chosen >= excess:
                break
            new_node = all(other.node != interval.node for other in moves)
            if room is not None and new_node and interval.bytes > room:
                continue
            if room is not None and new_node:
                room -= interval.bytes
            moves[interval] = reload_step
            chosen += interval.bytes
        if not chosen:
            return None
        current = insert_transfers(plan, moves.items())
        simulation = simulate(graph, current, transfer=transfer)
    if simulation.cost <= squeeze.running[-1]:
        return current, simulation  # every copy hides: no move costs anything
    refine = _Refine(graph, plan, budget, transfer, stopped)
    moves, fitted = refine.prune(moves, (current, simulation))
    return refine.polish(moves, fitted, squeeze)


class _Refine:
    """Changes to the moves of a plan that fits, each kept if the plan still fits and costs less (or, for an
    undone move, no more); at most :data:`REFINE_TRIALS` simulations."""

    def __init__(self, graph: Graph, plan: Plan, budget: int, transfer: Transfer, stopped: Callable[[], bool]) -> None:
        self.graph, self.plan, self.budget, self.transfer, self.stopped = graph, plan, budget, transfer, stopped
        self.trials = 0

    def spent(self) -> bool:
        return self.trials >= REFINE_TRIALS or self.stopped()

    def attempt(self, moves: dict[IdleInterval, int]) -> tuple[Plan, Simulation] | None:
        """The plan with ``moves``, simulated, if it fits."""
        self.trials += 1
        candidate = insert_transfers(self.plan, moves.items())
        simulation = simulate(self.graph, candidate, transfer=self.transfer)
        return (candidate, simulation) if simulation.peak_memory <= self.budget else None

    def prune(self, moves: dict[IdleInterval, int], fitted: tuple[Plan, Simulation]
              ) -> tuple[dict[IdleInterval, int], tuple[Plan, Simulation]]:
        """Undo, latest first, each move the plan does not need (a move made early may have become useless, or a
        later one may do its job)."""
        for interval in reversed(list(moves)):
            if self.spent():
                break
            fewer = {other: step for other, step in moves.items() if other != interval}
            tried = self.attempt(fewer)
            if tried is not None and tried[1].cost <= fitted[1].cost:
                moves, fitted = fewer, tried
        return moves, fitted

    def polish(self, moves: dict[IdleInterval, int], fitted: tuple[Plan, Simulation],
               squeeze: _Squeeze) -> tuple[Plan, Simulation]:
        """Try every other place for each reload, nearest first: one reload issued earlier can stop delaying the
        next one on the reload stream, one issued later can leave room for another."""
        for interval in list(moves):
            after, before = squeeze.position[interval.after], squeeze.position[interval.before]
            now = squeeze.position[moves[interval]]
            for place in sorted(range(after + 1, before + 1), key=lambda p: abs(p - now)):
                if self.spent():
                    return fitted
                if place == squeeze.position[moves[interval]]:
                    continue
                changed = {**moves, interval: squeeze.computes.steps[place]}
                tried = self.attempt(changed)
                if tried is not None and tried[1].cost < fitted[1].cost:
                    moves, fitted = changed, tried
        return fitted


class _Squeeze:
    """The idle intervals of one plan without transfers, and the running cost of its computes."""

    def __init__(self, graph: Graph, plan: Plan, transfer: Transfer) -> None:
        self.graph, self.transfer = graph, transfer
        self.intervals = idle_intervals(graph, plan)
        self.computes = Computes(graph, plan)
        self.position = {step: j for j, step in enumerate(self.computes.steps)}
        costs = graph.cost.tolist()
        self.running = [0.0, *accumulate(costs[plan.steps[k][1]] for k in self.computes.steps)]

    def peak_compute(self, plan: Plan, simulation: Simulation) -> int:
        """The position, among the computes, of the compute at the peak (the next one for a reload's peak).

        Transfers and frees leave the computes and their order as they were, so positions are the
        original plan's.
        """
        return sum(op == "compute" for op, _ in plan.steps[:simulation.peak_step])

    def moves_at(self, peak: int, moves: dict[IdleInterval, int]) -> list[tuple[IdleInterval, int]]:
        """The intervals idle over compute ``peak`` (new ones, or moved ones reloaded before the peak), best
        first, each with the step to reload it before."""
        ranked: list[tuple[tuple[bool, float, int], IdleInterval, int]] = []
        for interval in self.intervals:
            after, before = self.position[interval.after], self.position[interval.before]
            if not after < peak < before or interval.bytes == 0:
                continue
            if interval in moves and self.position[moves[interval]] > peak:
                continue
            copy = self.transfer.duration(interval.bytes)
            reload_at = max(self.position[self.computes.ahead(interval.after, interval.before, copy)], peak + 1)
            exposed = max(0.0, copy - (self.running[before] - self.running[reload_at]))
            late = self.running[peak] - self.running[after + 1] < copy  # the offload may not end before the peak
            ranked.append(((late, exposed, -interval.bytes), interval, self.computes.steps[reload_at]))
        ranked.sort(key=lambda entry: entry[0])
        return [(interval, step) for _, interval, step in ranked]
