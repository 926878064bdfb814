"""What a strategy is given besides the graph and budget, and what it hands back.

A strategy is a plain function ``run(graph, budget, ctx) -> Outcome``. The context carries the
user's :class:`SolveLimits` (time, gap, threads, backend, strategy options, convergence rule), the
:class:`OffloadSettings` that strategies which offload read, a :class:`Stop` that whoever stops the
solve sets with its reason, a progress sink, and the :class:`SolveRecord` (log and trails) that every
copy made for a part of the solve shares unless it says otherwise. The outcome is the best schedule
found plus what the strategy proved about it; :func:`remat.solvers.solve` turns it into a simulated
result.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from remat.schedules import Plan, Schedule, Transfer

__all__ = [
    "Convergence",
    "DEFAULT_CONVERGENCE",
    "DEFAULT_MIP_GAP",
    "DEFAULT_TIME_LIMIT_S",
    "FINISH_S_PER_NODE",
    "OffloadSettings",
    "Outcome",
    "Progress",
    "SolveContext",
    "SolveLimits",
    "SolveRecord",
    "Stop",
    "StopReason",
    "Throttle",
    "default_threads",
    "relative_gap",
]

DEFAULT_TIME_LIMIT_S = 60.0
"""Seconds a solve may take when the request names no limit. (docs/tuning.md)"""

DEFAULT_MIP_GAP = 1e-4
"""Relative gap at which a MILP solve counts as proved optimal. (docs/tuning.md)"""

REPORT_EVERY_S = 0.5
"""Least seconds between two progress reports of a new best found by a search (the first goes out at once).
(docs/tuning.md)"""

FINISH_S_PER_NODE = 4e-5
"""Seconds per node of the graph that a search leaves before the time limit for what follows it (the
schedule, plan and simulation of the best plan: 2.1 to 2.5 s on the 100,000-node GPT, more on loaded
cores: with 3 s a converged solve returned after 30.3 s). (docs/tuning.md)"""

FLOOR_WINDOWS = 5
"""How many convergence windows the leanest plan's peak must have stopped falling for, while no plan
fits, before a solve stops (10 s by default: a budget below every plan is answered then, not at 60 s).
(docs/tuning.md)"""


def default_threads() -> int:
    """Threads a solve uses when the request names none: every CPU."""
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Progress:
    """A snapshot of a running solve: elapsed seconds, best cost so far, best proved bound, gap, and a note."""

    elapsed_s: float
    incumbent_cost: float | None = None
    lower_bound: float | None = None
    gap: float | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "elapsed_s": round(self.elapsed_s, 3),
            "incumbent_cost": self.incumbent_cost,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "message": self.message,
        }


@dataclass(frozen=True)
class Convergence:
    """When a solve may stop before its time limit: its best cost improved by less than ``tolerance``
    (a fraction of that cost) over the last window, and so did the best of the solve process's own
    search where it reports one (:meth:`SolveContext.report_chain`: a chain still closing in from
    behind a helper's plan is not done); while no plan fits, the peak of the leanest plan its search
    reached improved by less than ``tolerance`` over :attr:`floor_window_s`.

    The window is ``window_s`` while the best plan is within ``gap_per_window`` of the best lower bound
    proved, and one ``window_s`` longer for each further ``gap_per_window`` of gap, up to ``max_windows``
    windows; before any bound is proved it is the longest (:meth:`window_for`): a plan far above what
    is provable is not done because one chain paused, and a tight budget waits for its bound. From
    ``horizon_s`` seconds after the start the window is ``window_s`` whatever the gap: a search that
    keeps improving goes on, one that has stalled answers then.

    An interactive caller would rather have a plan within a fraction of a percent of the last one
    now than wait out the limit for it; a proved optimum stops a solve sooner still. A budget below
    every plan the search can reach is answered once that floor stops falling, with the floor,
    rather than at the limit. Every entry point stops an anytime search (``Strategy.anytime``) by
    this rule unless told otherwise (``convergence=None``: run to the limit).
    The defaults, and how they were set: docs/tuning.md.

    >>> rule = Convergence(window_s=2.0, tolerance=0.01)
    >>> rule.reached([(0.1, 100.0), (1.5, 99.5)], now=3.0)      # 0.5 % better since t = 1.0 s
    True
    >>> rule.reached([(0.1, 100.0), (2.5, 95.0)], now=3.0)      # 5 % better since t = 1.0 s
    False
    >>> rule.window_for(gap=0.04)                               # 4 points above the bound
    8.0
    >>> rule.window_for(gap=0.04, now=19.0)                     # ... past the horizon
    2.0
    """

    window_s: float = 2.0
    tolerance: float = 0.0025
    gap_per_window: float = 0.01
    max_windows: float = 9.0
    horizon_s: float = 18.0

    @property
    def floor_window_s(self) -> float:
        """Seconds over which the leanest plan's peak must have stopped falling, while no plan fits:
        :data:`FLOOR_WINDOWS` windows, since the first plan near the floor can come late."""
        return FLOOR_WINDOWS * self.window_s

    def window_for(self, gap: float | None, now: float = 0.0) -> float:
        """Seconds the best plan must go without improving, at ``gap`` ((cost - bound) / cost; None
        before any bound is proved), ``now`` seconds into the solve."""
        if now >= self.horizon_s:
            return self.window_s
        windows = self.max_windows if gap is None else min(self.max_windows, max(1.0, gap / self.gap_per_window))
        return windows * self.window_s

    def to_json(self) -> dict[str, float]:
        return {"window_s": float(self.window_s), "tolerance": float(self.tolerance),
                "gap_per_window": float(self.gap_per_window), "max_windows": float(self.max_windows),
                "horizon_s": float(self.horizon_s)}

    def reached(self, trail: Sequence[tuple[float, float]], now: float, *, window_s: float | None = None) -> bool:
        """Whether ``trail`` (elapsed seconds, best value at every improvement, in order) has converged at
        ``now``: improved by less than the tolerance over ``window_s`` (the rule's window unless given)."""
        since = now - (self.window_s if window_s is None else window_s)
        if not trail or trail[0][0] > since:
            return False
        then = next(cost for at, cost in reversed(trail) if at <= since)
        best = trail[-1][1]
        return then - best <= self.tolerance * abs(best)


DEFAULT_CONVERGENCE = Convergence()
"""The rule a solve stops by when the caller names none: better by less than 0.25 % in 2 s, and 2 s
more for each point of gap to the bound, up to 18 s; from 18 s after the start, 2 s whatever the gap."""


class StopReason(StrEnum):
    """Why a solve was stopped before its strategy ended; it decides the result's status."""

    CANCEL = "cancel"
    """Someone asked for it: the result is ``cancelled``."""
    DEADLINE = "deadline"
    """A supervisor's time-limit backstop: the result reads as a time-limited end (``feasible`` or ``timeout``)."""
    CONVERGED = "converged"
    """The best plan stopped improving (:class:`Convergence`): the result reads as an ordinary end."""


class Stop(threading.Event):
    """A solve's stop flag that carries why it was set; ``set()`` without a reason is a cancel."""

    def __init__(self) -> None:
        super().__init__()
        self._reason: StopReason | None = None
        self._lock = threading.Lock()

    def request(self, reason: StopReason) -> None:
        """Stop for ``reason``; the first reason given is kept."""
        with self._lock:
            if self._reason is None:
                self._reason = reason
        self.set()

    @property
    def reason(self) -> StopReason | None:
        """Why the flag was set (None while it is not)."""
        return (self._reason or StopReason.CANCEL) if self.is_set() else None


@dataclass(frozen=True)
class SolveLimits:
    """What the caller fixed for a solve: its time limit, gap, threads, backend, strategy options and
    convergence rule; a copy of the context (:meth:`SolveContext.within`) may only shorten the time limit."""

    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    """Seconds from the context's start after which the solve (or the part of it given the context) ends."""
    mip_gap: float = DEFAULT_MIP_GAP
    threads: int = field(default_factory=default_threads)
    backend: str = "auto"
    options: Mapping[str, Any] = field(default_factory=dict)
    convergence: Convergence | None = None


@dataclass(frozen=True)
class OffloadSettings:
    """What only strategies that offload read: how long copies to host memory and back last, and how many
    bytes of host memory a plan's copies may hold."""

    transfer: Transfer | None = None
    """How long copies to host memory and back last; given when the strategy may offload."""
    host_budget: int | None = None
    """Bytes of host memory a plan's copies may hold (None: no cap)."""


@dataclass
class SolveRecord:
    """What a solve noted as it ran: its log, and the trails its convergence rule reads.

    One record is shared by a context and every copy made from it with :meth:`SolveContext.within`,
    :meth:`~SolveContext.reporting_to` or :meth:`~SolveContext.stopped_by` (a line logged or a best
    reported in any of them is the solve's); only :meth:`SolveContext.detached` starts a new one.
    """

    log: list[str] = field(default_factory=list)
    trail: list[tuple[float, float]] = field(default_factory=list)
    """(elapsed seconds, cost) of every new best reported, in order."""
    floor_trail: list[tuple[float, float]] = field(default_factory=list)
    """(elapsed seconds, peak) of every new leanest plan reported while none fits, in order."""
    chain_trail: list[tuple[float, float]] = field(default_factory=list)
    """(elapsed seconds, cost) of every new best of the solve process's own chain, in order: while it
    still improves, the search has not converged, though a better plan from elsewhere hides that from
    :attr:`trail`."""
    bound: float | None = None
    """The best lower bound on cost reported so far."""
    trying: bool = False
    """A plan offered to the solve process's chain waits or is being tried (a relaxation's plan, which may
    beat the best by points): the search has not converged while it is."""

    def gap(self) -> float | None:
        """(best cost - best bound) / best cost, or None while either is unknown."""
        return relative_gap(self.trail[-1][1] if self.trail else None, self.bound)

    def converged(self, rule: Convergence, now: float) -> bool:
        """True when ``rule`` holds at ``now`` for the costs reported and for the solve process's chain, if
        it reports its own, over the window the gap to the bound sets; while no plan has been reported,
        for the leanest plans' peaks; never while a plan is being tried (:attr:`trying`)."""
        if self.trying:
            return False
        if self.trail:
            window_s = rule.window_for(self.gap(), now)
            return rule.reached(self.trail, now, window_s=window_s) \
                and (not self.chain_trail or rule.reached(self.chain_trail, now, window_s=window_s))
        return rule.reached(self.floor_trail, now, window_s=rule.floor_window_s)


@dataclass
class SolveContext:
    """What a strategy is given for one solve: its :class:`SolveLimits`, its :class:`OffloadSettings`, the
    stop flag (set, with its reason, to end it early), the progress sink and the :class:`SolveRecord`.

    A part of a solve gets a copy made by a method that says what the copy shares: :meth:`within` (a
    shorter time), :meth:`reporting_to` (another sink), :meth:`stopped_by` (another stop flag), each
    sharing the rest, or :meth:`detached` (a fresh record and no sink, for work whose findings are
    offered to the solve by its caller).
    """

    limits: SolveLimits = field(default_factory=SolveLimits)
    offload: OffloadSettings = field(default_factory=OffloadSettings)
    stop_event: Stop = field(default_factory=Stop)
    on_progress: Callable[[Progress], None] | None = None
    record: SolveRecord = field(default_factory=SolveRecord)
    started: float = field(default_factory=time.monotonic)
    """When the time limit started counting (time.monotonic); every copy has the same."""

    def within(self, seconds: float) -> SolveContext:
        """A copy that ends ``seconds`` from now, or at this context's limit if sooner; it shares everything
        else: stop flag, progress sink and record."""
        limit = min(self.limits.time_limit_s, self.elapsed_s() + seconds)
        return dataclasses.replace(self, limits=dataclasses.replace(self.limits, time_limit_s=limit))

    def finishing(self, nodes: int) -> SolveContext:
        """A copy that ends :data:`FINISH_S_PER_NODE` per node before this context's limit: a search on a graph of
        ``nodes`` nodes leaves what follows it (the best plan simulated) time to end by the limit."""
        return self.within(max(0.0, self.remaining_s() - FINISH_S_PER_NODE * nodes))

    def reporting_to(self, sink: Callable[[Progress], None] | None) -> SolveContext:
        """A copy whose progress goes to ``sink`` (a filter in front of this context's own sink, or None for
        none); it shares the limits, the stop flag and the record."""
        return dataclasses.replace(self, on_progress=sink)

    def stopped_by(self, stop: Stop) -> SolveContext:
        """A copy that ends when ``stop`` is set (a part of the solve that may end before the rest does),
        and not by this context's flag; it shares the limits, the progress sink and the record."""
        return dataclasses.replace(self, stop_event=stop)

    def detached(self, seconds: float) -> SolveContext:
        """A copy for side work that may take ``seconds`` (as :meth:`within`) and whose plans its caller
        offers to the solve, or are another budget's: it shares the stop flag, but starts a fresh record and
        has no progress sink and no convergence rule, so what it reports is not the solve's."""
        part = self.within(seconds)
        return dataclasses.replace(part, limits=dataclasses.replace(part.limits, convergence=None),
                                   on_progress=None, record=SolveRecord())

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def remaining_s(self) -> float:
        """Seconds left before the time limit (never negative)."""
        return max(0.0, self.limits.time_limit_s - self.elapsed_s())

    def stopped(self) -> bool:
        """True once the solve was cancelled, converged or ran out of time."""
        return self.stop_event.is_set() or self.remaining_s() <= 0.0

    def stop(self, reason: StopReason) -> None:
        """Stop the solve, keeping its best plan, for ``reason`` (the first reason given is kept)."""
        self.stop_event.request(reason)

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the solve was stopped (None while it runs on)."""
        return self.stop_event.reason

    def converged(self) -> bool:
        """True when the limits' convergence rule holds for the record (:meth:`SolveRecord.converged`)."""
        rule = self.limits.convergence
        return rule is not None and self.record.converged(rule, self.elapsed_s())

    def proves(self, cost: float, bound: float | None) -> bool:
        """True when ``bound`` shows that a plan of ``cost`` is optimal within the limits' gap."""
        return bound is not None and cost < math.inf and cost - bound <= (self.limits.mip_gap + 1e-9) * cost

    def report(self, *, incumbent_cost: float | None = None, lower_bound: float | None = None,
               message: str | None = None) -> None:
        """Pass a progress snapshot to the sink, if there is one; a message also goes into the log."""
        if message:
            self.record.log.append(message)
        if incumbent_cost is not None:
            self._record(self.record.trail, incumbent_cost)
        if lower_bound is not None and (self.record.bound is None or lower_bound > self.record.bound):
            self.record.bound = lower_bound
        if self.on_progress is not None:
            self.on_progress(Progress(self.elapsed_s(), incumbent_cost, lower_bound,
                                      relative_gap(incumbent_cost, lower_bound), message))

    def report_chain(self, cost: float) -> None:
        """Record a new best of the solve process's own chain (the convergence rule waits while it improves)."""
        self._record(self.record.chain_trail, cost)

    def report_leanest(self, peak: float) -> None:
        """Record the peak of a new leanest plan, reached while no plan fits (the convergence rule's floor)."""
        self._record(self.record.floor_trail, peak)

    def _record(self, trail: list[tuple[float, float]], value: float) -> None:
        """Append ``value`` to ``trail``, with the time, when it is lower than the last."""
        if not trail or value < trail[-1][1]:
            trail.append((self.elapsed_s(), value))


def relative_gap(cost: float | None, bound: float | None) -> float | None:
    """(cost - bound) / cost, at least 0; None when either is unknown or the cost is not positive."""
    if cost is None or bound is None or cost <= 0:
        return None
    return max(0.0, (cost - bound) / cost)


@dataclass
class Throttle:
    """Says when a progress report is due: the first at once, then at most one every ``every_s`` seconds."""

    every_s: float = REPORT_EVERY_S
    _last: float = -math.inf

    def due(self, *, force: bool = False) -> bool:
        """True (and the clock restarts) when ``force`` or when ``every_s`` seconds have passed since the last."""
        now = time.monotonic()
        if not force and now < self._last + self.every_s:
            return False
        self._last = now
        return True


@dataclass
class Outcome:
    """What a strategy found.

    ``schedule`` is the best schedule (None when nothing was found); a strategy that offloads
    returns its best ``plan`` instead (a plan with transfers has no schedule form); ``optimal`` and
    ``infeasible`` are proofs, never guesses; ``lower_bound`` is a proved bound on cost;
    ``backend`` names the engine that ran, if any; ``fallback`` names the strategy whose schedule
    this is when it is not the one asked for.
    """

    schedule: Schedule | None
    optimal: bool = False
    infeasible: bool = False
    lower_bound: float | None = None
    backend: str | None = None
    fallback: str | None = None
    log: list[str] = field(default_factory=list)
    plan: Plan | None = None
    leanest: Schedule | None = None
    """When nothing fits: the schedule with the lowest peak the strategy reached, if it searched for one."""

    @property
    def found(self) -> bool:
        """Whether the strategy found anything: a schedule or a plan."""
        return self.schedule is not None or self.plan is not None
