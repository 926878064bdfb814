"""From a checkpoint choice to a schedule: Chen-style segment retention, then optimal recomputation.

Checkpoints cut the stages (one per node, in execution order) into segments: segment k runs from
just after checkpoint k - 1 up to and including checkpoint k, and the last one runs to the end of
the graph (on a training graph it holds the tail of the forward pass and the whole backward pass).
A droppable value (a forward node that is not a checkpoint) is kept while its own segment reads it.
When a later segment reads values of a segment that were dropped, they are recomputed together at
that segment's first such read and each is kept until its last read there: one rung of Chen's
ladder per reading segment. On a training graph the backward pass is one reading segment, so each
forward segment is recomputed once for it; on a graph with no backward nodes every later segment
that reads a dropped value (a skip connection) gets its own rung.

A rung recomputes dropped values of its segment from values that are resident anyway, such as the
checkpoint before the segment, which on a training graph its backward node still reads. Where a
dropped value would also need a value that is gone by then, keeping that one alive longer could cost
more than the drop saves, so the dropped value is kept across the gap instead (never on a chain;
often on a random DAG). Everything else (checkpoints, backward nodes) is kept from its compute until
its last reader, and R is the optimal recomputation for the resulting S (:func:`remat.schedules.recompute_closure`).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

import numpy as np

from remat.schedules import Graph, Schedule, ScheduleEntries

__all__ = ["Interval", "retention_schedule", "segment_schedule"]

Interval = tuple[int, int, int]
"""``(node, computed_in, last_stage)``: the value is resident from stage ``computed_in`` (where it
is computed) through stage ``last_stage`` (where it is last read)."""


def retention_schedule(graph: Graph, intervals: Iterable[Interval], kept: np.ndarray) -> Schedule:
    """The schedule holding each value over its intervals (``S[t, v]`` for ``computed_in < t <= last_stage``)
    and each ``kept`` value from its compute to its last reader, with R the optimal recomputation for
    that S; held as its entries, in memory proportional to them."""
    spans = np.fromiter(chain.from_iterable(intervals), dtype=np.int64).reshape(-1, 3)
    held = np.flatnonzero(kept)
    node = np.concatenate((spans[:, 0], held))
    start = np.concatenate((spans[:, 1], held)) + 1
    end = np.concatenate((spans[:, 2], np.asarray(graph.last_use, dtype=np.int64)[held])) + 1
    return Schedule.of_entries(ScheduleEntries.retaining(graph, node, start, end))


def segment_schedule(graph: Graph, checkpoints: Iterable[int]) -> Schedule:
    """Chen's segment retention for the checkpoint set ``checkpoints`` (forward node indices).

    Examples
    --------
    A three-node chain and its backward pass; checkpointing ``b`` drops ``a`` after the forward
    pass and recomputes it in the stage of the backward node that reads it.

    >>> from remat.schedules import Graph
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 1},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 1},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 1},
    ...     {"id": "gc", "deps": ["c", "b"], "cost": 1, "memory": 1, "kind": "backward"},
    ...     {"id": "gb", "deps": ["gc", "a"], "cost": 1, "memory": 1, "kind": "backward"}]})
    >>> schedule = segment_schedule(g, [1])
    >>> [int(i) for i in schedule.R[4].nonzero()[0]]   # the stage of gb recomputes a
    [0, 4]
    """
    layout = _Segments(graph, checkpoints)
    spans: dict[int, list[tuple[int, int]]] = {}
    for v in layout.droppable:  # ascending: whatever recomputing v reads is settled before v
        own, *rungs = layout.windows(v)
        spans[v] = [own]
        for rung, last in rungs:
            if layout.supported(v, rung, spans):
                spans[v].append((rung, last))
            else:  # keep v across the gap instead
                spans[v][-1] = (spans[v][-1][0], last)
    return retention_schedule(graph, ((v, start, end) for v, vs in spans.items() for start, end in vs), layout.kept)


class _Segments:
    """Where the segments of a checkpoint set lie, and what a rung may recompute from."""

    def __init__(self, graph: Graph, checkpoints: Iterable[int]) -> None:
        self.graph = graph
        self.bounds = sorted(set(checkpoints))
        self.kept = graph.backward.copy()
        self.kept[self.bounds] = True
        self.droppable = [int(v) for v in np.flatnonzero(~self.kept)]
        self.is_kept: list[bool] = self.kept.tolist()
        self.segment: list[int] = np.searchsorted(self.bounds, np.arange(graph.size)).tolist()
        # The first stage of each reading segment that reads a dropped value of a producer segment.
        self.rung_start: dict[tuple[int, int], int] = {}
        for v in self.droppable:
            for w in graph.users[v]:
                key = (self.segment[v], self.segment[w])
                if key[0] != key[1] and w < self.rung_start.get(key, graph.size):
                    self.rung_start[key] = w
        # Per stage, whether a dropped value can be recomputed there (see :meth:`supported`).
        self.recomputable: dict[int, dict[int, bool]] = {}

    def windows(self, v: int) -> list[tuple[int, int]]:
        """``(computed_in, last_read)`` spans of droppable ``v``: its own segment, then one rung per
        later reading segment, merged where a rung starts right after the previous span ends."""
        own = self.segment[v]
        last_read: dict[int, int] = {}
        for w in self.graph.users[v]:
            last_read[self.segment[w]] = w
        spans = [(v, last_read.pop(own, v))]
        for reading, last in sorted(last_read.items()):
            rung = self.rung_start[own, reading]
            if rung <= spans[-1][1] + 1:
                spans[-1] = (spans[-1][0], last)
            else:
                spans.append((rung, last))
        return spans

    def supported(self, v: int, stage: int, spans: dict[int, list[tuple[int, int]]]) -> bool:
        """Whether ``v`` can be recomputed in ``stage`` from values resident then (kept values in
        their lifetimes, dropped ones in their ``spans``) and dropped values of its own segment
        recomputed alongside it.

        Called for ``v`` ascending, once every value below ``v`` has its spans: the answer for a value
        and a stage then never changes, so each is worked out once (depth first, without recursion).
        """
        known = self.recomputable.setdefault(stage, {})
        last_use = self.graph.last_use
        todo = [v]
        while todo:
            x = todo[-1]
            if x in known:
                todo.pop()
                continue
            waiting: list[int] = []
            fine = True
            for u in self.graph.deps[x]:
                if self.is_kept[u]:
                    fine = stage <= last_use[u]
                elif _covers(spans[u], stage):
                    continue
                elif self.segment[u] != self.segment[x]:
                    fine = False
                elif u not in known:
                    waiting.append(u)
                else:
                    fine = known[u]
                if not fine:
                    break
            if fine and waiting:
                todo += waiting
                continue
            known[x] = fine
            todo.pop()
        return known[v]


def _covers(spans: list[tuple[int, int]], stage: int) -> bool:
    """Whether a dropped value with these ``(computed_in, last_read)`` spans is resident in ``stage``."""
    for start, end in spans:
        if start < stage <= end:
            return True
    return False
