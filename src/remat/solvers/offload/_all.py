"""offload-all: every forward value the backward reads goes to the host, and comes back just in time.

The baseline of the early out-of-core systems (vDNN, SuperNeurons: Rhu et al. 2016, Wang et al. 2018):
no recomputation, each value kept only while the forward pass reads it. As vDNN synchronises a layer's
offloads before the next layer runs, the computation waits for each copy before the compute after the
value's last forward read, so the value's memory is free there whatever the link: over a link slower
than the computation, the step runs at the link's pace. It ignores the budget, so it is what offloading
alone can save, at what cost, when everything moves.
"""

from __future__ import annotations

from remat.schedules import Graph, Plan, checkpoint_all_plan

from .._context import Outcome, SolveContext
from ._insert import Computes, IdleInterval, idle_intervals, insert_transfers
from ._transfer import required_transfer

__all__ = ["offload_all", "offload_all_plan"]


def offload_all_plan(graph: Graph, *, host_budget: int | None = None) -> Plan:
    """The checkpoint-all plan with every forward value that a backward node reads moved to the host.

    A value leaves after its last read before its first backward read (its forward reads, or its own
    compute), the computation waiting for its copy before the next compute, and its reload is issued
    just in time: right before the compute that precedes that first backward read, so that the copy
    overlaps one compute. Values of 0 bytes, and those whose first
    backward read comes right after their last touch, stay. With ``host_budget``, values are moved in
    the order they leave while their host copies fit; the rest stay on the device.
    """
    plan = checkpoint_all_plan(graph)
    computes = Computes(graph, plan)
    step_of = {v: k for k, (op, v) in enumerate(plan.steps) if op == "compute"}
    moves = []
    host = 0
    for gap in sorted(_first_backward_gaps(graph, plan, step_of), key=lambda gap: gap.after):
        if host_budget is not None and host + gap.bytes > host_budget:
            continue
        host += gap.bytes
        moves.append((gap, computes.steps_back(gap.after, gap.before, 1)))
    waits = [(gap.node, computes.steps[computes.position(gap.after) + 1]) for gap, _ in moves]
    return insert_transfers(plan, moves, waits)


def _first_backward_gaps(graph: Graph, plan: Plan, step_of: dict[int, int]) -> list[IdleInterval]:
    """The idle interval of each forward value, of some bytes, that ends at its first backward reader."""
    backward = graph.backward
    first_read = {v: step_of[min(w for w in users if backward[w])]
                  for v, users in enumerate(graph.users) if not backward[v] and any(backward[w] for w in users)}
    return [gap for gap in idle_intervals(graph, plan) if gap.bytes and first_read.get(gap.node) == gap.before]


def offload_all(graph: Graph, budget: int, ctx: SolveContext) -> Outcome:
    """The offload-all plan (it needs the transfer parameters only to be simulated)."""
    required_transfer(ctx, "offload-all")
    plan = offload_all_plan(graph, host_budget=ctx.offload.host_budget)
    moved = sum(op == "offload" for op, _ in plan.steps)
    ctx.report(message=f"offload-all: {moved} forward values moved to the host")
    return Outcome(None, plan=plan)
