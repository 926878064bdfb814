"""Convergence: a solve whose best plan stopped improving stops before its time limit, as feasible."""

from __future__ import annotations

import threading
import time

from factories import benchmark_graph

from remat.solvers import STRATEGIES, Convergence, ResultStatus, SolveContext, SolveLimits, SolveRecord, Stop, solve


def test_the_rule_looks_at_the_improvement_over_its_window() -> None:
    rule = Convergence(window_s=2.0, tolerance=0.01)
    assert not rule.reached([], now=10.0)                       # no plan yet
    assert not rule.reached([(9.0, 100.0)], now=10.0)           # the first plan is younger than the window
    assert rule.reached([(1.0, 100.0), (7.5, 99.5)], now=10.0)  # 0.5 % in the last 2 s
    assert not rule.reached([(1.0, 100.0), (8.5, 98.0)], now=10.0)
    assert rule.reached([(1.0, 100.0), (5.0, 90.0)], now=10.0)  # 10 % better, but long ago
    assert not rule.reached([(1.0, 100.0), (5.0, 90.0)], now=10.0, window_s=rule.floor_window_s)


def test_while_no_plan_fits_the_rule_looks_at_the_leanest_plans_peak_over_a_longer_window() -> None:
    rule = Convergence(window_s=0.1, tolerance=0.01)
    ctx = SolveContext(SolveLimits(convergence=rule), started=time.monotonic() - 1.0)
    ctx.report_leanest(100)
    ctx.started -= 1.0                                          # a second later
    ctx.report_leanest(90)
    assert not ctx.converged()                                  # the floor just fell by 10 %
    ctx.started -= 1.0
    assert ctx.converged()                                      # it has not fallen for 1 s, twice the 0.5 s asked
    ctx.report(incumbent_cost=5.0)
    assert not ctx.converged()                                  # a plan: its own trail decides, and it is new


def test_a_solve_whose_own_chain_still_improves_has_not_converged() -> None:
    rule = Convergence(window_s=1.0, tolerance=0.01)
    ctx = SolveContext(SolveLimits(convergence=rule), started=time.monotonic() - 1.0)
    ctx.report(incumbent_cost=100.0, lower_bound=99.5)          # a helper's plan, near its bound
    ctx.report_chain(120.0)                                     # the solve process's chain, behind it
    ctx.started -= 2.0
    ctx.report_chain(110.0)                                     # ... improving by 8 % a moment ago
    assert not ctx.converged()
    ctx.started -= 2.0
    assert ctx.converged()                                      # neither has improved for 2 s
    alone = SolveContext(SolveLimits(convergence=Convergence(window_s=1.0)), started=time.monotonic() - 5.0,
                         record=SolveRecord(trail=[(0.0, 100.0)], bound=100.0))
    assert alone.converged()                                    # no chain of its own: the best plan decides


def test_a_plan_far_above_its_bound_waits_longer_and_a_plan_without_one_longest() -> None:
    rule = Convergence(window_s=1.0, tolerance=0.01, gap_per_window=0.01, max_windows=5.0)
    ctx = SolveContext(SolveLimits(convergence=rule), started=time.monotonic())
    ctx.report(incumbent_cost=100.0)
    ctx.started -= 4.5
    assert not ctx.converged()                                  # no bound yet: 5 windows
    ctx.report(lower_bound=97.0)                                # 3 points below the plan: 3 windows
    assert ctx.converged()
    ctx.report(incumbent_cost=99.9)                             # too small a change to count
    assert ctx.converged()
    far = SolveContext(SolveLimits(convergence=rule), started=time.monotonic() - 4.5,
                       record=SolveRecord(trail=[(0.0, 100.0)], bound=80.0))
    assert not far.converged()                                  # 20 points: the longest window, 5 s
    far.started -= 1.0
    assert far.converged()
    assert rule.window_for(0.0) == rule.window_for(0.01) == 1.0 and rule.window_for(0.2) == rule.window_for(None) == 5.0


def test_from_its_horizon_a_stalled_solve_far_from_its_bound_answers_and_an_improving_one_goes_on() -> None:
    rule = Convergence(window_s=1.0, tolerance=0.01, gap_per_window=0.01, max_windows=5.0, horizon_s=8.0)
    assert rule.window_for(None, now=7.9) == 5.0
    assert rule.window_for(None, now=8.0) == rule.window_for(0.2, now=30.0) == 1.0
    far = SolveContext(SolveLimits(convergence=rule), started=time.monotonic() - 7.0,
                       record=SolveRecord(trail=[(0.0, 100.0), (4.0, 90.0)], bound=50.0))
    assert not far.converged()                                  # 3 s without a gain, 44 points above: 5 s
    far.started -= 1.0
    assert far.converged()                                      # the horizon: 1 s without a gain will do
    late = SolveContext(SolveLimits(convergence=rule), started=time.monotonic() - 9.0,
                        record=SolveRecord(trail=[(0.0, 100.0), (8.5, 90.0)], bound=50.0))
    assert not late.converged()                                 # past the horizon, but improved 0.5 s ago


def test_a_budget_under_every_plan_found_is_answered_once_the_floor_stops_falling() -> None:
    """rl500 at 0.5 of its peak: no plan is known; the solve ends when the leanest plan's peak stops
    falling, well before its limit, and says so."""
    graph = benchmark_graph("rl500")
    started = time.monotonic()
    result = solve(graph, budget_ratio=0.5, time_limit_s=60, threads=2,
                   convergence=Convergence(window_s=0.5, tolerance=0.01))
    assert time.monotonic() - started < 30
    assert result.status is ResultStatus.TIMEOUT and result.smallest_peak > result.budget
    assert "no plan fits, and the leanest plan's peak fell by less than 1.00% in 2.5 s" in result.log[-2]


def test_a_converged_solve_stops_early_and_is_not_a_cancel() -> None:
    graph = benchmark_graph("rl500")
    started = time.monotonic()
    result = solve(graph, budget_ratio=0.8, time_limit_s=60, convergence=Convergence(window_s=1.0, tolerance=0.05))
    elapsed = time.monotonic() - started
    assert result.status is ResultStatus.FEASIBLE and result.fits
    assert elapsed < 30
    assert "stopped when converged" in result.log[-1]


def test_a_cancel_during_a_converging_solve_is_still_a_cancel() -> None:
    graph = benchmark_graph("rl500")
    stop = Stop()
    threading.Timer(1.5, stop.set).start()
    result = solve(graph, budget_ratio=0.8, time_limit_s=60, stop_event=stop,
                   convergence=Convergence(window_s=30.0, tolerance=0.0))
    assert result.status is ResultStatus.CANCELLED


def test_a_solve_stops_when_converged_unless_told_to_run_to_its_limit() -> None:
    graph = benchmark_graph("rl500")
    started = time.monotonic()
    by_default = solve(graph, budget_ratio=0.8, time_limit_s=120)
    assert time.monotonic() - started < 60
    assert by_default.status is ResultStatus.FEASIBLE and "stopped when converged" in by_default.log[-1]
    started = time.monotonic()
    to_the_limit = solve(graph, budget_ratio=0.8, time_limit_s=4, convergence=None)
    # The search leaves a few milliseconds per thousand nodes before the limit to simulate its best plan.
    assert time.monotonic() - started >= 3.9
    assert to_the_limit.status is ResultStatus.FEASIBLE
    assert not any("stopped when converged" in line for line in to_the_limit.log)


def test_only_anytime_searches_stop_when_converged() -> None:
    # A rule that any pause satisfies would stop checkmate-lp while its LP solves, before any rounding.
    eager = Convergence(window_s=0.01, tolerance=0.5)
    assert [s.name for s in STRATEGIES.values() if s.anytime] == ["checkmate", "checkmate-offload"]
    result = solve(benchmark_graph("fcn8"), budget_ratio=0.8, strategy="checkmate-lp", convergence=eager)
    assert result.fallback is None and not any("stopped when converged" in line for line in result.log)
