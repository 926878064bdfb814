"""Recomputation sets and the memory they imply, kept up to date one edit at a time.

A fixed-order schedule is fully described by *where each node is computed*: node v at its own
stage v and again at any later stages. Each computation starts a copy of v that stays resident
until its last reader before v's next computation (so the retention matrix S is implied), and
every reader reads the newest copy. Any set of extra computations is therefore a valid schedule,
and its memory follows from it. This is the representation the local search edits.

Time is a grid of slots ``key = stage * n + node``: within a stage, nodes run in index order.
A copy alive from slot ``s`` to slot ``e`` adds its size to every stage strictly between their
stages (kept as differences, ``rise``, so an edit is two point updates) and to positions of its
first and last stage (``part``, recomputed per stage when a copy starting or ending there
changes). A stage's peak is ``cumsum(rise)[t] + part[t]``, read at the nodes the stage computes,
exactly as :func:`simulate` reads the plan that :func:`plan_from_schedule` makes of
:meth:`Timeline.schedule`.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable

import numpy as np

from remat.schedules import Graph, Schedule, ScheduleEntries
from remat.schedules._sparse import merged_runs

__all__ = ["Timeline"]


class Timeline:
    """The stages at which each node is computed, with per-stage peak memory kept current.

    Parameters
    ----------
    graph : Graph
        The graph; its node order is the stage order.

    Examples
    --------
    >>> from remat.schedules import Graph
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 2},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 2},
    ...     {"id": "d", "deps": ["a", "c"], "cost": 1, "memory": 1}]})
    >>> tl = Timeline(g)
    >>> tl.peaks.tolist(), tl.total_cost
    ([4, 6, 8, 7], 4.0)
    >>> tl.add(0, 3)  # recompute a in the last stage instead of keeping it
    >>> tl.peaks.tolist(), tl.total_cost
    ([4, 6, 4, 7], 5.0)
    """

    def __init__(self, graph: Graph) -> None:
        n = graph.size
        self.graph = graph
        self.n = n
        self.deps = graph.deps
        self.cost = graph.cost.tolist()
        self.mem = graph.memory.tolist()
        self.stages: list[list[int]] = [[v] for v in range(n)]
        """stages[v]: the stages computing v, ascending; stages[v][0] == v."""
        self.ends: list[list[int]] = [[] for _ in range(n)]
        """ends[v][k]: slot of the last read of the copy made at stages[v][k] (its own slot if unread)."""
        self.nodes: list[list[int]] = [[t] for t in range(n)]
        """nodes[t]: the nodes stage t computes, ascending (row t of R)."""
        self.reads: list[list[int]] = [sorted(w * n + w for w in us) for us in graph.users]
        """reads[u]: slots at which some computation reads u, ascending."""
        self.closing: list[dict[int, int]] = [{} for _ in range(n)]
        """closing[t]: {u: end slot} for copies made before stage t whose last read is in stage t."""
        # Plain arrays for fast item updates, read by numpy through zero-copy views.
        self.rise = array("q", bytes(8 * (n + 1)))
        self.part = array("q", bytes(8 * n))
        self._rise = np.frombuffer(self.rise, dtype=np.int64)[:n]
        self._part = np.frombuffer(self.part, dtype=np.int64)
        self.top = list(range(n))
        """top[t]: the node at whose computation stage t peaks."""
        self.extra_cost = 0.0
        for v in range(n):
            self.ends[v] = [self._last_read(v, v * n + v, n * n)]
            self._place(v, v, self.ends[v][0], 1, set())
        for t in range(n):
            self._refresh_stage(t)

    @classmethod
    def with_extras(cls, graph: Graph, extras: Iterable[tuple[int, int]]) -> Timeline:
        """The timeline that also computes each node v at each stage t of the (v, t) pairs ``extras``."""
        tl = cls(graph)
        tl.edit(added=extras)
        return tl

    # -- reading ----------------------------------------------------------------------------------

    def extras(self) -> list[tuple[int, int]]:
        """Every computation but each node's first, as (node, stage) pairs."""
        return [(v, t) for v, stages in enumerate(self.stages) for t in stages[1:]]

    @property
    def peaks(self) -> np.ndarray:
        """Peak memory of each stage, fixed memory excluded."""
        return np.cumsum(self._rise) + self._part

    def peak(self) -> int:
        """Peak memory over the whole schedule, fixed memory included."""
        return int(self.peaks.max()) + self.graph.fixed_memory

    @property
    def total_cost(self) -> float:
        return self.graph.base_cost + self.extra_cost

    def computes(self, v: int, t: int) -> bool:
        """True when stage t computes node v."""
        s = self.stages[v]
        i = bisect_left(s, t)
        return i < len(s) and s[i] == t

    def live_copy(self, v: int, key: int) -> int:
        """Index k of the copy of v that a reader at slot ``key`` would read (the newest made before it)."""
        k = bisect_right(self.stages[v], key // self.n) - 1
        if self.stages[v][k] * self.n + v > key:
            k -= 1
        return k

    def live_at(self, v: int, key: int) -> bool:
        """True when a copy of v is resident at slot ``key`` (made before it and read at or after it)."""
        k = self.live_copy(v, key)
        return k >= 0 and self.ends[v][k] >= key

    def schedule(self) -> Schedule:
        """The (R, S) pair as its entries: R from the computations, S holding each copy until its last read.

        Time and memory in proportion to the computations, not to stages x nodes.
        """
        n = self.n
        node = np.array([v for v, stages in enumerate(self.stages) for _ in stages], dtype=np.int64)
        stage = np.array([t for stages in self.stages for t in stages], dtype=np.int64)
        end = np.array([e // n + 1 for ends in self.ends for e in ends], dtype=np.int64)
        order = np.lexsort((node, stage))
        runs = merged_runs(node, stage + 1, end)
        return Schedule.of_entries(ScheduleEntries(n, stage[order], node[order], *runs))

    # -- editing ----------------------------------------------------------------------------------

    def add(self, v: int, t: int) -> None:
        """Compute v again at stage t (t > v, and not already computed there)."""
        self.edit(added=((v, t),))

    def remove(self, v: int, t: int) -> None:
        """Drop the computation of v at stage t (t > v)."""
        self.edit(removed=((v, t),))

    def edit(self, *, added: Iterable[tuple[int, int]] = (), removed: Iterable[tuple[int, int]] = ()) -> None:
        """Drop the (node, stage) computations ``removed``, then add those in ``added``.

        Every stage whose in-stage part changed is recomputed once, at the end, so a batch (a chain
        recomputed in one stage) costs one refresh of that stage, not one per computation.
        """
        dirty: set[int] = set()
        for v, t in removed:
            self._drop(v, t, dirty)
        for v, t in added:
            self._compute(v, t, dirty)
        for s in dirty:
            self._refresh_stage(s)

    def _compute(self, v: int, t: int, dirty: set[int]) -> None:
        n, key = self.n, t * self.n + v
        dirty.add(t)
        k = self.live_copy(v, key)
        stages, ends = self.stages[v], self.ends[v]
        start, end = stages[k], ends[k]
        stages.insert(k + 1, t)
        insort(self.nodes[t], v)
        head = self._last_read(v, start * n + v, key)
        ends[k] = head
        ends.insert(k + 1, end if end > key else key)
        self._place(v, start, end, -1, dirty)
        self._place(v, start, head, 1, dirty)
        self._place(v, t, ends[k + 1], 1, dirty)
        for u in self.deps[v]:
            insort(self.reads[u], key)
            j = self.live_copy(u, key)
            if self.ends[u][j] < key:
                self._move_end(u, j, key, dirty)
        self.extra_cost += self.cost[v]

    def _drop(self, v: int, t: int, dirty: set[int]) -> None:
        n, key = self.n, t * self.n + v
        dirty.add(t)
        stages, ends = self.stages[v], self.ends[v]
        k = bisect_left(stages, t)
        start, head, tail = stages[k - 1], ends[k - 1], ends[k]
        del stages[k], ends[k]
        del self.nodes[t][bisect_left(self.nodes[t], v)]
        ends[k - 1] = tail if tail > key else head
        self._place(v, start, head, -1, dirty)
        self._place(v, t, tail, -1, dirty)
        self._place(v, start, ends[k - 1], 1, dirty)
        for u in self.deps[v]:
            reads = self.reads[u]
            del reads[bisect_left(reads, key)]
            j = self.live_copy(u, key)
            if self.ends[u][j] == key:
                self._move_end(u, j, self._last_read(u, self.stages[u][j] * n + u, key), dirty)
        self.extra_cost -= self.cost[v]

    def _last_read(self, v: int, start: int, stop: int) -> int:
        """The last slot before ``stop`` at which v is read after ``start``; ``start`` if there is none."""
        reads = self.reads[v]
        i = bisect_left(reads, stop)
        return reads[i - 1] if i and reads[i - 1] > start else start

    def _move_end(self, u: int, j: int, end: int, dirty: set[int]) -> None:
        start = self.stages[u][j]
        self._place(u, start, self.ends[u][j], -1, dirty)
        self.ends[u][j] = end
        self._place(u, start, end, 1, dirty)

    def _place(self, v: int, t: int, end: int, sign: int, dirty: set[int]) -> None:
        """Add (sign 1) or take away (sign -1) the copy of v made at stage t and last read at slot ``end``.

        It fills the stages strictly between (``rise``) and is listed in its end stage's ``closing``.
        Only the end stage's in-stage part can change (callers mark the stage of a new or dropped
        computation themselves), so only it is collected in ``dirty``.
        """
        last = end // self.n
        if last > t:
            if last > t + 1:
                m = self.mem[v] * sign
                self.rise[t + 1] += m
                self.rise[last] -= m
            if sign > 0:
                self.closing[last][v] = end
            else:
                del self.closing[last][v]
        dirty.add(last)

    def _refresh_stage(self, t: int) -> None:
        """Recompute the in-stage part of stage t's peak and where it occurs."""
        n, nodes, mem = self.n, self.nodes[t], self.mem
        size = len(nodes)
        if size == 1:
            v = nodes[0]
            self.part[t] = mem[v] + sum(mem[u] for u in self.closing[t])
            self.top[t] = v
            return
        diff = [0] * (size + 1)
        for i, v in enumerate(nodes):
            end = self.ends[v][bisect_left(self.stages[v], t)]
            diff[i] += mem[v]
            diff[bisect_left(nodes, end % n) + 1 if end // n == t else size] -= mem[v]
        for u, end in self.closing[t].items():
            diff[0] += mem[u]
            diff[bisect_left(nodes, end % n) + 1] -= mem[u]
        best = running = 0
        top = nodes[-1]
        for i in range(size):
            running += diff[i]
            if running > best:
                best, top = running, nodes[i]
        self.part[t] = best
        self.top[t] = top

