"""Griewank and Walther's binomial checkpointing (revolve) on a chain, computed from its recurrence.

The forward pass is a chain v_0 -> v_1 -> ... -> v_{n-1} (v_0 reads nothing, so it can always be
recomputed from scratch); the backward pass needs v_{n-1}, ..., v_0 in that order. With s snapshot
slots, the fewest forward computations that deliver all of them is revolve's t(n + 1, s + 1): a
chain of n + 1 steps whose first state (the graph's input) is free and whose first snapshot holds
it. The schedule is the recursion behind that count: advance m values from the current base,
snapshot the m-th, reverse the values above it with one slot fewer, deliver the snapshot, then
reverse the values below it with the same slots; m is chosen so that the total is minimal.

The snapshot intervals and delivery windows become S; the backward values are kept until their
last reader; R is the optimal recomputation for that S.

References
----------
Griewank, "Achieving logarithmic growth of temporal and spatial complexity in reverse automatic
differentiation", Optimization Methods and Software 1(1), 1992; Griewank and Walther, "Algorithm
799: revolve", ACM TOMS 26(1), 2000.
"""

from __future__ import annotations

from math import comb

from remat.schedules import Graph, Schedule

from .._context import Outcome, SolveContext
from .._options import Option
from ._knob import search_knob
from ._segments import Interval, retention_schedule

__all__ = ["LARGEST_CHAIN", "MAX_SNAPSHOTS", "SNAPSHOTS", "SNAPSHOTS_OPTION", "binomial_steps", "delivery_steps",
           "griewank", "revolve_schedule"]

SNAPSHOTS = "snapshots"
"""The revolve knob: how many forward values may be held as snapshots at once."""
MAX_SNAPSHOTS = 2**31 - 1
"""Most snapshots a request may pin (more than any graph has forward nodes)."""
SNAPSHOTS_OPTION = Option.whole("pin the number of snapshots instead of searching it", most=MAX_SNAPSHOTS)
LARGEST_CHAIN = 5_000
"""Most nodes of a graph griewank takes: the snapshot search builds schedules with few snapshots, whose
recomputations grow with the square of the chain (a 5,000-node training chain: 13 s and 500 MB; 10,000 nodes: over
8 GB or 90 s). (docs/tuning.md)"""


def binomial_steps(steps: int, snapshots: int) -> int:
    """t(l, s): the fewest forward steps that reverse ``steps`` steps with ``snapshots`` snapshots.

    With r the repetition number, beta(s, r - 1) < l <= beta(s, r) where beta(s, r) = C(s + r, s),
    t(l, s) = r * l - beta(s + 1, r - 1) (Griewank 1992, Proposition 1).

    >>> binomial_steps(100, 1), binomial_steps(1000, 10)
    (4950, 3636)
    """
    if steps <= 1:
        return 0
    if snapshots < 1:
        raise ValueError("reversing more than one step needs at least one snapshot")
    repetitions, reach = 0, 1
    while reach < steps:
        repetitions += 1
        reach = reach * (snapshots + repetitions) // repetitions
    return repetitions * steps - comb(snapshots + repetitions, snapshots + 1)


def delivery_steps(values: int, slots: int) -> int:
    """Fewest computations that deliver ``values`` chain values in reverse with ``slots`` snapshots
    (the base below them is free): revolve's count for one more step and one more snapshot."""
    return binomial_steps(values + 1, slots + 1)


def revolve_schedule(graph: Graph, snapshots: int) -> Schedule:
    """The revolve schedule of a chain graph's forward pass with ``snapshots`` snapshot slots.

    On a unit training chain of n forward nodes (each gradient reads its activation and the next
    gradient; unit costs and sizes) the plan computes forward nodes exactly
    ``delivery_steps(n, snapshots)`` times, and its peak is ``snapshots + 3`` values above fixed
    memory: the snapshots, the value being delivered or swept, and the gradient read and written.
    """
    chain = graph.forward_nodes
    # the backward pass's reads of each chain value (all reads but the next forward node's)
    reads = [[w for w in graph.users[v] if k + 1 == len(chain) or w != chain[k + 1]] for k, v in enumerate(chain)]
    intervals: list[Interval] = [(chain[k], chain[k], chain[k + 1]) for k in range(len(chain) - 1)]
    held_from: dict[int, int] = {}  # snapshot -> stage that computes it
    sweep: list[int] = []  # snapshots taken since the last delivery, computed in the next one's stage
    stage = -1  # stage of the latest delivery; -1 during the first forward pass
    for kind, k in _revolve_events(len(chain), snapshots):
        if kind == "snap":
            if stage < 0:
                held_from[k] = chain[k]
            else:
                sweep.append(k)
            continue
        first_pass = stage < 0  # the first delivery is the top of the forward pass, computed there
        stage = max([stage, chain[k], *reads[k][:1]])
        held_from.update((j, stage) for j in sweep)
        sweep.clear()
        start = held_from.pop(k, chain[k] if first_pass else stage)
        intervals.append((chain[k], start, max([stage, *reads[k][-1:]])))
    return retention_schedule(graph, intervals, graph.backward)


def griewank(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """Revolve on the forward chain, its snapshot count searched for the cheapest plan that fits."""
    n = len(graph.forward_nodes)
    return search_knob(
        graph, budget, ctx,
        knob=SNAPSHOTS,
        values=range(max(n, 1)),
        build=lambda s: revolve_schedule(graph, s),
    )


def _best_split(values: int, slots: int) -> int:
    """How many values to advance before the next snapshot (``values`` means: sweep to the top).

    The total m + D(l - m, s - 1) + D(m - 1, s) is convex in m (D is convex in its first
    argument: its increments are the repetition numbers, which never decrease), so the first m
    where it stops falling is a minimum.
    """
    if slots == 0:
        return values

    def total(m: int) -> int:
        return m + delivery_steps(values - m, slots - 1) + delivery_steps(m - 1, slots)

    low, high = 1, values
    while low < high:
        mid = (low + high) // 2
        if total(mid + 1) < total(mid):
            low = mid + 1
        else:
            high = mid
    return low


def _revolve_events(values: int, slots: int) -> list[tuple[str, int]]:
    """Revolve's actions in order: ``("snap", k)`` holds v_k, ``("deliver", k)`` hands v_k to the
    backward pass (computing it by a sweep unless it is a snapshot, which is released then)."""
    events: list[tuple[str, int]] = []
    todo: list[tuple[int, int, int]] = [(0, values, slots)]  # (base, count, slots); count < 0: deliver
    while todo:
        base, count, free = todo.pop()
        if count < 0:
            events.append(("deliver", base))
            continue
        if count == 0:
            continue
        m = _best_split(count, free)
        if m == count:
            events.append(("deliver", base + count - 1))
            todo.append((base, count - 1, free))
        else:
            events.append(("snap", base + m - 1))
            todo.append((base, m - 1, free))
            todo.append((base + m - 1, -1, 0))
            todo.append((base + m, count - m, free - 1))
    return events

