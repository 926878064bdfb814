"""offload-window: the adaptive schedule-window of the out-of-core seed, offloading only what the budget needs.

Hayakawa and Narihira ("Out-of-core training for extremely large-scale neural networks with adaptive
window-based scheduling", 2021, section 3) walk the functions in order. Their variable-sequence lists,
function after function, the values each one reads and writes; at function i a window of ``window``
bytes starts at function i's first value, and every value on the host that the window reaches is
reloaded before function i runs. When memory would exceed the budget, values idle since their last use
leave, oldest first, each right after that last use.

remat plans the same way on the checkpoint-all plan (no recomputation), with what its cost model adds:

- **Reloads.** The seed lets bytes stand in for time, having no costs. remat knows the computes' costs
  and a copy's duration, so a reload is issued at least as far ahead of its read as its copy lasts (as
  late as the copy time allows, :meth:`Computes.ahead`), and the window pulls it earlier still: a
  window of 0 reloads each value just as late as its copy allows, a wide one brings values back early
  so that copies queued behind each other still arrive in time, at the price of device memory.
- **Offloads.** Gaps are taken oldest first, each where a compute of the gap is over the budget; a
  value moved is counted gone from the first compute of its gap until its reload.
- **Late reloads.** Where a compute is still over the budget, values reloaded early and not yet read
  come back later, the one read last first, down to right before their read: exposed copies, but the
  budget holds.
- **Waits.** Memory an offload releases is free only once its copy has ended, and a link slower than
  the computation would have it end after the computes that count on it have allocated. As the seed
  "waits for the Swap-out right before f_i", a ``wait`` goes before each compute that counts on more
  bytes still being copied out than the budget leaves room for, on the oldest offloads (the offload
  stream copies in order, so those end first): the plan pays for the exposed copies in time, not in
  memory.

So every compute fits that can (the plan reaches ``graph.min_feasible_budget``, each compute with its
inputs alone, unless a ``host_budget`` keeps values on the device), and the simulated peak is never
above the budget the walk planned for. The window is searched (:func:`search_knob`) for the cheapest
plan that fits, each one simulated.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from itertools import accumulate

import numpy as np

from remat.schedules import MAX_TOTAL_BYTES, Graph, Plan, Transfer, checkpoint_all_plan, simulate

from .._context import Outcome, SolveContext
from .._options import Option
from ..baselines import search_knob
from ._insert import Computes, idle_intervals, insert_transfers
from ._transfer import required_transfer

__all__ = ["WINDOW", "WINDOW_OPTION", "WindowPlanner", "offload_window"]

WINDOW = "window"
"""offload-window's knob: bytes of the variable-sequence a reload looks ahead by."""
WINDOW_OPTION = Option.whole("pin the window (bytes a reload looks ahead by) instead of searching it",
                             most=MAX_TOTAL_BYTES)

STOP_CHECK = 1024
"""Computes the late reloads walk between looks at whether the solve was stopped. (docs/tuning.md)"""

GRID_POINTS = 40
"""Window values tried besides 0: a geometric grid from the smallest value to the whole sequence. (docs/tuning.md)"""


class WindowPlanner:
    """The walk on one graph, with what it needs worked out once for every window and budget tried.

    >>> from remat.schedules import Graph, Transfer
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "x", "deps": [], "cost": 1, "memory": 100},
    ...     {"id": "y", "deps": ["x"], "cost": 1, "memory": 10},
    ...     {"id": "z", "deps": ["y"], "cost": 1, "memory": 10},
    ...     {"id": "gz", "deps": ["z"], "cost": 1, "memory": 10, "kind": "backward"},
    ...     {"id": "gy", "deps": ["gz", "y"], "cost": 1, "memory": 10, "kind": "backward"},
    ...     {"id": "gx", "deps": ["gy", "x"], "cost": 1, "memory": 10, "kind": "backward"}]})
    >>> planner = WindowPlanner(g, Transfer(bandwidth=1000))
    >>> max(planner.need), planner.plan(window=0, budget=140).has_transfers   # 130 fits already
    (130, False)
    >>> [(op, g.ids[v]) for op, v in planner.plan(window=0, budget=120).steps][:6]   # gz counts on x gone
    [('compute', 'x'), ('compute', 'y'), ('offload', 'x'), ('compute', 'z'), ('wait', 'x'), ('compute', 'gz')]
    """

    def __init__(self, graph: Graph, transfer: Transfer, *, host_budget: int | None = None) -> None:
        self.graph = graph
        self.transfer = transfer
        self.host_budget = host_budget
        self.base = checkpoint_all_plan(graph)
        self.computes = Computes(graph, self.base)
        self.gaps = sorted((gap for gap in idle_intervals(graph, self.base) if gap.bytes), key=lambda gap: gap.after)
        """The base plan's idle intervals of some bytes, in the order they open (the offload stream's)."""
        self.gone = [self.computes.position(gap.after) + 1 for gap in self.gaps]
        """Per gap, its first compute: moved, its value is gone from there (waits see to it)."""
        self.read = [self.computes.position(gap.before) for gap in self.gaps]
        """Per gap, the compute that reads its value next."""
        timeline = simulate(graph, self.base).timeline
        self.need = [int(timeline[k]) for k in self.computes.steps]
        """Device memory while each compute runs, nothing moved (the checkpoint-all plan's i-th compute is
        node i)."""
        memory = graph.memory.tolist()
        self.first: list[int] = []
        """Per compute, where its values start in the variable-sequence: its deps, then its output."""
        sizes: list[int] = []
        for v in range(graph.size):
            self.first.append(len(sizes))
            sizes.extend(memory[u] for u in (*graph.deps[v], v))
        self.running = [0, *accumulate(sizes)]
        """Bytes of the variable-sequence before each position; the last entry is the whole sequence's."""
        deps = graph.deps
        self._read_at = np.array([self.first[read] + deps[read].index(gap.node)
                                  for gap, read in zip(self.gaps, self.read, strict=True)], dtype=np.int64)
        """Per gap, the position of its next read in the variable-sequence."""
        self._by_time = np.array([self.computes.ahead(gap.after, gap.before, transfer.duration(gap.bytes))
                                  for gap in self.gaps], dtype=np.int64)
        """Per gap, the latest compute step its reload may be issued before and still end in time."""

    def reload_steps(self, window: int) -> list[int]:
        """Per gap, the compute step its reload is issued before: the earlier of where the window first
        reaches the read and where the copy would just end in time."""
        running = np.asarray(self.running, dtype=np.int64)
        reach = np.searchsorted(running, running[self.first] + window, side="right") - 2
        by_window = np.minimum(np.maximum(np.searchsorted(reach, self._read_at), np.asarray(self.gone, dtype=np.int64)),
                               np.asarray(self.read, dtype=np.int64))
        steps: list[int] = np.minimum(np.asarray(self.computes.steps)[by_window], self._by_time).tolist()
        return steps

    def plan(self, *, window: int, budget: int, stopped: Callable[[], bool] = lambda: False) -> Plan | None:
        """The checkpoint-all plan with the gaps moved that bring its computes within ``budget``: offloads
        oldest first, late reloads where computes are still over, waits where a compute needs the
        memory of a copy still running. None when ``stopped()`` turns true on the way (a wide window on a
        large graph can take many seconds)."""
        back = [self.computes.position(step) for step in self.reload_steps(window)]
        over = np.array(self.need, dtype=np.int64) - budget
        chosen = self._offloads(back, over)
        if not self._delay_reloads(chosen, back, over, stopped):
            return None
        chosen = [j for j in chosen if back[j] > self.gone[j]]  # reloaded before it was ever gone: no move
        moves = [(self.gaps[j], self.computes.steps[back[j]]) for j in chosen]
        return insert_transfers(self.base, moves, self._waits(chosen, back, over.tolist()))

    def _offloads(self, back: list[int], over: np.ndarray) -> list[int]:
        """The gaps to move, oldest first: each during which a compute is over the budget (``over`` > 0).

        Gone from the first compute of its gap until ``back``, a gap lowers ``over`` there in place; one
        whose reload comes before any compute over the budget is reloaded at once (``back`` set to its
        first compute, so it lowers nothing yet): only a late reload (:meth:`_delay_reloads`) makes it help.
        Its host copy counts against ``host_budget`` even if no late reload comes (a cautious count).
        """
        host = 0
        on_host: set[int] = set()
        chosen = []
        for j, gap in enumerate(self.gaps):
            gone, read = self.gone[j], self.read[j]
            extra = 0 if gap.node in on_host else gap.bytes  # a node's host copy is made once
            if self.host_budget is not None and host + extra > self.host_budget:
                continue
            if over[gone:read].max() <= 0:
                continue
            if back[j] <= gone or over[gone:back[j]].max() <= 0:
                back[j] = gone
            over[gone:back[j]] -= gap.bytes
            host += extra
            on_host.add(gap.node)
            chosen.append(j)
        return chosen

    def _delay_reloads(self, chosen: list[int], back: list[int], over: np.ndarray, stopped: Callable[[], bool]) -> bool:
        """Where a compute is still over the budget, move reloads of values back and not yet read to right
        after it, the one read last first (``back`` and ``over`` updated in place); False, with nothing
        updated, when ``stopped()`` turned true first.

        Delays at compute i change ``over`` up to i only, so which reloads compute i delays follows from
        ``over[i]`` as :meth:`_offloads` left it and from the values back by then and read after it: those
        read last whose bytes cover the excess, or all of them. A compute that delays all of them is noted
        once rather than each delayed one by one (a long stretch over the budget would delay every value
        at every compute of it), and each reload moves, at the end, to after the last compute that delayed it.
        """
        arriving = sorted(chosen, key=back.__getitem__)
        leaving = sorted(chosen, key=self.read.__getitem__)
        waiting: list[tuple[int, int]] = []  # (-read, gap): back on the device by this compute, maybe read since
        held = 0  # bytes of the gaps back by this compute and read after it
        last = dict.fromkeys(chosen, -1)  # the last compute that delayed each gap, one by one
        everything: list[int] = []  # the computes that delayed every gap back and not read yet
        k = gone = 0
        for i in range(len(over)):
            if i % STOP_CHECK == 0 and stopped():
                return False
            while k < len(arriving) and back[arriving[k]] <= i:
                heapq.heappush(waiting, (-self.read[arriving[k]], arriving[k]))
                held += self.gaps[arriving[k]].bytes
                k += 1
            while gone < len(leaving) and self.read[leaving[gone]] <= i:
                held -= self.gaps[leaving[gone]].bytes
                gone += 1
            if over[i] <= 0:
                continue
            if over[i] >= held:
                everything.append(i)
                continue
            delayed, excess = [], int(over[i])
            while excess > 0:
                read, j = heapq.heappop(waiting)
                if -read <= i:
                    continue
                excess -= self.gaps[j].bytes
                last[j] = i
                delayed.append((read, j))
            for entry in delayed:
                heapq.heappush(waiting, entry)
        for j in chosen:
            at = bisect.bisect_left(everything, self.read[j]) - 1  # the last such compute before the read ...
            if at >= 0 and everything[at] >= back[j]:              # ... once it is back
                last[j] = max(last[j], everything[at])
            if last[j] >= back[j]:
                over[back[j]:last[j] + 1] -= self.gaps[j].bytes
                back[j] = last[j] + 1
        return True

    def _waits(self, chosen: list[int], back: list[int], over: list[int]) -> list[tuple[int, int]]:
        """The ``(node, step)`` waits that hold each compute until the offloads it counts on have released
        enough memory: at compute i, the values gone whose copies may still run hold at most ``-over[i]``.

        The offload stream copies in plan order, so waiting for one offload waits for all those before it:
        the computation waits for the oldest, as few as the budget allows (a wait for a copy that has
        already ended costs nothing).
        """
        queue: list[int] = []  # the gaps that offload (a node's first), in the offload stream's order
        offloaded: set[int] = set()
        for j in chosen:
            if self.gaps[j].node not in offloaded:
                offloaded.add(self.gaps[j].node)
                queue.append(j)
        place = {j: q for q, j in enumerate(queue)}
        opening: dict[int, list[int]] = {}
        closing: dict[int, list[int]] = {}
        for j in queue:
            opening.setdefault(self.gone[j], []).append(j)
            closing.setdefault(back[j], []).append(j)
        waits = []
        running = 0  # bytes of the values gone at this compute whose offloads it has not waited for
        waited = 0  # the offloads at the head of the queue the computation has waited for
        for i, excess in enumerate(over):
            running += sum(self.gaps[j].bytes for j in opening.get(i, ()))
            running -= sum(self.gaps[j].bytes for j in closing.get(i, ()) if place[j] >= waited)
            room = max(-excess, 0)
            if running > room:
                while running > room:
                    j = queue[waited]
                    waited += 1
                    if back[j] > i:  # still gone here (the others are back, counted in ``over`` again)
                        running -= self.gaps[j].bytes
                waits.append((self.gaps[j].node, self.computes.steps[i]))
        return waits

    def windows(self) -> list[int]:
        """The knob values to try, ascending: 0, then a geometric grid up to the whole sequence's bytes."""
        total = self.running[-1]
        smallest = min((b for b in self.graph.memory.tolist() if b > 0), default=0)
        if not smallest:
            return [0]
        ratio = (total / smallest) ** (1 / max(1, GRID_POINTS - 1))
        return sorted({0, *(round(smallest * ratio**i) for i in range(GRID_POINTS))})


def offload_window(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """The walk with its window searched for the cheapest plan that fits (or pinned by the ``window``
    option), ending in time for the best plan's simulation after it."""
    planner = WindowPlanner(graph, required_transfer(ctx, "offload-window"), host_budget=ctx.offload.host_budget)
    search = ctx.finishing(graph.size)
    made: list[int] = []  # the windows planned: the first in full, as every knob search tries its first candidate

    def build(window: int) -> Plan | None:
        plan = planner.plan(window=window, budget=budget, stopped=search.stopped if made else lambda: False)
        made.append(window)
        return plan

    return search_knob(graph, budget, search, knob=WINDOW, values=planner.windows(), build=build,
                       key=lambda window: tuple(planner.reload_steps(window)))
