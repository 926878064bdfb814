"""offload-all and offload-window: registered, honest, and what they plan on hand-made and real graphs.

H is factories.three_layers, as in test_offload_insert.py: x1 (100 bytes) is idle from x2 to g1, x2
(10 bytes) from x3 to g2, and x3 is read by the loss right after its compute. Checkpoint-all costs 11
and peaks at 131 (while g3 runs); g1 alone needs x1, g2 and g1 (120), the smallest budget any plan fits.
At 50 bytes per cost unit a copy of x1 lasts 2, of x2 0.2; at 10 (SLOW), 10 and 1: slower than the computes.
"""

import heapq

import pytest
from factories import benchmark_graph, chain, graph_doc, random_chains, random_dags, three_layers
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import Graph, InvalidRequest, Plan, Transfer, simulate
from remat.solvers import STRATEGIES, SolveContext, Stop, StrategyKind, solve
from remat.solvers.offload import OFFLOAD_BASELINES, WindowPlanner, offload_all_plan

H = three_layers()
OFFLOADING = ["offload-all", "offload-window"]
LINK = Transfer(bandwidth=50)
SLOW = Transfer(bandwidth=10)
CAPTURED = benchmark_graph("captured/resnet-8x3")  # a ResNet training step captured from PyTorch


def _moved(g, plan):
    return [(op, g.ids[v]) for op, v in plan.steps if op in ("offload", "reload")]


def _steps(g, plan):
    return [(op, g.ids[v]) for op, v in plan.steps]


def _check_honest(g, result, transfer):
    """The plan re-simulates to the result's numbers, and the status says whether it fits."""
    sim = simulate(g, result.plan, transfer=transfer)
    assert (result.cost, result.peak_memory, result.host_peak_memory) == (
        sim.cost, sim.peak_memory, sim.host_peak_memory)
    fits = sim.peak_memory <= result.budget and (
        result.host_budget is None or sim.host_peak_memory <= result.host_budget)
    assert result.status.value == ("feasible" if fits else "over_budget")


def test_they_are_engine_free_offloading_baselines_listed_after_the_others():
    assert [s.name for s in OFFLOAD_BASELINES] == OFFLOADING
    for name in OFFLOADING:
        strategy = STRATEGIES[name]
        assert strategy.kind is StrategyKind.BASELINE and strategy.offloads and not strategy.backends
    assert STRATEGIES["offload-window"].knob == "window"
    assert STRATEGIES["offload-all"].knob is None


@pytest.mark.parametrize("strategy", OFFLOADING)
def test_without_transfer_parameters_the_request_is_refused(strategy):
    with pytest.raises(InvalidRequest, match=f"Strategy '{strategy}' moves values to host memory.*transfer"):
        solve(H, budget=200, strategy=strategy)


@pytest.mark.parametrize("strategy", OFFLOADING)
def test_run_directly_without_transfer_parameters_they_say_what_is_missing(strategy):
    with pytest.raises(InvalidRequest, match=f"Strategy '{strategy}' moves values to host memory.*transfer"):
        STRATEGIES[strategy].run(H, 200, SolveContext())


def test_offload_all_moves_every_forward_value_the_backward_reads_later_and_reloads_it_just_in_time():
    result = solve(H, budget=131, strategy="offload-all", transfer=LINK)
    # x3's first backward read (the loss) comes right after its compute: nothing to move. x2 comes back
    # before g3 (the compute before its reader g2), x1 before g2 (the compute before g1).
    assert _moved(H, result.plan) == [("offload", "x1"), ("offload", "x2"), ("reload", "x2"), ("reload", "x1")]
    reloads = [k for k, (op, _) in enumerate(result.plan.steps) if op == "reload"]
    assert [H.ids[result.plan.steps[k + 1][1]] for k in reloads] == ["g3", "g2"]
    # x1's copy [8, 10] hides behind g2 [8, 10], x2's [6, 6.2] behind g3: cost 11, the base cost. While g2
    # runs, x1 is back beside x2, g3 and g2: 130.
    assert (result.cost, result.peak_memory, result.host_peak_memory) == (11.0, 130, 110)
    assert result.status.value == "feasible"


def test_offload_all_holds_on_the_host_exactly_the_bytes_it_offloads():
    for g in (H, chain(6, memory=10), benchmark_graph("resnet50"), CAPTURED):
        plan = offload_all_plan(g)
        offloaded = [v for op, v in plan.steps if op == "offload"]
        assert offloaded and len(offloaded) == len(set(offloaded))
        assert all(not g.backward[v] for v in offloaded)
        transfer = Transfer(bandwidth=float(g.memory.max()))
        assert simulate(g, plan, transfer=transfer).host_peak_memory == sum(int(g.memory[v]) for v in offloaded)


def test_offload_all_waits_for_each_copy_before_the_next_compute():
    result = solve(H, budget=131, strategy="offload-all", transfer=SLOW)
    assert _steps(H, result.plan)[:8] == [("compute", "x1"), ("compute", "x2"), ("offload", "x1"), ("wait", "x1"),
                                          ("compute", "x3"), ("offload", "x2"), ("wait", "x2"), ("compute", "loss")]
    # x1's copy [1, 11] holds x3 until 11; x2's, queued behind it, [11, 12] ends before loss could start (13).
    # x1 comes back beside g2 [16, 18] but its copy lasts until 26: g1 [26, 27]. The peak is g2's 130.
    sim = result.simulation
    assert [(s.start, s.end) for s in sim.timing.stream("wait")] == [(11, 11), (13, 13)]
    assert (result.cost, result.peak_memory) == (27.0, 130)


def test_offload_window_moves_only_what_the_budget_needs():
    # 131 fits without moving anything; at 130 x1 leaves and comes back just in time, hidden behind g2
    # (the peak is then g2's 130); at 120 x1 must not be back before g2 has ended: its copy [10, 12] is
    # exposed, cost 13, peak 120 (x1, g2, g1).
    expected = {131: (11.0, 131, 0, []), 130: (11.0, 130, 100, [("offload", "x1"), ("reload", "x1")]),
                120: (13.0, 120, 100, [("offload", "x1"), ("reload", "x1")])}
    for budget, (cost, peak, host, moved) in expected.items():
        result = solve(H, budget=budget, strategy="offload-window", transfer=LINK)
        assert (result.cost, result.peak_memory, result.host_peak_memory) == (cost, peak, host)
        assert _moved(H, result.plan) == moved
        assert result.status.value == "feasible"


def test_over_a_slow_link_offload_window_waits_for_the_copies_it_needs():
    # At 120, x1 must be gone from loss to g2. Its copy [1, 11] cannot end before loss would start (5): loss
    # waits for it; x2's copy, queued behind, ends at 12. x1 comes back once g2 has ended (16) and g1 waits
    # for it (26). The copies the link cannot hide cost 16 of the 27.
    result = solve(H, budget=120, strategy="offload-window", transfer=SLOW)
    assert _steps(H, result.plan)[:10] == [
        ("compute", "x1"), ("compute", "x2"), ("offload", "x1"), ("compute", "x3"), ("offload", "x2"),
        ("wait", "x1"), ("compute", "loss"), ("reload", "x2"), ("compute", "g3"), ("free", "x3")]
    assert (result.cost, result.peak_memory, result.status.value) == (27.0, 120, "feasible")
    unheld = Plan(tuple(step for step in result.plan.steps if step[0] != "wait"))
    assert simulate(H, unheld, transfer=SLOW).peak_memory == 131  # without the wait, nothing saved


@settings(max_examples=60, deadline=None)
@given(st.one_of(random_dags(max_nodes=14, training=True), random_chains(max_length=10)), st.floats(0, 1),
       st.sampled_from([0.5, 10.0, 1000.0]), st.sampled_from([0, 1]))
def test_offload_window_fits_every_budget_a_plan_can_fit(g, ratio, bandwidth, latency):
    # Each compute with its inputs alone is the floor of every plan; down to it, whatever the link, some
    # window fits, and no window's plan is simulated over the budget the walk planned for.
    transfer = Transfer(bandwidth=bandwidth, latency=latency)
    budget = g.min_feasible_budget + int(ratio * (g.checkpoint_all_peak - g.min_feasible_budget))
    result = solve(g, budget=budget, strategy="offload-window", transfer=transfer)
    _check_honest(g, result, transfer)
    assert result.fits
    planner = WindowPlanner(g, transfer)
    for window in planner.windows()[::8]:
        assert simulate(g, planner.plan(window=window, budget=budget), transfer=transfer).peak_memory <= budget


@settings(max_examples=60, deadline=None)
@given(st.one_of(random_dags(max_nodes=14, training=True), random_chains(max_length=10)), st.floats(0.2, 1.2),
       st.sampled_from([0.5, 10.0, 1000.0]), st.sampled_from([0, 1]), st.sampled_from([None, 0, 40]))
def test_every_plan_is_valid_and_reports_the_simulated_numbers(g, ratio, bandwidth, latency, host_budget):
    transfer = Transfer(bandwidth=bandwidth, latency=latency)
    budget = max(g.min_feasible_budget, int(ratio * g.checkpoint_all_peak))
    results = {s: solve(g, budget=budget, strategy=s, transfer=transfer, host_budget=host_budget) for s in OFFLOADING}
    for result in results.values():
        _check_honest(g, result, transfer)
        if host_budget is not None:
            assert result.host_peak_memory <= host_budget
    window, everything = results["offload-window"], results["offload-all"]
    if window.fits and everything.fits:
        assert window.cost <= everything.cost + 1e-9


@pytest.mark.parametrize("name", ["mobilenet", "resnet50", "captured/resnet-8x3", "captured/gpt-12"])
@pytest.mark.parametrize("link", [1.0, 10.0])
def test_offload_window_is_at_least_as_good_as_offload_all_where_both_fit(name, link):
    g = benchmark_graph(name)
    # copies of the whole step's bytes last `link` times the step's compute
    transfer = Transfer(bandwidth=float(g.memory.sum()) / (link * g.base_cost))
    for ratio in (0.9, 0.6):
        window = solve(g, budget_ratio=ratio, strategy="offload-window", transfer=transfer)
        everything = solve(g, budget_ratio=ratio, strategy="offload-all", transfer=transfer)
        _check_honest(g, window, transfer)
        if everything.fits:
            assert window.fits and window.cost <= everything.cost


def test_below_the_remat_only_floor_offloading_still_fits():
    # checkpoint-last keeps only the newest value yet peaks at 0.93 of checkpoint-all on this ResNet (each
    # stage recomputes a residual block's cone); with copies that keep up with the computes, offloading
    # fits 0.3 and 0.2 with nothing recomputed.
    g = CAPTURED
    floor = solve(g, budget_ratio=1.0, strategy="checkpoint-last").peak_memory
    transfer = Transfer(bandwidth=20 * float(g.memory.sum()) / g.base_cost)
    for ratio in (0.3, 0.2):
        result = solve(g, budget_ratio=ratio, strategy="offload-window", transfer=transfer)
        assert result.budget < 0.35 * floor
        assert result.status.value == "feasible"
        assert result.simulation.recomputations == 0
        assert result.overhead < 1.01


def test_below_the_remat_only_floor_a_slow_link_fits_too_at_the_price_of_its_copies():
    # Copies of the whole step's values last 5 times the step: the link cannot keep up, so the computation
    # waits for the copies. Still no recomputation, and the budget holds down to 0.2 of checkpoint-all.
    g = CAPTURED
    floor = solve(g, budget_ratio=1.0, strategy="checkpoint-last").peak_memory
    transfer = Transfer(bandwidth=float(g.memory.sum()) / (5 * g.base_cost))
    for ratio in (0.3, 0.2):
        result = solve(g, budget_ratio=ratio, strategy="offload-window", transfer=transfer)
        assert result.budget < 0.35 * floor
        _check_honest(g, result, transfer)
        assert result.status.value == "feasible" and result.simulation.recomputations == 0
        assert any(op == "wait" for op, _ in result.plan.steps)
        # no cheaper than the copies it makes, one after the other on the offload stream: these take longer
        # than the computes, and the computes wait for them
        copying = sum(s.end - s.start for s in result.simulation.timing.stream("offload"))
        assert g.base_cost < copying <= result.cost
        everything = solve(g, budget_ratio=ratio, strategy="offload-all", transfer=transfer)
        assert everything.fits and result.cost < everything.cost


def test_offload_window_keeps_its_host_copies_under_the_host_budget():
    g = CAPTURED
    transfer = Transfer(bandwidth=20 * float(g.memory.sum()) / g.base_cost)
    free = solve(g, budget_ratio=0.3, strategy="offload-window", transfer=transfer)
    capped = solve(g, budget_ratio=0.3, strategy="offload-window", transfer=transfer,
                   host_budget=free.host_peak_memory // 2)
    assert capped.host_peak_memory <= free.host_peak_memory // 2
    _check_honest(g, capped, transfer)
    nothing = solve(g, budget_ratio=0.3, strategy="offload-window", transfer=transfer, host_budget=0)
    assert not nothing.plan.has_transfers and nothing.status.value == "over_budget"


def test_offload_all_leaves_what_the_host_budget_cannot_hold():
    result = solve(H, budget=131, strategy="offload-all", transfer=LINK, host_budget=50)
    assert _moved(H, result.plan) == [("offload", "x2"), ("reload", "x2")]
    assert result.host_peak_memory == 10


def test_the_window_can_be_pinned_and_a_bad_window_is_refused():
    result = solve(H, budget=130, strategy="offload-window", transfer=LINK, options={"window": 0})
    assert any("window=0" in line and "(1 of 1 distinct" in line for line in result.log)
    with pytest.raises(InvalidRequest, match="Option 'window'"):
        solve(H, budget=130, strategy="offload-window", transfer=LINK, options={"window": -1})


def test_a_wider_window_reloads_earlier():
    planner = WindowPlanner(CAPTURED, Transfer(bandwidth=float(CAPTURED.memory.sum()) / CAPTURED.base_cost))
    windows = planner.windows()
    assert windows[0] == 0 and windows == sorted(windows)
    narrow, wide = planner.reload_steps(0), planner.reload_steps(windows[-1])
    assert all(w <= n for w, n in zip(wide, narrow, strict=True)) and wide != narrow


def test_a_stopped_search_returns_the_first_plan_it_made():
    stop = Stop()
    stop.set()
    g = CAPTURED
    result = solve(g, budget_ratio=0.5, strategy="offload-window", stop_event=stop,
                   transfer=Transfer(bandwidth=float(g.memory.sum()) / g.base_cost))
    assert result.status.value in ("cancelled", "over_budget") and result.plan is not None
    assert any("window=0" in line and "(1 of " in line for line in result.log)


def test_a_graph_without_a_backward_pass_has_nothing_for_offload_all():
    g = Graph.from_json(graph_doc([{"id": "a", "deps": [], "cost": 1, "memory": 5},
                                   {"id": "b", "deps": ["a"], "cost": 1, "memory": 5}]))
    result = solve(g, budget=10, strategy="offload-all", transfer=LINK)
    assert not result.plan.has_transfers and result.cost == 2.0


class _OneByOne(WindowPlanner):
    """The late reloads as first written: each compute over the budget delays the reloads back and not yet read,
    one by one, the one read last first (a time per compute that grows with the reloads waiting)."""

    def _delay_reloads(self, chosen, back, over, stopped):
        arriving = sorted(chosen, key=back.__getitem__)
        waiting, k = [], 0
        for i in range(len(over)):
            while k < len(arriving) and back[arriving[k]] <= i:
                heapq.heappush(waiting, (-self.read[arriving[k]], arriving[k]))
                k += 1
            delayed = []
            while over[i] > 0 and waiting:
                read, j = heapq.heappop(waiting)
                if -read <= i:
                    continue
                over[back[j]:i + 1] -= self.gaps[j].bytes
                back[j] = i + 1
                delayed.append((read, j))
            for entry in delayed:
                heapq.heappush(waiting, entry)
        return True


@pytest.mark.parametrize("name", ["captured/resnet-8x3", "captured/unet-6", "captured/gpt-12"])
def test_the_late_reloads_are_those_of_the_walk_that_delays_them_one_by_one(name):
    g = benchmark_graph(name)
    for bandwidth in (0.5, 2.0):
        transfer = Transfer(bandwidth=bandwidth * float(g.memory.sum()) / g.base_cost)
        planner, reference = WindowPlanner(g, transfer), _OneByOne(g, transfer)
        for ratio in (0.8, 0.6, 0.4):
            budget = g.min_feasible_budget + int(ratio * (g.checkpoint_all_peak - g.min_feasible_budget))
            for window in planner.windows()[::3]:
                assert planner.plan(window=window, budget=budget).steps == \
                    reference.plan(window=window, budget=budget).steps, (bandwidth, ratio, window)


def test_a_window_planned_after_the_solve_was_stopped_is_given_up():
    g = CAPTURED
    planner = WindowPlanner(g, Transfer(bandwidth=float(g.memory.sum()) / g.base_cost))
    budget = (g.min_feasible_budget + g.checkpoint_all_peak) // 2
    assert planner.plan(window=planner.windows()[-1], budget=budget, stopped=lambda: True) is None
