"""Schedules held as their set entries: the recompute closure, Algorithm 1 and the plan's peak and cost
without the matrices.

S is given as runs (node ``v`` retained from stage ``start`` up to, not including, ``end``) and R as
(stage, node) pairs. Each function touches only what enters or leaves S, what is computed and the
edges those read, so it takes time and memory in proportion to the schedule's entries, not to
stages x nodes. They give exactly what :func:`._schedule.recompute_closure`,
:func:`._schedule.plan_from_schedule` and :func:`._simulate.simulate` give for the same matrices.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from typing import NamedTuple

import numpy as np

from ._errors import InvalidSchedule
from ._graph import Graph
from ._plan import Op, Plan

__all__ = ["Runs", "closure_computes", "merged_runs", "peak_and_cost_of_entries", "plan_of_entries"]


class Runs(NamedTuple):
    """Retention runs: ``node[k]`` is retained over stages ``start[k] <= t < end[k]``."""

    node: np.ndarray
    start: np.ndarray
    end: np.ndarray


def merged_runs(node: np.ndarray, start: np.ndarray, end: np.ndarray) -> Runs:
    """The same retained (stage, node) set as runs that neither overlap nor touch, sorted by node then
    start, empty runs left out: the form S's runs have everywhere else.

    >>> merged_runs(np.array([3, 3, 1, 3]), np.array([5, 1, 2, 4]), np.array([7, 4, 2, 6]))
    Runs(node=array([3]), start=array([1]), end=array([7]))
    """
    node, start, end = (np.asarray(a, dtype=np.int64) for a in (node, start, end))
    keep = end > start
    node, start, end = node[keep], start[keep], end[keep]
    order = np.lexsort((start, node))
    node, start, end = node[order], start[order], end[order]
    if len(node) == 0:
        return Runs(node, start, end)
    # the furthest end so far within each node: offset per node so that one running maximum serves all
    span = int(end.max()) + 1
    reach = np.maximum.accumulate(node * span + end) - node * span
    first = np.ones(len(node), dtype=bool)
    first[1:] = (node[1:] != node[:-1]) | (start[1:] > reach[:-1])
    last = np.append(first[1:], True)
    return Runs(node[first], start[first], reach[last])


def closure_computes(graph: Graph, runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    """The (stage, node) entries of :func:`recompute_closure`'s R for S given as merged ``runs``.

    Stage t computes node t and every value whose run starts at t + 1, and, transitively, every
    dep of those that S does not hold at t; sorted by stage, then node. Most stages compute t
    alone (every dep of t is held and nothing else starts being held): those are found with array
    operations, and only the others walk their deps.
    """
    n = graph.size
    held = _Held(runs, n)
    stages = np.arange(n)
    reader, dep = _reads(graph, stages)
    plain = np.ones(n, dtype=bool)
    plain[reader[~held(dep, reader)]] = False
    appearing = (runs.start > 0) & (runs.node != runs.start - 1)  # held from t + 1 on, not computed at t
    plain[runs.start[appearing] - 1] = False
    seeds: dict[int, list[int]] = {}
    for v, t in zip(runs.node[appearing].tolist(), (runs.start[appearing] - 1).tolist(), strict=True):
        seeds.setdefault(t, []).append(v)
    stage, node = [stages[plain]], [stages[plain]]
    for t in stages[~plain].tolist():
        computed = _walk_closure(graph, held, t, seeds.get(t, []))
        stage.append(np.full(len(computed), t, dtype=np.int64))
        node.append(np.array(computed, dtype=np.int64))
    all_stages, all_nodes = np.concatenate(stage), np.concatenate(node)
    order = np.lexsort((all_nodes, all_stages))
    return all_stages[order], all_nodes[order]


def plan_of_entries(graph: Graph, compute_stage: np.ndarray, compute_node: np.ndarray, runs: Runs) -> Plan:
    """:func:`plan_from_schedule` for R as (stage, node) entries and S as runs that neither overlap nor touch.

    At the start of a stage what is resident is exactly what S holds then (a stage frees whatever the
    next one does not hold), so only the runs that start or end at a stage need looking at.
    """
    n = graph.size
    ids = graph.ids
    computes = _by_stage(n, compute_stage, compute_node)
    starting, ending = _by_stage(n + 1, runs.start, runs.node), _by_stage(n + 1, runs.end, runs.node)
    resident = [False] * n
    keep = [False] * n  # S[t + 1] while stage t runs
    for v in starting[0]:
        keep[v] = True
    steps: list[tuple[Op, int]] = []
    for t in range(n):
        for v in starting[t]:
            if not resident[v]:
                raise InvalidSchedule(
                    f"Stage {t}: S keeps {ids[v]!r}, which is not resident after stage {t - 1}.", stage=t, node=ids[v])
        for v in ending[t + 1]:
            keep[v] = False
        for v in starting[t + 1]:
            keep[v] = True
        run_stage(graph, t, [v for v in computes[t] if not resident[v]], ending[t + 1], keep, resident, steps,
                  lambda w: steps.append(("free", w)))
    return Plan(tuple(steps))


def run_stage(graph: Graph, t: int, computed: Sequence[int], leaving: Iterable[int],
              keep: Sequence[bool] | np.ndarray, resident: MutableSequence[bool] | np.ndarray,
              steps: list[tuple[Op, int]], release: Callable[[int], None]) -> None:
    """Append stage ``t`` of Algorithm 1 to ``steps``: the values ``leaving`` (resident, not kept into stage t + 1)
    that the stage does not read are released at its start, then each of ``computed`` (in order, none resident)
    is computed and every value it reads or makes that ``keep`` does not hold is released after its last read.

    ``release(v)`` appends v's release (a free, or an offload); ``resident`` is updated. Raises InvalidSchedule
    when a compute needs a value that is neither resident nor computed earlier in the stage.
    """
    deps = graph.deps
    last_read: dict[int, int] = {}
    for pos, v in enumerate(computed):
        for u in deps[v]:
            last_read[u] = pos
    for w in leaving:
        if w not in last_read:
            release(w)
            resident[w] = False
    for pos, v in enumerate(computed):
        for u in deps[v]:
            if not resident[u]:
                raise InvalidSchedule(
                    f"Stage {t}: computing {graph.ids[v]!r} needs {graph.ids[u]!r}, which is neither retained nor "
                    f"computed earlier in the stage.", stage=t, node=graph.ids[v],
                )
        steps.append(("compute", v))
        resident[v] = True
        for u in (*deps[v], v):
            if resident[u] and not keep[u] and last_read.get(u, -1) <= pos:
                release(u)
                resident[u] = False


def peak_and_cost_of_entries(graph: Graph, compute_stage: np.ndarray, compute_node: np.ndarray,
                             runs: Runs) -> tuple[int, float]:
    """The peak memory and cost :func:`simulate` gives the plan of a valid schedule (one whose every
    compute finds its deps resident, as a closure's does), without making the plan.

    For searches that judge many schedules and keep one: the one kept is still made into a plan and
    simulated. Array operations over the computes and their reads, following :func:`plan_of_entries`:
    a value S stops holding leaves after its last reader in the stage, or its own compute, or at the
    stage's start when the stage does not read it.
    """
    n = graph.size
    held = _Held(runs, n)
    order = np.lexsort((compute_node, compute_stage))
    stage, node = compute_stage[order], compute_node[order]
    fresh = ~held(node, stage)  # a compute of a resident value is dropped
    stage, node = stage[fresh], node[fresh]
    computes = len(node)
    reader, dep = _reads(graph, node)
    # the last read of each value in each stage, by the position of its reader
    by_value = np.lexsort((reader, dep, stage[reader]))
    reader, dep = reader[by_value], dep[by_value]
    last = np.ones(len(dep), dtype=bool)
    last[:-1] = (dep[1:] != dep[:-1]) | (stage[reader[1:]] != stage[reader[:-1]])
    reader, dep = reader[last], dep[last]
    read_stage = stage[reader]
    # slot 2 i + 1 is compute i, 2 i + 2 the frees right after it, 2 i the frees at the start of its stage
    memory = graph.memory
    delta = np.zeros(2 * computes + 1, dtype=np.int64)
    delta[2 * np.arange(computes) + 1] = memory[node]
    dropped = ~held(dep, read_stage + 1)
    np.subtract.at(delta, 2 * reader[dropped] + 2, memory[dep[dropped]])
    read_later = np.zeros(computes, dtype=bool)
    position = _position(stage, node, read_stage, dep)
    read_later[position[position >= 0]] = True
    alone = ~read_later & ~held(node, stage + 1)
    np.subtract.at(delta, 2 * np.flatnonzero(alone) + 2, memory[node[alone]])
    leaving_at = runs.end - 1  # S holds it in this stage and not in the next
    unread = _position(read_stage, dep, leaving_at, runs.node) < 0
    np.subtract.at(delta, 2 * np.searchsorted(stage, leaving_at[unread]), memory[runs.node[unread]])
    in_use = graph.fixed_memory + np.cumsum(delta)
    counts = np.bincount(node, minlength=n)
    cost = math.fsum((graph.cost * counts)[counts > 0].tolist())
    return int(in_use[1::2].max()), cost


class _Held:
    """Whether S, as runs that neither overlap nor touch, holds given nodes at given stages."""

    def __init__(self, runs: Runs, stages: int) -> None:
        self.span = stages + 1
        keys = runs.node * self.span + runs.start
        order = np.argsort(keys, kind="stable")
        self.keys, self.node, self.end = keys[order], runs.node[order], runs.end[order]
        self._lists: tuple[list[int], list[int], list[int]] | None = None

    def lists(self) -> tuple[list[int], list[int], list[int]]:
        """The runs as Python lists, for lookups one at a time: node v's are ``first[v]`` to
        ``first[v + 1]`` (exclusive) in the ``start`` and ``end`` lists."""
        if self._lists is None:
            first = np.searchsorted(self.node, np.arange(self.span)).tolist()
            self._lists = (first, (self.keys - self.node * self.span).tolist(), self.end.tolist())
        return self._lists

    def __call__(self, node: np.ndarray, stage: np.ndarray) -> np.ndarray:
        if len(self.keys) == 0:
            return np.zeros(len(node), dtype=bool)
        at = np.searchsorted(self.keys, node * self.span + stage, side="right") - 1
        within = np.maximum(at, 0)
        held: np.ndarray = (at >= 0) & (self.node[within] == node) & (self.end[within] > stage)
        return held


def _walk_closure(graph: Graph, held: _Held, t: int, seeds: list[int]) -> list[int]:
    """What stage ``t`` computes, ascending: t, ``seeds`` and every dep that S does not hold, walked node by node."""
    deps = graph.deps
    first, start, end = held.lists()
    todo = [-t, *(-v for v in seeds)]
    heapq.heapify(todo)
    computed: list[int] = []
    seen: set[int] = set()
    while todo:
        v = -heapq.heappop(todo)
        if v in seen:
            continue
        seen.add(v)
        computed.append(v)
        for u in deps[v]:
            if u in seen:
                continue
            for k in range(first[u], first[u + 1]):
                if start[k] <= t < end[k]:
                    break
            else:
                heapq.heappush(todo, -u)
    computed.reverse()  # popped in descending order
    return computed


def _reads(graph: Graph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (position in ``nodes``, dep) pair: what each of ``nodes`` reads, in order."""
    offsets, flat = graph.dep_arrays
    counts = offsets[nodes + 1] - offsets[nodes]
    reader = np.repeat(np.arange(len(nodes)), counts)
    first = np.cumsum(counts) - counts
    return reader, flat[np.repeat(offsets[nodes] - first, counts) + np.arange(len(reader))]


def _position(stage: np.ndarray, node: np.ndarray, want_stage: np.ndarray, want_node: np.ndarray) -> np.ndarray:
    """Where each (``want_stage``, ``want_node``) sits among the pairs (``stage``, ``node``), sorted by stage
    then node; -1 where it is not among them."""
    if len(stage) == 0:
        return np.full(len(want_stage), -1)
    span = int(max(node.max(), want_node.max(initial=0))) + 1
    keys = stage * span + node
    wanted = want_stage * span + want_node
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return np.where(keys[at] == wanted, at, -1)


def _by_stage(stages: int, stage: np.ndarray, node: np.ndarray) -> list[list[int]]:
    """``node`` grouped by ``stage`` into one list per stage, nodes ascending within a stage."""
    order = np.lexsort((node, stage))
    bounds = np.searchsorted(stage[order], np.arange(stages + 1)).tolist()
    nodes = node[order].tolist()
    return [nodes[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
