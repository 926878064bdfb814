"""SolveContext's copies: each says what it shares with the solve's context and what it replaces."""

from __future__ import annotations

import time

from remat.solvers import Convergence, Progress, SolveContext, SolveLimits, Stop


def _ctx(seen: list[Progress]) -> SolveContext:
    limits = SolveLimits(time_limit_s=60.0, convergence=Convergence())
    return SolveContext(limits, on_progress=seen.append, started=time.monotonic() - 10.0)


def test_within_shortens_the_deadline_and_shares_the_rest() -> None:
    seen: list[Progress] = []
    ctx = _ctx(seen)
    part = ctx.within(5.0)
    assert 14.0 < part.limits.time_limit_s <= 15.1 and part.remaining_s() <= 5.0
    assert ctx.within(3600.0).limits.time_limit_s == 60.0            # never past the solve's own limit
    part.report(incumbent_cost=3.0, message="found")
    assert ctx.record.log == ["found"] and [cost for _, cost in ctx.record.trail] == [3.0] and len(seen) == 1
    part.stop_event.set()
    assert ctx.stopped()
    assert part.limits.convergence == ctx.limits.convergence and part.started == ctx.started


def test_reporting_to_and_stopped_by_replace_one_handle_each() -> None:
    seen: list[Progress] = []
    ctx = _ctx(seen)
    filtered: list[Progress] = []
    stop = Stop()
    part = ctx.reporting_to(filtered.append).stopped_by(stop)
    part.report(incumbent_cost=2.0, message="found")
    assert filtered and not seen and ctx.record.log == ["found"]     # the record is still the solve's
    stop.set()
    assert part.stopped() and not ctx.stopped()


def test_a_detached_copy_shares_only_the_stop_flag() -> None:
    seen: list[Progress] = []
    ctx = _ctx(seen)
    side = ctx.detached(5.0)
    side.report(incumbent_cost=1.0, message="another budget's plan")
    side.report_leanest(7.0)
    assert not seen and ctx.record.log == [] and not ctx.record.trail and not ctx.record.floor_trail
    assert side.limits.convergence is None and side.remaining_s() <= 5.0
    ctx.stop_event.set()
    assert side.stopped()
