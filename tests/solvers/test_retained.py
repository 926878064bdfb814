"""The plan read off a retention relaxation's solution, and the solve process's chain starting again from it."""

from __future__ import annotations

import numpy as np
from factories import BENCHMARK_DIR
from processes import helper_messages

from remat.schedules import Graph, plan_from_schedule, resolve_budget, simulate
from remat.solvers import Convergence, SolveContext
from remat.solvers.baselines import best_baseline
from remat.solvers.checkmate._anneal import _Pool, _start_again
from remat.solvers.checkmate._anneal_worker import BoundFound, StartFound
from remat.solvers.search import Annealer, Timeline, retained_plan, timeline_from_schedule


def captured(name: str) -> Graph:
    return Graph.from_path(str(BENCHMARK_DIR / "captured" / f"{name}.json"))


def held_across(g: Graph, stage: int) -> list[int]:
    """The values checkpoint-all holds across ``stage``: made before it, read after it, not read at it."""
    return [v for v in range(stage) if g.users[v] and g.users[v][-1] > stage and stage not in g.users[v]]


def test_a_value_dropped_across_a_stage_is_not_resident_there_and_is_computed_once_after_it() -> None:
    g = captured("gpt-12")
    peak = int(np.argmax(Timeline(g).peaks))
    dropped = [v for v in held_across(g, peak) if g.memory[v] > 0][::2]  # every other value held at the peak
    extras = retained_plan(g, np.array(dropped), np.full(len(dropped), peak))
    tl = Timeline.with_extras(g, extras)
    end_of_peak = peak * g.size + g.size - 1
    assert all(not tl.live_at(v, end_of_peak) for v in dropped)
    assert all(tl.live_at(v, end_of_peak) for v in held_across(g, peak) if v not in dropped)
    again = [v for v, _ in extras]
    assert len(again) == len(set(again)) and set(dropped) <= set(again)  # one stage: each value once at most
    assert all(t > peak for _, t in extras)
    simulation = simulate(g, plan_from_schedule(g, tl.schedule()))
    assert simulation.peak_memory == tl.peak() and simulation.cost == tl.total_cost


def test_the_helper_sends_the_plan_of_each_rising_lp_bound_and_it_costs_what_it_says() -> None:
    g = captured("lstm-48")
    budget = resolve_budget(g, budget_ratio=0.5)
    messages = helper_messages(g, budget, ("bound",), time_limit_s=20)
    starts = [m for m in messages if isinstance(m, StartFound)]
    assert starts
    for start in starts:
        bound = next(m for m in messages if isinstance(m, BoundFound) and m.how == start.how)
        assert messages.index(start) < messages.index(bound)  # before the bound that may stop the solve
        annealer = Annealer(g, budget)
        annealer.adopt(start.extras)
        assert bound.value <= start.cost and abs(annealer.tl.total_cost - start.cost) <= 1e-9 * start.cost
    told = helper_messages(g, budget, ("bound",), time_limit_s=20, told=g.base_cost * 1.0001)
    assert not any(isinstance(m, StartFound) for m in told)  # none cheaper than a plan the parent has


def test_the_chain_tries_the_last_start_once_when_it_costs_less_than_its_best() -> None:
    g = captured("gpt-12")
    budget = resolve_budget(g, budget_ratio=0.5)
    pool = _Pool(g, budget, SolveContext())
    annealer = Annealer(g, budget)
    annealer.run(SolveContext(), max_moves=2000)
    assert annealer.best_cost is not None
    pool.offer_start(StartFound(annealer.best_cost, [], "dearer"))
    assert pool.ctx.record.trying and not pool.ctx.record.converged(Convergence(), 1e9)
    assert pool.take_start(annealer) is None and not pool.ctx.record.trying  # no cheaper than the chain's best
    pool.offer_start(StartFound(annealer.best_cost * 0.98, [(0, 5)], "cheaper"))
    pool.offer_start(StartFound(annealer.best_cost * 0.99, [(0, 6)], "last"))
    start = pool.take_start(annealer)
    assert start is not None and start.how == "last" and pool.ctx.record.trying  # until it has been tried
    pool.tried(True, "tried")
    assert not pool.ctx.record.trying and pool.log[-1] == "tried" and pool.take_start(annealer) is None
    pool.tried(False, "did not come down")  # then no more are tried
    pool.offer_start(StartFound(annealer.best_cost * 0.9, [(0, 7)], "later"))
    assert pool.take_start(annealer) is None and not pool.ctx.record.trying


def test_the_chain_goes_on_from_a_start_only_when_it_fits_for_less() -> None:
    g = captured("gpt-12")
    budget = resolve_budget(g, budget_ratio=0.5)
    baseline = best_baseline(g, budget, SolveContext())
    assert baseline is not None
    chain, searched = Annealer(g, budget), Annealer(g, budget)
    chain.adopt(timeline_from_schedule(g, baseline.schedule).extras())
    searched.run(SolveContext(), max_moves=4000)
    assert chain.best_cost is not None and searched.best_cost is not None and searched.best_cost < chain.best_cost
    better = StartFound(searched.best_cost, list(searched.best or ()), "LP")
    worse = StartFound(chain.best_cost, list(chain.best or ()), "LP")
    reported: list[float] = []
    fits, line = _start_again(g, budget, SolveContext(), chain, better, lambda cost, _: reported.append(cost))
    assert fits and "the chain goes on from it" in line
    assert chain.best_cost == reported[0] and abs(reported[0] - searched.best_cost) <= 1e-9 * reported[0]
    fits, line = _start_again(g, budget, SolveContext(), searched, worse, lambda cost, _: reported.append(cost))
    assert fits and "no less than the chain's best" in line and len(reported) == 1
