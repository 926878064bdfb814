"""A first plan for a deep graph from one solve of its repeated block (:func:`remat.schedules.find_repeats`).

The longest run of identical blocks is cut down to :data:`KEEP` blocks at each end (the rest of the
graph, what enters the run and what leaves it, stays as it is): a graph of a few hundred nodes that
the annealer solves in a second or two. Its budget leaves each block the share of the budget that a
block has in the whole graph (checkpoint-all's peak grows by the same amount per block in both).
Its plan is then composed back: the computations of the kept blocks and of the rest of the graph
map to the same nodes of the whole graph, and those of one kept block (the *template*, next to the
cut) to every block that was cut out, node for node. While the composed plan peaks over the budget,
the short graph's budget is lowered by the excess per block and solved again, a few times at most,
each solve from the short plan before it (the 100,000-node GPT at 0.5 of its peak: a composed plan
at 10.0 % overhead, against 17.4 % from solves that each start afresh: at the tighter budgets a
fresh chain of 20,000 moves stops far from where the one before it had got).

The composed plan is a starting state for the annealer over the whole graph, which polishes it
globally; like every plan it is judged by its timeline (the simulator's peak and cost), never by the
short graph's numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from remat.schedules import Graph, InvalidGraph, Node
from remat.schedules._repeats import BlockRun, find_repeats

from .._context import SolveContext
from ._annealer import Annealer

__all__ = ["ShortGraph", "compose", "composed_start", "shorten"]

KEEP = 3
"""Blocks kept at each end of the run in the short graph. (docs/tuning.md)"""

MIN_NODES = 20_000
"""Graphs below this many nodes are searched whole: there the greedy descent reaches the budget within
seconds, sooner than the composition (the 128-block GPT: 1.5 s against 8 s at 0.8 of its peak), and
the search from it ends about as well. (docs/tuning.md)"""

MOVES = 20_000
"""Annealing moves of each solve of the short graph (about a second on a 400-node graph; counted in
moves, so that the composed plan does not depend on the machine's load). (docs/tuning.md)"""

SOLVE_S = 5.0
"""Seconds each solve of the short graph may take at most (a fifth of the time left at most). (docs/tuning.md)"""

TRIES = 4
"""Solves of the short graph, each at a budget moved by the composed plan's distance to the budget, per
block. (docs/tuning.md)"""

MARGIN = 0.05
"""Extra share by which the short graph's budget is lowered after a composed plan peaked over. (docs/tuning.md)"""


@dataclass(frozen=True)
class ShortGraph:
    """The graph with a run cut down to its first and last :data:`KEEP` blocks.

    ``origin[i]`` is the node of the whole graph that node i of the short graph is; ``run`` the run
    (in the whole graph's nodes) and ``kept`` the run's blocks the short graph keeps, in order.
    """

    graph: Graph
    origin: np.ndarray
    run: BlockRun
    kept: tuple[int, ...]

    def blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node of the short graph, its kept block's index in ``kept`` (-1 outside the run) and its
        position in the block."""
        block = np.full(self.graph.size, -1, dtype=np.int64)
        slot = np.full(self.graph.size, -1, dtype=np.int64)
        where = np.full(int(self.origin.max()) + 1, -1, dtype=np.int64)
        where[self.origin] = np.arange(len(self.origin))
        for j, k in enumerate(self.kept):
            block[where[self.run.nodes[k]]] = j
            slot[where[self.run.nodes[k]]] = np.arange(self.run.size)
        return block, slot


def shorten(graph: Graph, run: BlockRun, keep: int = KEEP) -> ShortGraph | None:
    """``graph`` without the blocks of ``run`` between its first and last ``keep``: a block's dep on a cut
    block reads the kept block at the same distance, and a node outside the run reads the kept blocks
    only (a step's gradient collector: what it held of the cut blocks counts in the per-block share). None
    when a block's dep reaches beyond the kept blocks."""
    count = run.count
    kept = (*range(keep), *range(count - keep, count))
    block = np.full(graph.size, -1, dtype=np.int64)
    slot = np.full(graph.size, -1, dtype=np.int64)
    block[run.nodes] = np.arange(count)[:, None]
    slot[run.nodes] = np.arange(run.size)[None, :]
    cut = (block >= keep) & (block < count - keep)
    origin = np.flatnonzero(~cut)
    where = np.full(graph.size, -1, dtype=np.int64)
    where[origin] = np.arange(len(origin))
    short_of = {k: j for j, k in enumerate(kept)}
    nodes = []
    for v in origin.tolist():
        k = int(block[v])
        deps = []
        for u in graph.deps[v]:
            if not cut[u]:
                deps.append(int(where[u]))
            elif k >= 0:
                j = short_of[k] + int(block[u]) - k
                if not 0 <= j < len(kept):
                    return None
                deps.append(int(where[run.nodes[kept[j], slot[u]]]))
        node = graph.nodes[v]
        nodes.append(Node(node.id, tuple(deps), node.cost, node.memory, node.kind, node.meta))
    try:
        short = Graph(nodes, name=f"{graph.name} (blocks {keep} to {count - keep - 1} cut)",
                      fixed_memory=graph.fixed_memory, cost_unit=graph.cost_unit)
    except InvalidGraph:  # a dep re-pointed to a later node: the blocks are not in chain order
        return None
    return ShortGraph(short, origin, run, kept)


def compose(short: ShortGraph, extras: list[tuple[int, int]], cut: range | None = None, *,
            rest: bool = True) -> set[tuple[int, int]]:
    """The short graph's extra computations (node, stage) as the whole graph's: with ``rest``, those of the
    kept blocks and of the nodes outside the run as themselves; the template block's (the last kept
    before the cut) for each block of ``cut`` (default: every block cut out), each dep read at the
    same block distance. Computations that would not come after their node are left out."""
    run, kept = short.run, short.kept
    keep = len(kept) // 2
    cut = range(keep, run.count - keep) if cut is None else cut
    block, slot = short.blocks()
    out: set[tuple[int, int]] = set()
    for v, t in extras:
        jt = int(block[t])
        targets: list[int | None] = [None] if jt < 0 else [kept[jt]]
        targets = (targets if rest else []) + (list(cut) if jt == keep - 1 else [])
        for k in targets:
            whole_t = int(short.origin[t]) if k is None else int(run.nodes[k, slot[t]])
            whole_v = _whole_node(short, block, slot, v, jt, k)
            if whole_v is not None and whole_v < whole_t:
                out.add((whole_v, whole_t))
    return out


def _whole_node(short: ShortGraph, block: np.ndarray, slot: np.ndarray, v: int, jt: int,
                k: int | None) -> int | None:
    """The whole graph's node for short node v, computed in a stage of kept block ``jt`` placed at block k
    of the run (None: a stage outside the run); None when that block distance leaves the run."""
    jv = int(block[v])
    if jv < 0:
        return int(short.origin[v])
    target = short.kept[jv] if k is None else k + jv - jt
    return int(short.run.nodes[target, slot[v]]) if 0 <= target < short.run.count else None


def composed_start(graph: Graph, budget: int, ctx: SolveContext, annealer: Annealer,
                   on_fit: Callable[[float, list[tuple[int, int]]], None], *,
                   min_nodes: int = MIN_NODES, give_way: Callable[[], bool] = lambda: False) -> str | None:
    """Move ``annealer`` to the cheapest plan that fits composed from the longest run's short graph (or the
    last composed, when none fits), calling ``on_fit(cost, extras)`` for each cheaper one as it comes; a
    line for the log saying what was reused, or None when the graph has fewer than ``min_nodes`` nodes or
    no run worth it. Composing ends early once ``give_way()`` (a better start has come)."""
    if graph.size < min_nodes:
        return None
    runs = [run for run in find_repeats(graph) if run.count >= 4 * KEEP]
    short = shorten(graph, runs[0]) if runs else None
    if short is None:
        return None
    run, small = short.run, short.graph
    share = len(short.kept) / run.count
    per_block = (graph.checkpoint_all_peak - small.checkpoint_all_peak) / (run.count - len(short.kept))
    rest = small.checkpoint_all_peak - len(short.kept) * per_block
    target = rest + (budget - rest) * share
    tries: list[str] = []
    plans: list[tuple[int, float, list[tuple[int, int]]]] = []  # composed peak, cost, the short plan
    bracket: dict[bool, int] = {}  # fits: the largest short budget whose plan fit; False: the smallest over
    for _ in range(TRIES):
        small_budget = max(small.min_feasible_budget, int(target))
        solver = Annealer(small, small_budget, seed=0)
        if plans:
            solver.adopt(plans[-1][2])
        solver.run(ctx.detached(min(SOLVE_S, ctx.remaining_s() / 5)), max_moves=MOVES, every=lambda _: give_way())
        if ctx.stopped() or give_way() or solver.best is None:
            break
        peak, cost = _try(annealer, compose(short, solver.best), budget, on_fit)
        plans.append((peak, cost, solver.best))
        tries.append(f"{small_budget:,} bytes: peak {peak / budget:.3f} of the budget")
        target = _next_budget(small_budget, peak, budget, share, bracket)
    mixed = _mix(short, annealer, budget, plans, on_fit) if plans and not give_way() else None
    if mixed is not None:
        tries.append(mixed)
    if annealer.best is not None:
        annealer.adopt(annealer.best)
    if not tries:
        return None
    return (f"repeated blocks: {run.describe(graph)}; one solve of the {small.size}-node graph keeping "
            f"{KEEP} at each end, composed over the {run.count - len(short.kept)} cut out (its budget "
            f"{'; '.join(tries)})")


def _try(annealer: Annealer, extras: set[tuple[int, int]], budget: int,
         on_fit: Callable[[float, list[tuple[int, int]]], None]) -> tuple[int, float]:
    """Move the annealer to these extra computations; their peak and cost; ``on_fit`` when they fit and beat
    the annealer's best."""
    before = annealer.best_cost
    annealer.adopt(sorted(extras, key=lambda e: (e[1], e[0])))
    cost = annealer.tl.total_cost
    if annealer.best_cost is not None and (before is None or annealer.best_cost < before):
        on_fit(annealer.best_cost, list(annealer.best or ()))
    return annealer.tl.peak(), cost


def _mix(short: ShortGraph, annealer: Annealer, budget: int, plans: list[tuple[int, float, list[tuple[int, int]]]],
         on_fit: Callable[[float, list[tuple[int, int]]], None]) -> str | None:
    """Between the leanest composed plan that fits and a cheaper one that does not: the cheaper block's plan
    for the last of the cut blocks, as many as the budget leaves room for (the peak grows about linearly
    with them), the leaner's for the others; a line for the log, or None when there is no such pair."""
    fits = [plan for plan in plans if plan[0] <= budget]
    if not fits:
        return None
    low = min(fits, key=lambda plan: plan[1])
    over = [plan for plan in plans if plan[0] > budget and plan[1] < low[1]]
    if not over:
        return None
    high = min(over, key=lambda plan: plan[0])
    keep = len(short.kept) // 2
    first, stop = keep, short.run.count - keep
    share = (budget - low[0]) / (high[0] - low[0])
    for _ in range(TRIES):
        split = stop - int(share * (stop - first))
        extras = compose(short, low[2], range(first, split)) | compose(short, high[2], range(split, stop), rest=False)
        peak, _ = _try(annealer, extras, budget, on_fit)
        if peak <= budget:
            return f"{stop - split} of {stop - first} cut blocks as at the cheaper budget: peak {peak / budget:.3f}"
        share *= 0.9 * (budget - low[0]) / max(peak - low[0], 1)
    return None


def _next_budget(small_budget: int, peak: int, budget: int, share: float, bracket: dict[bool, int]) -> float:
    """The short graph's next budget: moved by the composed peak's distance to the budget per block (lowered
    by :data:`MARGIN` more when over, and by twice as much as last time when that was over too), or
    halfway between the largest that fit and the smallest that did not, once there are both."""
    fits = peak <= budget
    last_over = bracket.get(False)
    bracket[fits] = max(bracket.get(True, 0), small_budget) if fits else min(last_over or small_budget, small_budget)
    if True in bracket and False in bracket:
        return (bracket[True] + bracket[False]) / 2
    step = (budget - peak) * share * (1 if fits else 1 + MARGIN)
    if not fits and last_over is not None and last_over > small_budget:
        step = min(step, -2 * (last_over - small_budget))
    return small_budget + step
