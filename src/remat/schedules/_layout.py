"""Static memory layout: an offset in one arena for every value a plan computes.

Each compute starts a buffer that lives until its free (or the plan's end); in a plan with transfers,
a reload starts one too and an offload ends one, in the order the simulator's time model makes
them take effect. Buffers whose
lifetimes do not overlap may share bytes: the liveness-based sharing of the MXNet memory note and
Chen et al. (2016), section 4. Placement is greedy by size, largest first, each at the lowest
offset that clashes with no placed buffer alive at the same time; that costs time quadratic in the
number of buffers, so plans with more than ``SIZE_ORDER_LIMIT`` buffers are placed in plan order
instead, best fit into the holes left by freed buffers. The arena is never smaller than the plan's
activation peak; how much larger measures fragmentation.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from ._graph import Graph
from ._plan import Plan
from ._simulate import Simulation, simulate
from ._transfer import Transfer

__all__ = ["SIZE_ORDER_LIMIT", "Buffer", "Layout", "layout_plan"]

SIZE_ORDER_LIMIT = 20_000
"""Most buffers placed largest-first; larger plans are placed in plan order. (docs/tuning.md)"""


@dataclass(frozen=True)
class Buffer:
    """One computed (or reloaded) value: node index, lifetime [start, end) in plan steps (for a plan with
    transfers, in ranks of the order its memory events take effect), and its place."""

    node: int
    start: int
    end: int
    size: int
    offset: int


@dataclass(frozen=True)
class Layout:
    """Where every buffer of a plan lives, and how big the arena must be."""

    buffers: tuple[Buffer, ...]
    arena_size: int
    activation_peak: int

    @property
    def efficiency(self) -> float:
        """activation peak / arena size: 1.0 means no byte is lost to fragmentation."""
        return self.activation_peak / self.arena_size if self.arena_size else 1.0


def layout_plan(graph: Graph, plan: Plan, *, largest_first_limit: int | None = None,
                transfer: Transfer | None = None) -> Layout:
    """Place every buffer of ``plan`` (which must be valid) in one arena: largest first up to
    ``largest_first_limit`` buffers (default ``SIZE_ORDER_LIMIT``), in plan order beyond. A plan
    with transfers needs ``transfer``, as :func:`simulate` does.

    Examples
    --------
    >>> from remat.schedules import Graph, checkpoint_all_plan
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 4},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 4}]})
    >>> lay = layout_plan(g, checkpoint_all_plan(g))
    >>> lay.arena_size, lay.activation_peak, [b.offset for b in lay.buffers]
    (8, 8, [0, 4, 0])
    """
    sim = simulate(graph, plan, transfer=transfer)
    lifetimes = _lifetimes(graph, plan, sim)
    limit = SIZE_ORDER_LIMIT if largest_first_limit is None else largest_first_limit
    place = _by_size if len(lifetimes) <= limit else _in_plan_order
    offsets = place(lifetimes)
    buffers = tuple(
        Buffer(node=node, start=start, end=end, size=size, offset=offsets[k])
        for k, (node, start, end, size) in enumerate(lifetimes)
    )
    arena = max((b.offset + b.size for b in buffers), default=0)
    return Layout(buffers=buffers, arena_size=arena, activation_peak=sim.peak_memory - graph.fixed_memory)


def _by_size(lifetimes: list[tuple[int, int, int, int]]) -> list[int]:
    """Largest buffer first, each at the lowest offset free of every buffer alive alongside it."""
    order = sorted(range(len(lifetimes)), key=lambda k: (-lifetimes[k][3], lifetimes[k][1]))
    starts = np.array([lt[1] for lt in lifetimes], dtype=np.int64)
    ends = np.array([lt[2] for lt in lifetimes], dtype=np.int64)
    sizes = np.array([lt[3] for lt in lifetimes], dtype=np.int64)
    offsets = np.full(len(lifetimes), -1, dtype=np.int64)
    for k in order:
        clash = (offsets >= 0) & (starts < ends[k]) & (ends > starts[k])
        offsets[k] = _lowest_gap(offsets[clash], sizes[clash], sizes[k])
    return offsets.tolist()


def _in_plan_order(lifetimes: list[tuple[int, int, int, int]]) -> list[int]:
    """Each buffer, as it is computed, into the smallest hole that holds it, or on top of the arena."""
    events = sorted([(start, 1, k) for k, (_, start, _, _) in enumerate(lifetimes)]
                    + [(end, 0, k) for k, (_, _, end, _) in enumerate(lifetimes)])
    holes: list[tuple[int, int]] = []  # (offset, size), sorted by offset, coalesced
    top = 0
    offsets = [0] * len(lifetimes)
    for _, is_start, k in events:
        size = lifetimes[k][3]
        if is_start:
            fitting = [(sz, off, j) for j, (off, sz) in enumerate(holes) if sz >= size]
            if fitting:
                sz, off, j = min(fitting)
                holes[j:j + 1] = [(off + size, sz - size)] if sz > size else []
                offsets[k] = off
            else:
                offsets[k], top = top, top + size
        else:
            top = _release(holes, offsets[k], size, top)
    return offsets


def _release(holes: list[tuple[int, int]], offset: int, size: int, top: int) -> int:
    """Return [offset, offset + size) to the holes, merging neighbours; gives the new arena top."""
    i = bisect.bisect(holes, (offset, size))
    if i and holes[i - 1][0] + holes[i - 1][1] == offset:
        i -= 1
        offset, size = holes[i][0], holes[i][1] + size
        del holes[i]
    if i < len(holes) and offset + size == holes[i][0]:
        size += holes[i][1]
        del holes[i]
    if offset + size == top:
        return offset
    holes.insert(i, (offset, size))
    return top


def _lifetimes(graph: Graph, plan: Plan, sim: Simulation) -> list[tuple[int, int, int, int]]:
    """(node, first rank, rank after the last, size) for each buffer, in the order the buffers open.

    Ranks are plan steps for a plan without transfers, and positions in the simulator's order of memory
    events (``Timing.effect_order``) for one with transfers, where streams run side by side.
    """
    order = range(len(plan.steps)) if sim.timing is None else sim.timing.effect_order
    open_at: dict[int, int] = {}
    out: list[tuple[int, int, int, int]] = []
    mem = graph.memory
    for rank, k in enumerate(order):
        op, v = plan.steps[k]
        if op in ("compute", "reload"):
            open_at[v] = len(out)
            out.append((v, rank, len(order), int(mem[v])))
        elif op in ("free", "offload"):
            j = open_at.pop(v)
            node, start, _, size = out[j]
            out[j] = (node, start, rank, size)
    return out


def _lowest_gap(offsets: np.ndarray, sizes: np.ndarray, size: int) -> int:
    """Lowest offset where ``size`` bytes fit between the occupied [offset, offset + size) ranges."""
    candidate = 0
    for off, sz in sorted(zip(offsets.tolist(), sizes.tolist(), strict=True)):
        if off >= candidate + size:
            break
        candidate = max(candidate, off + sz)
    return candidate
