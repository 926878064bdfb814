"""The two ends of the trade-off: keep everything, or keep only the newest value."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from remat.schedules import Graph, Schedule, ScheduleEntries, StrategyNotApplicable, checkpoint_all_schedule

from .._context import Outcome, SolveContext

__all__ = ["LARGEST_GRAPH", "LARGEST_PLAN", "check_checkpoint_last", "checkpoint_all", "checkpoint_last",
           "checkpoint_last_schedule"]

LARGEST_PLAN = 2_000_000
"""Most computations a checkpoint-last plan may hold: its plan grows with the square of the graph (a
1,635-node LSTM: 1.0 million; a 7,956-node GPT: 15.6 million, which take tens of seconds to make and simulate:
benchmarks/README.md, "checkpoint-last on a large graph").
(docs/tuning.md)"""

LARGEST_GRAPH = 20_000
"""Most nodes of a graph checkpoint-last takes: counting its plan keeps every node's ancestors as a bit set, n^2 / 16
bytes on a training graph (25,000 nodes: 148 MB and 0.4 s to refuse; 100,000: 1.4 GB and 5.6 s), and on such graphs
the plan is far over :data:`LARGEST_PLAN` anyway. (docs/tuning.md)"""


def checkpoint_all(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """No rematerialization: every node once, each value kept until its last use (overhead 1)."""
    return Outcome(checkpoint_all_schedule(graph))


def checkpoint_last_schedule(graph: Graph) -> Schedule:
    """Keep only the value computed last (when anything still reads it); recompute all else per stage.

    Stage t then holds t - 1 alone, so it computes t and every other dep of t with all of that dep's
    ancestors (none of them is t - 1, the newest node before t): the recompute closure, read off
    ancestor sets kept as bit sets (n^2 / 8 bytes) rather than walked node by node.
    """
    n = graph.size
    nodes = np.arange(n - 1, dtype=np.int64)
    held = nodes[np.asarray(graph.last_use[:-1], dtype=np.int64) > nodes]
    computes = [_bits(bits, t + 1) for t, bits in enumerate(_stage_computes(graph))]
    stage = np.repeat(np.arange(n, dtype=np.int64), [len(c) for c in computes])
    return Schedule.of_entries(ScheduleEntries(n, stage, np.concatenate(computes), held, held + 1, held + 2))


def check_checkpoint_last(graph: Graph) -> None:
    """Raise StrategyNotApplicable when the plan would hold more than :data:`LARGEST_PLAN` computations."""
    count = sum(bits.bit_count() for bits in _stage_computes(graph))
    if count > LARGEST_PLAN:
        raise StrategyNotApplicable(
            f"checkpoint-last recomputes every ancestor at every stage: on this graph of {graph.size:,} nodes its "
            f"plan would compute {count:,} values, more than the {LARGEST_PLAN:,} it makes. For plans near the "
            "smallest memory use checkmate, or linearized-greedy.")


def _stage_computes(graph: Graph) -> list[int]:
    """Per stage t, the bit set of what checkpoint-last computes there: t, and every dep of t but t - 1 (which
    it holds) with all of their ancestors."""
    lineage: list[int] = []  # bit u of lineage[v]: u is v or one of its ancestors
    computes: list[int] = []
    for t, deps in enumerate(graph.deps):
        computes.append((1 << t) | _union(lineage[u] for u in deps if u != t - 1))
        lineage.append((1 << t) | _union(lineage[u] for u in deps))
    return computes


def _union(sets: Iterable[int]) -> int:
    """The union of bit sets."""
    out = 0
    for bits in sets:
        out |= bits
    return out


def _bits(bits: int, width: int) -> np.ndarray:
    """The positions of the set bits of ``bits`` (below ``width``), ascending."""
    raw = np.frombuffer(bits.to_bytes((width + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).astype(np.int64)


def checkpoint_last(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """Minimum-memory baseline of the Checkmate paper: quadratic recomputation, smallest footprint."""
    return Outcome(checkpoint_last_schedule(graph))
