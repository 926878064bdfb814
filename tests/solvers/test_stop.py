"""A stop carries its reason, and the reason decides the result's status once, in solve()."""

from __future__ import annotations

import pytest
from factories import benchmark_graph

from remat.solvers import Stop, StopReason, solve


@pytest.mark.parametrize(("reason", "with_plan", "without_plan"), [
    (StopReason.CANCEL, "cancelled", "cancelled"),
    (StopReason.DEADLINE, "feasible", "timeout"),
    (StopReason.CONVERGED, "feasible", "timeout"),
])
def test_the_reason_of_a_stop_decides_the_status(reason: StopReason, with_plan: str, without_plan: str):
    graph = benchmark_graph("vgg16")
    statuses = []
    for strategy in ("chen-greedy", "checkmate"):  # a heuristic keeps a plan; the MILP stopped at once has none
        stop = Stop()
        stop.request(reason)
        statuses.append(solve(graph, budget_ratio=1.0, strategy=strategy, stop_event=stop, time_limit_s=5).status)
    assert statuses == [with_plan, without_plan]


def test_the_first_reason_is_kept_and_a_bare_set_is_a_cancel():
    stop = Stop()
    assert stop.reason is None
    stop.request(StopReason.DEADLINE)
    stop.request(StopReason.CANCEL)
    assert stop.reason is StopReason.DEADLINE
    bare = Stop()
    bare.set()
    assert bare.reason is StopReason.CANCEL
