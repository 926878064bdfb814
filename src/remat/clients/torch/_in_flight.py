"""What one micro-batch leaves the others a pipeline stage holds at once, and how a plan is made to leave it.

A stage of a 1F1B pipeline holds what the forward of up to k micro-batches saved while one of them runs: a plan
that peaks at ``b`` bytes and saves ``s`` per micro-batch holds ``b + (k - 1) s``. A solve bounds the peak, not
what the forward saves, and keeps whatever fits under the peak where the backward starts. So the graph is given
a reserve (:func:`with_reserve`): a node that holds no tensor, read by the first backward op, whose bytes leave
at most ``s`` there for what the forward saves. Solved within ``b``, the plan saves at most ``s``.
"""

from __future__ import annotations

import dataclasses

from remat.schedules import Graph, Plan, Simulation

from ._joint import ENGINE, JointGraph, Producer
from ._lower import split_point

__all__ = ["RESERVE", "held_at_split", "least_saved", "micro_batch_bytes", "reserve_bytes", "with_reserve"]

RESERVE = "<reserve for micro-batches in flight>"

SHARED = ("parameters", "buffers", "constants", "gradients", "tangents", *ENGINE)
"""Fixed memory every micro-batch shares: state, gradients, the engine's buffers, the backward's own tangents."""


def with_reserve(joint: JointGraph, nbytes: int) -> JointGraph:
    """``joint`` with a reserve of ``nbytes`` that its first backward producer reads: held from just before that
    op to its end, where the plan holds what the forward saved."""
    first = next(i for i, p in enumerate(joint.producers) if p.kind == "backward")
    reader = joint.producers[first]
    reserve = Producer(name=RESERVE, op="reserve for micro-batches in flight", deps=(), memory=nbytes,
                       kind="forward", rng=False, reserve=True)
    producers = (*joint.producers[:first], reserve, dataclasses.replace(reader, deps=(*reader.deps, RESERVE)),
                 *joint.producers[first + 1:])
    return dataclasses.replace(joint, producers=producers)


def reserve_bytes(joint: JointGraph, *, peak: int, saved: int) -> int:
    """The reserve that leaves at most ``saved`` bytes per micro-batch where the backward starts, in a plan that
    peaks at ``peak`` at most (0 where the peak alone leaves no more)."""
    first = next(p for p in joint.producers if p.kind == "backward")
    return max(0, peak - sum(joint.fixed[k] for k in SHARED) - saved - first.memory)


def held_at_split(joint: JointGraph, graph: Graph, plan: Plan, simulation: Simulation) -> int:
    """Bytes the step holds when its backward starts: what its forward saves, and the fixed memory (not the
    reserve, which no tensor holds)."""
    steps = [(op, graph.nodes[v].id) for op, v in plan.steps]
    split = split_point(joint, steps)
    reserved = joint.index[RESERVE].memory if any(name == RESERVE for _, name in steps[:split]) else 0
    return int(simulation.timeline[split - 1]) - reserved


def micro_batch_bytes(joint: JointGraph, graph: Graph, plan: Plan, simulation: Simulation) -> int:
    """Bytes one micro-batch holds between its forward and its backward: what the step holds when its backward
    starts, less what every micro-batch shares."""
    return held_at_split(joint, graph, plan, simulation) - sum(joint.fixed[k] for k in SHARED)


def least_saved(joint: JointGraph) -> int:
    """The least :func:`micro_batch_bytes` of any plan: the fixed memory every micro-batch holds of its own (its
    inputs and outputs), which no plan frees before its backward."""
    return joint.fixed_memory - sum(joint.fixed[k] for k in SHARED)
