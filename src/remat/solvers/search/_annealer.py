"""Simulated annealing over extra computations: the large-graph search of the fixed-order problem.

The state is a :class:`Timeline` (where each node is computed; retention follows). Two moves:

- a *relief* computes a value again just before its next read, freeing it over the gap where a
  crowded stage peaks; the deps it needs that are not resident then are either kept alive or,
  with probability :data:`RECURSE` each (at most :data:`MAX_RELIEF` computations in all),
  recomputed with it; a *closing* relief recomputes all of them, up to :data:`MAX_CLOSURE` (a
  chain's segment from its last checkpoint), and is used while the search is stuck over budget;
- a *drop* removes one extra computation, and with it the computations in its stage that only it
  read (a recomputation chain that fed it), which would otherwise stay as dead cost and memory.

A move's score is its cost plus a weighted penalty on memory over the budget (summed over
stages; while nothing fits the budget, over a limit just under the state's peak, lowered step by
step to the budget, so that the search lowers the peak rather than spreading its effort). The
weight adapts: it grows while the search is over budget and shrinks while it fits, so the search
crosses infeasible ground between schedules that fit. A greedy descent (the best of a
few reliefs by memory freed per cost) first reaches the budget, which gives the first plan fast;
the annealing then cools geometrically in cycles of doubling length (:data:`FIRST_CYCLE_S`), each
from the best state so far, the last over what is left of the time. Every cycle ends cold, so a
solve stopped when its best stops improving stops at a polished plan, not in the middle of a hot
chain. The cheapest state that fits is kept.
"""

from __future__ import annotations

import math
import random
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from remat.schedules import Graph, Schedule

from .._context import Outcome, SolveContext, Throttle
from ._timeline import Timeline

__all__ = ["Annealer", "anneal", "timeline_from_schedule"]

RECURSE = 0.3
"""Probability that a relief recomputes (rather than keeps alive) a dep that is not resident. (docs/tuning.md)"""

MAX_RELIEF = 3
"""Most computations one relief adds. (docs/tuning.md)"""

MAX_CLOSURE = 64
"""Most computations a *closing* relief adds: one that recomputes every dep that is not resident,
as checkpointing a chain needs (a segment recomputed from its last checkpoint). Which kind of
relief to make: see :data:`CLOSING_WHEN_OVER` and :data:`CLOSING_WHEN_STUCK`. (docs/tuning.md)"""

CLOSING_WHEN_OVER = 0.02
"""Share of closing reliefs while the state is over budget (none while it fits: they cost much). (docs/tuning.md)"""

CLOSING_WHEN_STUCK = 0.5
"""Share of closing reliefs while nothing that fits has been found, or the greedy descent is stuck. (docs/tuning.md)"""

P_DROP = 0.45
"""Share of moves that drop an extra computation (the rest are reliefs). (docs/tuning.md)"""

CANDIDATES = 12
"""Reliefs compared at each step of the greedy descent. (docs/tuning.md)"""

DESCENT_PATIENCE = 20
"""Rounds without progress after which the greedy descent hands over to the annealing. (docs/tuning.md)"""

STUCK_ROUNDS = 3
"""Rounds without progress after which the greedy descent also tries closing reliefs. (docs/tuning.md)"""

COOLING = 1e-3
"""Final temperature of a cycle as a fraction of the initial one. (docs/tuning.md)"""

FIRST_CYCLE_S = 8.0
"""Seconds of the first cooling cycle; each next one lasts twice as long, and the last takes all
that is left once the one after it would not fit (60 s: 8, 16 and 36 s). A chain cooled over the
whole limit is still hot where a solve stopped by its convergence rule ends; one cooled over a first
cycle this long has most of its gain early, about what the whole limit reaches, and much shorter
cycles are too short to anneal (the 12-block GPT and the 48-step LSTM at 0.5 of their peaks:
benchmarks/LOG.md, 2026-11-24 21:00 UTC). (docs/tuning.md)"""

WEIGHT_UP = 1.05
"""Factor on the memory penalty's weight after :data:`WEIGHT_UP_AFTER` moves in a row over budget. (docs/tuning.md)"""

WEIGHT_UP_AFTER = 200
"""Moves in a row over budget after which the memory penalty's weight rises (:data:`WEIGHT_UP`). (docs/tuning.md)"""

WEIGHT_DOWN = 1.01
"""Divisor of the memory penalty's weight every :data:`WEIGHT_DOWN_EVERY` moves while the state fits.
(docs/tuning.md)"""

WEIGHT_DOWN_EVERY = 50
"""Moves while the state fits after which the memory penalty's weight falls (:data:`WEIGHT_DOWN`). (docs/tuning.md)"""

_CHECK_EVERY = 128
"""Moves between looks at the clock and the stop flag. (docs/tuning.md)"""


def timeline_from_schedule(graph: Graph, schedule: Schedule) -> Timeline:
    """The timeline computing what ``schedule`` computes (computations of held values dropped).

    Its cost is the schedule's simulated cost and its peak is at most the schedule's, since each
    copy is then kept only until its last read.
    """
    node, stage = schedule.entries.recomputations()
    order = np.lexsort((node, stage))
    return Timeline.with_extras(graph, zip(node[order].tolist(), stage[order].tolist(), strict=True))


def anneal(graph: Graph, budget: int, ctx: SolveContext, start: Schedule | None = None, *,
           seed: int = 0, max_moves: int | None = None) -> Outcome:
    """Anneal until the time limit, a stop or ``max_moves`` moves; return the cheapest schedule that fits.

    Parameters
    ----------
    graph, budget, ctx
        As for every strategy; ``ctx.remaining_s()`` sets the cooling schedule.
    start : Schedule, optional
        Where to start (a baseline's schedule); checkpoint-all otherwise.
    seed : int
        Seed of the move generator.
    max_moves : int, optional
        Stop after this many moves and cool over them instead of over the time left (a run that
        does not depend on the machine's speed).

    Examples
    --------
    >>> from remat.schedules import Graph
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 2},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 2},
    ...     {"id": "d", "deps": ["a", "c"], "cost": 1, "memory": 1}]})
    >>> outcome = anneal(g, 7, SolveContext(), max_moves=2000)
    >>> outcome.schedule.compute_count  # a is computed again for d instead of being kept
    5
    """
    annealer = Annealer(graph, budget, seed=seed, start=start)
    throttle = Throttle()

    def report(cost: float, extras: list[tuple[int, int]]) -> None:
        if throttle.due():
            ctx.report(incumbent_cost=cost)

    annealer.run(ctx, max_moves=max_moves, on_best=report)
    if annealer.best_cost is not None:
        ctx.report(incumbent_cost=annealer.best_cost)
    return annealer.outcome()


def _cycles(total: float, first: float) -> Iterator[float]:
    """Lengths of cooling cycles over ``total``: ``first``, then each twice the last, until the
    next would not fit twice in what is left, which the last cycle then takes whole."""
    length, left = first, total
    while left >= 3 * length:
        yield length
        left -= length
        length *= 2
    yield left


class Annealer:
    """One annealing run over a timeline, remembering the cheapest state that fits.

    Parameters
    ----------
    graph, budget
        The problem.
    seed : int
        Seed of the move generator.
    start : Schedule, optional
        The schedule to start from; checkpoint-all otherwise.
    """

    def __init__(self, graph: Graph, budget: int, *, seed: int = 0, start: Schedule | None = None) -> None:
        self.graph = graph
        self.tl = timeline_from_schedule(graph, start) if start is not None else Timeline(graph)
        self.target = budget - graph.fixed_memory
        """The budget left to the stages (fixed memory excluded): a state fits when no stage exceeds it."""
        self.limit = self.target
        """What the search presses the stages under: the target, or, while nothing fits it, a limit
        just under the state's peak (:meth:`_tighten`)."""
        self.rng = random.Random(seed)
        self.extras: list[tuple[int, int]] = []
        self._where: dict[tuple[int, int], int] = {}
        for v, t in self.tl.extras():
            self._track(v, t)
        cost = graph.cost
        self.temperature0 = 0.5 * float(cost[cost > 0].mean()) if (cost > 0).any() else 1.0
        self.epsilon = 1e-3 * self.temperature0
        self.weight = self.temperature0 / max(float(graph.memory.mean()), 1.0)
        self.excess = self._excess()
        self.best: list[tuple[int, int]] | None = None
        self.best_extra = math.inf
        self.leanest: list[tuple[int, int]] | None = None
        """While nothing fits: the extra computations of the state with the lowest peak so far."""
        self._leanest_peak = math.inf
        self.created = time.monotonic()
        self.best_at_s: float | None = None
        """Seconds from creation to the best state."""
        self.moves = 0
        """Moves made so far."""
        self._over_streak = 0

    # -- results ----------------------------------------------------------------------------------

    @property
    def best_cost(self) -> float | None:
        """Cost of the cheapest schedule found that fits, or None."""
        return None if self.best is None else self.graph.base_cost + self.best_extra

    def best_schedule(self) -> Schedule | None:
        """The cheapest schedule found that fits, or None."""
        if self.best is None:
            return None
        return Timeline.with_extras(self.graph, self.best).schedule()

    def leanest_schedule(self) -> Schedule | None:
        """While nothing fits: the schedule with the lowest peak reached, or None."""
        if self.leanest is None:
            return None
        return Timeline.with_extras(self.graph, self.leanest).schedule()

    def outcome(self) -> Outcome:
        """The best schedule as an Outcome, with a line for the log (or, when nothing fits, the leanest)."""
        if self.best is None:
            return Outcome(None, leanest=self.leanest_schedule(),
                           log=[f"anneal: nothing within the budget after {self.moves} moves"])
        return Outcome(self.best_schedule(), log=[
            f"anneal: {self.moves} moves; cost {self.best_cost:.6g} found after {self.best_at_s:.2f} s"])

    # -- the search -------------------------------------------------------------------------------

    def run(self, ctx: SolveContext, *, max_moves: int | None = None,
            on_best: Callable[[float, list[tuple[int, int]]], None] | None = None,
            every: Callable[[Annealer], bool] | None = None, first_cycle_s: float = FIRST_CYCLE_S,
            on_leanest: Callable[[float], None] | None = None) -> None:
        """Descend to the budget, then anneal until ``ctx.stopped()`` (or ``max_moves`` moves), in cooling
        cycles from ``first_cycle_s`` (``math.inf``: one cycle over the time left).

        ``on_best(cost, extras)`` is called for each new best state that fits (cost including the
        base cost; ``extras`` its (node, stage) extra computations); while none fits,
        ``on_leanest(peak)`` for each state with a lower peak than any before. ``every(self)``, called
        between moves every so often (and after each round of the descent), may :meth:`adopt` another
        state, and ends the run by returning True.
        """
        def improved() -> None:
            if self._remember():
                if on_best is not None:
                    on_best(self.graph.base_cost + self.best_extra, list(self.extras))
            elif self.best is None and self._remember_leanest() and on_leanest is not None:
                on_leanest(self._leanest_peak)

        def clock() -> float:  # where the run is, in the unit of its horizon
            return self.moves if max_moves else time.monotonic()

        self.descend(ctx, every)
        improved()
        if self.excess > 0:
            self._tighten()
        cycles = _cycles(max_moves or max(ctx.remaining_s(), 1e-3), max_moves or first_cycle_s)
        cycle_start, cycle = clock(), next(cycles)
        temperature = self.temperature0
        self._over_streak = 0
        while True:
            self.moves += 1
            if self.moves % _CHECK_EVERY == 0:
                if ctx.stopped() or (max_moves is not None and self.moves >= max_moves) or (every and every(self)):
                    break
                progress = (clock() - cycle_start) / cycle
                if progress >= 1 and (following := next(cycles, None)) is not None:
                    cycle_start, cycle, progress = clock(), following, 0.0
                    if self.best is not None:
                        self.adopt(self.best)
                temperature = self.temperature0 * COOLING ** min(progress, 1.0)
            if self._step(temperature):
                improved()
                if self.excess == 0 and self._pressing:
                    self._tighten()
            self._adapt_weight()

    def adopt(self, extras: list[tuple[int, int]]) -> None:
        """Move to the state with these extra computations (a plan another run found); keep it if it is the best."""
        wanted, current = set(extras), set(self.extras)
        self._edit(added=sorted(wanted - current), removed=sorted(current - wanted))
        self.limit = self.target
        self.excess = self._excess()
        self._remember()

    def _step(self, temperature: float) -> bool:
        """One move, kept or undone by the Metropolis rule; True when it was kept."""
        tl, rng = self.tl, self.rng
        dropped: list[tuple[int, int]] = []
        added: list[tuple[int, int]] = []
        if self.extras and rng.random() < P_DROP:
            dropped = self._drop(*self.extras[rng.randrange(len(self.extras))])
        else:
            closure = self._pick_closure()
            added = self._relief(closure, tl.peaks) or []
            if not added:
                return False
            self._edit(added=added)
        excess = self._excess()
        delta = sum(tl.cost[v] for v, _ in added) - sum(tl.cost[v] for v, _ in dropped) \
            + self.weight * (excess - self.excess)
        kept = delta <= 0 or rng.random() < math.exp(-delta / temperature)
        if kept:
            self.excess = excess
            return True
        self._edit(added=dropped[::-1], removed=added)
        return False

    def _adapt_weight(self) -> None:
        """Raise the memory penalty's weight while the state stays over budget, lower it while it fits,
        so that the search crosses infeasible ground but comes back to the budget."""
        if self.excess > 0:
            self._over_streak += 1
            if self._over_streak > WEIGHT_UP_AFTER:
                self.weight *= WEIGHT_UP
                self._over_streak = 0
        elif self.moves % WEIGHT_DOWN_EVERY == 0:
            self._over_streak = 0
            self.weight /= WEIGHT_DOWN

    def _drop(self, v: int, t: int) -> list[tuple[int, int]]:
        """Drop the extra computation of v at stage t, then each computation in stage t left unread by it.

        Returns the computations dropped, in the order they were dropped.
        """
        tl, n = self.tl, self.tl.n
        dropped = [(v, t)]
        self._edit(removed=dropped)
        todo = [v]
        while todo:
            for u in tl.deps[todo.pop()]:
                k = tl.live_copy(u, t * n + u)
                if tl.stages[u][k] == t and tl.ends[u][k] == t * n + u:
                    self._edit(removed=[(u, t)])
                    dropped.append((u, t))
                    todo.append(u)
        return dropped

    def descend(self, ctx: SolveContext, every: Callable[[Annealer], bool] | None = None) -> None:
        """Greedy descent to the budget: apply the best of a few reliefs by memory freed per cost.

        Gives up (and leaves the rest to the annealing) after :data:`DESCENT_PATIENCE` rounds in a
        row in which no relief reduced the excess, or once ``every(self)``, called after each round,
        returns True (a descent on a large graph far over the budget can take the whole time limit).
        """
        stuck = 0
        while self.excess > 0 and stuck < DESCENT_PATIENCE and not ctx.stopped() and not (every and every(self)):
            best: tuple[float, list[tuple[int, int]], int] | None = None
            peaks = self.tl.peaks  # the state's, the same for every candidate of the round
            for _ in range(CANDIDATES):
                computations = self._relief(self._pick_closure(stuck >= STUCK_ROUNDS), peaks)
                if not computations:
                    continue
                self._edit(added=computations)
                excess = self._excess()
                self._edit(removed=computations)
                if excess < self.excess:
                    score = (self.excess - excess) / (sum(self.tl.cost[v] for v, _ in computations) + self.epsilon)
                    if best is None or score > best[0]:
                        best = (score, computations, excess)
            if best is None:
                stuck += 1
                continue
            stuck = 0
            self._edit(added=best[1])
            self.excess = best[2]

    def _pick_closure(self, stuck: bool = False) -> bool:
        """Whether the next relief is a closing one: never while the state fits, rarely while it does
        not, often once the annealing has found nothing that fits yet or the greedy descent is ``stuck``."""
        if self.excess == 0:
            return False
        share = CLOSING_WHEN_STUCK if stuck or (self.best is None and self.moves) else CLOSING_WHEN_OVER
        return self.rng.random() < share

    def _relief(self, closure: bool, peaks: np.ndarray) -> list[tuple[int, int]] | None:
        """Computations that free one value over the peak of a crowded stage, or None if none was found.

        Picks a stage over the limit (or, three times in ten and whenever none is, one of the fullest
        tenth, at least ten stages), a value resident at its peak that the peak's node does not
        read, and computes it again at the stage of its next read (or, three times in ten, at a
        stage between the peak and that read), with some deps, or with all deps that are not
        resident when ``closure``. ``peaks``: the timeline's (a caller trying several reliefs on one
        state sums them once).
        """
        tl, rng, n = self.tl, self.rng, self.tl.n
        crowded = np.flatnonzero(peaks > self.limit)
        if crowded.size == 0 or rng.random() < 0.3:
            top = min(n, max(10, n // 10))
            crowded = np.argpartition(peaks, n - top)[n - top:]
        t = int(crowded[rng.randrange(crowded.size)])
        w = tl.top[t]
        key = t * n + w
        for _ in range(30 if t else 0):
            u = rng.randrange(t)
            if u == w or u in tl.deps[w] or not tl.live_at(u, key):
                continue
            reads = tl.reads[u]
            j = bisect_right(reads, key)
            if j == len(reads) or reads[j] // n <= t:
                continue
            r = reads[j] // n
            if rng.random() < 0.3:
                r = rng.randrange(t + 1, r + 1)
            if not tl.computes(u, r):
                return self._with_deps(u, r, closure)
        return None

    def _with_deps(self, u: int, r: int, closure: bool) -> list[tuple[int, int]]:
        """Compute u at stage r, and some of the deps that are not resident there with it."""
        tl, n = self.tl, self.tl.n
        computations = [(u, r)]
        todo, seen = [u], {u}
        most, recurse = (MAX_CLOSURE, 1.0) if closure else (MAX_RELIEF, RECURSE)
        while todo and len(computations) < most:
            x = todo.pop()
            for d in tl.deps[x]:
                if d in seen or tl.computes(d, r) or tl.live_at(d, r * n + x):
                    continue
                if len(computations) < most and self.rng.random() < recurse:
                    seen.add(d)
                    computations.append((d, r))
                    todo.append(d)
        return computations

    # -- bookkeeping ------------------------------------------------------------------------------

    @property
    def _pressing(self) -> bool:
        """Whether the search presses under a limit above the target (nothing fits yet): a state that
        fits that limit is a leaner state, not a plan."""
        return self.limit > self.target

    def _tighten(self) -> None:
        """While nothing fits: press the stages under a limit just below the state's peak (by a tenth of
        its distance to the target, at least a byte), and so down step by step to the target.

        Pressed against the target alone, the search minimizes the summed excess of every stage over
        it, and can settle far above the lowest peak it could reach; a limit just under the peak
        gathers the search on the few stages that make it (rl500 at 0.6 of its peak, one chain, eight
        seeds: the leanest peaks reached are lower pressed under the peak than against the target
        alone; benchmarks/LOG.md, 2026-11-24 23:00 UTC).
        """
        peak = int(self.tl.peaks.max())
        self.limit = max(self.target, peak - max((peak - self.target) // 10, 1))
        self.excess = self._excess()

    def _remember(self) -> bool:
        """Keep the current state when it fits the target and beats the best; True when it did.

        The cost kept is summed afresh (the running total drifts by rounding over many edits).
        """
        if self.excess > 0 or self._pressing:
            return False
        if self.tl.extra_cost >= self.best_extra - 1e-9 * max(1.0, self.graph.base_cost):
            return False
        cost = self.tl.cost
        self.best_extra = math.fsum(cost[v] for v, _ in self.extras)
        self.best = list(self.extras)
        self.best_at_s = time.monotonic() - self.created
        return True

    def _remember_leanest(self) -> bool:
        """Keep the current state when its peak is the lowest so far (the floor the search knows of);
        True when it did."""
        peak = self.tl.peak()
        if peak >= self._leanest_peak:
            return False
        self._leanest_peak, self.leanest = peak, list(self.extras)
        return True

    def _excess(self) -> int:
        over = self.tl.peaks - self.limit
        return int(over[over > 0].sum())

    def _track(self, v: int, t: int) -> None:
        self._where[(v, t)] = len(self.extras)
        self.extras.append((v, t))

    def _untrack(self, v: int, t: int) -> None:
        i = self._where.pop((v, t))
        last = self.extras.pop()
        if i < len(self.extras):
            self.extras[i] = last
            self._where[last] = i

    def _edit(self, *, added: Sequence[tuple[int, int]] = (), removed: Sequence[tuple[int, int]] = ()) -> None:
        """Change the timeline (removals first) and the list of extra computations with it."""
        self.tl.edit(added=added, removed=removed)
        for v, t in removed:
            self._untrack(v, t)
        for v, t in added:
            self._track(v, t)
