"""Recomputation sets and the memory they imply, kept up to date one edit at a time.

A fixed-order schedule is fully described by *where each node is computed*: node v at its own
stage v and again at any later stages. Each computation starts a copy of v that stays resident
until its last reader before v's next computation (so the retention matrix S is implied), and
every reader reads the newest copy. Any set of extra computations is therefore a valid schedule,
and its memory follows from it. This is the representation the local search edits.

Time is a grid of slots ``key = stage * n + node``: within a stage, nodes run in index order.
A copy alive from slot ``s`` to slot ``e`` adds its size to every stage strictly between their
stages (``full``, one number per stage) and to positions of its first and last stage (``part``,
recomputed per stage when a copy starting or ending there changes). A stage's peak is
``full[t] + part[t]``, read at the nodes the stage computes, exactly as :func:`simulate` reads
the plan that :func:`plan_from_schedule` makes of :meth:`Timeline.schedule`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

import numpy as np

from remat.schedules import Graph, Schedule

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
        self.full = np.zeros(n + 1, dtype=np.int64)
        self.part = np.zeros(n, dtype=np.int64)
        self.top = list(range(n))
        """top[t]: the node at whose computation stage t peaks."""
        self.extra_cost = 0.0
        for v in range(n):
            self.ends[v] = self._copy_ends(v)
            self._place(v, self.stages[v], self.ends[v], 1, None)
        for t in range(n):
            self._refresh_stage(t)

    # -- reading ----------------------------------------------------------------------------------

    @property
    def peaks(self) -> np.ndarray:
        """Peak memory of each stage, fixed memory excluded."""
        return self.full[:self.n] + self.part

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
        """The (R, S) pair: R from the computations, S holding each copy until its last read."""
        n = self.n
        R = np.zeros((n, n), dtype=bool)
        S = np.zeros((n, n), dtype=bool)
        for v, (stages, ends) in enumerate(zip(self.stages, self.ends)):
            R[stages, v] = True
            for t, end in zip(stages, ends):
                S[t + 1:end // n + 1, v] = True
        return Schedule(R, S)

    # -- editing ----------------------------------------------------------------------------------

    def add(self, v: int, t: int) -> None:
        """Compute v again at stage t (t > v, and not already computed there)."""
        key = t * self.n + v
        self._edit(v, t, lambda items, x: insort(items, x), key)
        self.extra_cost += self.cost[v]

    def remove(self, v: int, t: int) -> None:
        """Drop the computation of v at stage t (t > v)."""
        key = t * self.n + v
        self._edit(v, t, _remove_sorted, key)
        self.extra_cost -= self.cost[v]

    def _edit(self, v: int, t: int, change, key: int) -> None:  # type: ignore[no-untyped-def]
        touched = (v, *self.deps[v])
        before = [(self.stages[u][:], self.ends[u]) for u in touched]
        change(self.stages[v], t)
        change(self.nodes[t], v)
        for u in self.deps[v]:
            change(self.reads[u], key)
        dirty = {t}
        for u, (old_stages, old_ends) in zip(touched, before):
            new_ends = self._copy_ends(u)
            new_stages = self.stages[u]
            if new_stages == old_stages and new_ends == old_ends:
                continue
            old = set(zip(old_stages, old_ends))
            new = set(zip(new_stages, new_ends))
            self._place(u, *zip(*(old - new)), -1, dirty) if old - new else None
            self._place(u, *zip(*(new - old)), 1, dirty) if new - old else None
            self.ends[u] = new_ends
        for s in dirty:
            self._refresh_stage(s)

    def _copy_ends(self, v: int) -> list[int]:
        n, stages, reads = self.n, self.stages[v], self.reads[v]
        out = []
        for k, t in enumerate(stages):
            start = t * n + v
            hi = bisect_left(reads, stages[k + 1] * n + v) if k + 1 < len(stages) else len(reads)
            out.append(reads[hi - 1] if hi and reads[hi - 1] > start else start)
        return out

    def _place(self, v: int, stages, ends, sign: int, dirty: set[int] | None) -> None:  # type: ignore[no-untyped-def]
        """Add (sign 1) or take away (sign -1) copies of v: whole stages in ``full``, the end stage's ``closing``."""
        n, m = self.n, self.mem[v] * sign
        for t, end in zip(stages, ends):
            last = end // n
            if last > t + 1:
                self.full[t + 1:last] += m
            if last > t:
                if sign > 0:
                    self.closing[last][v] = end
                elif self.closing[last].get(v) == end:
                    del self.closing[last][v]
            if dirty is not None:
                dirty.add(t)
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


def _remove_sorted(items: list[int], x: int) -> None:
    del items[bisect_left(items, x)]
