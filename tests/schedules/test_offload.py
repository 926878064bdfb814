"""The simulator's time model for plans that offload values to host memory and reload them.

Every expected number is worked out by hand in the comments, on the graph G below (fixed memory 100):

    a: cost 2, 40 bytes
    b: cost 3, 10 bytes, reads a
    c: cost 1, 20 bytes, reads b
    d: cost 2,  5 bytes, reads c and a

SLOW copies 20 bytes per cost unit after a latency of 0.5: a copy of a lasts 0.5 + 40/20 = 2.5.
"""

import math

import pytest
from factories import BENCHMARK_NAMES, benchmark_graph, graph_doc, random_dags, skip_read
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from remat.schedules import (
    TRANSFER_PROFILES,
    Graph,
    InvalidPlan,
    InvalidRequest,
    Plan,
    Transfer,
    checkpoint_all_plan,
    simulate,
)
from remat.schedules._simulate import _simulate_in_time

G = skip_read()
A, B, C, D = range(4)
SLOW = Transfer(bandwidth=20, latency=0.5)
FREE_ALL = [("free", A), ("free", B), ("free", C), ("free", D)]


def _plan(*steps):
    return Plan.of(list(steps))


def test_a_copy_hidden_behind_compute_costs_nothing():
    # 40 bytes per cost unit: a's copies last 1.
    # compute a [0, 2]; compute b [2, 5]; offload a [2, 3], released at 5 (b, issued before it, ends at 5);
    # reload a, issued after b, waits for it: [5, 6]; compute c [5, 6]; compute d [6, 8] (a usable at 6):
    # makespan 8 = 2 + 3 + 1 + 2.
    plan = _plan(("compute", A), ("compute", B), ("offload", A), ("reload", A), ("compute", C), ("compute", D),
                 *FREE_ALL)
    sim = simulate(G, plan, transfer=Transfer(bandwidth=40))
    assert sim.cost == sim.timing.makespan == G.base_cost == 8.0
    assert [(s.start, s.end) for s in sim.timing.stream("compute")] == [(0, 2), (2, 5), (5, 6), (6, 8)]
    assert [(s.start, s.end, s.released) for s in sim.timing.stream("offload")] == [(2, 3, 5)]
    assert [(s.start, s.end) for s in sim.timing.stream("reload")] == [(5, 6)]
    # memory: 0: +a 140; 2: +b 150; 5: -a (offloaded) 110, +a (reloaded) 150, +c 170; 6: +d 175;
    # 8: the frees, 135, 125, 105, 100.
    assert sim.timeline.tolist() == [140, 150, 110, 150, 170, 175, 135, 125, 105, 100]
    assert (sim.peak_memory, sim.peak_step) == (175, 5)
    assert sim.timing.memory == ((0, 140), (2, 150), (5, 170), (6, 175), (8, 100))
    assert sim.host_peak_memory == 40
    assert sim.recomputations == 0


def test_a_compute_waits_for_the_reload_it_reads():
    # compute a [0, 2]; compute b [2, 5]; offload a [2, 4.5], released at max(4.5, 5) = 5;
    # compute c [5, 6]; reload a, issued after c, [6, 8.5]; compute d waits for a: [8.5, 10.5]. Makespan 10.5.
    plan = _plan(("compute", A), ("compute", B), ("offload", A), ("compute", C), ("reload", A), ("compute", D),
                 *FREE_ALL)
    sim = simulate(G, plan, transfer=SLOW)
    assert sim.cost == 10.5
    assert [s.start for s in sim.timing.stream("compute")] == [0, 2, 5, 8.5]
    assert [(s.start, s.end) for s in sim.timing.stream("reload")] == [(6, 8.5)]
    # 0: 140; 2: 150; 5: -a 110, +c 130; 6: +a 170; 8.5: +d 175; 10.5: frees.
    assert sim.timeline.tolist() == [140, 150, 110, 130, 170, 175, 135, 125, 105, 100]
    assert (sim.peak_memory, sim.peak_step) == (175, 5)


def test_memory_is_released_when_the_copy_and_the_earlier_computes_have_ended():
    # 4 bytes per cost unit: a's copies last 10.
    # compute a [0, 2]; compute b [2, 5]; offload a [2, 12]: the copy ends last, a released at 12;
    # compute c [5, 6]; free b at 6 (c, issued before it, ends at 6); reload a [12, 22], allocated at 12;
    # compute d [22, 24]; frees at 24.
    # At 12 the release of a comes before its reallocation: 160 - 40 + 40 = 160, never 200.
    plan = _plan(("compute", A), ("compute", B), ("offload", A), ("compute", C), ("free", B), ("reload", A),
                 ("compute", D), ("free", A), ("free", C), ("free", D))
    sim = simulate(G, plan, transfer=Transfer(bandwidth=4))
    offload, = sim.timing.stream("offload")
    assert (offload.start, offload.end, offload.released) == (2, 12, 12)
    free_b, = (s for s in sim.timing.stream("free") if s.node == B)
    assert free_b.released == 6
    # 0: 140; 2: 150; 5: +c 170; 6: -b 160; 12: -a 120, +a 160; 22: +d 165; 24: 125, 105, 100.
    assert sim.timeline.tolist() == [140, 150, 120, 170, 160, 160, 165, 125, 105, 100]
    assert (sim.peak_memory, sim.peak_step) == (170, 3)
    assert sim.cost == 24.0


def test_the_release_waits_for_computes_issued_before_the_offload():
    # Same as the hidden copy, with a fast copy [2, 3]: a stays on the device until b ends at 5.
    plan = _plan(("compute", A), ("compute", B), ("offload", A), ("reload", A), ("compute", C), ("compute", D),
                 *FREE_ALL)
    sim = simulate(G, plan, transfer=Transfer(bandwidth=40))
    offload, = sim.timing.stream("offload")
    assert offload.end == 3 and offload.released == 5


def test_a_free_after_a_reload_waits_for_the_copy():
    # compute a [0, 2]; offload a [2, 4.5], released at 4.5; reload a [4.5, 7]; free a waits for it: 7.
    # compute a again [2, 4] (nothing holds the compute stream); compute b [4, 7]; c [7, 8]; d [8, 10].
    # 0: +a 140; 2: +a 180; 4: +b 190; 4.5: -a 150, +a 190; 7: -a 150, +c 170; 8: +d 175; 10: frees.
    plan = _plan(("compute", A), ("offload", A), ("reload", A), ("free", A), ("compute", A), ("compute", B),
                 ("compute", C), ("compute", D), *FREE_ALL)
    sim = simulate(G, plan, transfer=SLOW)
    free_a = sim.timing.spans[3]
    assert (free_a.op, free_a.released) == ("free", 7.0)
    assert sim.timeline.tolist() == [140, 150, 190, 150, 180, 190, 170, 175, 135, 125, 105, 100]
    assert (sim.peak_memory, sim.peak_step, sim.cost, sim.recomputations) == (190, 5, 10.0, 1)


def test_releases_come_before_allocations_at_one_instant():
    # 40 bytes per cost unit: a's copies last 1. compute a [0, 2]; compute b [2, 5]; offload a [2, 3], released
    # at 5; reload a [5, 6], allocated at 5; compute c [5, 6]; free b at 6; compute d [6, 8]; frees at 8.
    # 0: 140; 2: 150; 5: -a 110, then +a 150 and +c 170 (allocating first would reach 210);
    # 6: -b 160, then +d 165; 8: 125, 105, 100.
    plan = _plan(("compute", A), ("compute", B), ("offload", A), ("reload", A), ("compute", C), ("free", B),
                 ("compute", D), ("free", A), ("free", C), ("free", D))
    sim = simulate(G, plan, transfer=Transfer(bandwidth=40))
    assert sim.timeline.tolist() == [140, 150, 110, 150, 170, 160, 165, 125, 105, 100]
    assert (sim.peak_memory, sim.peak_step) == (170, 4)
    assert sim.timing.memory == ((0, 140), (2, 150), (5, 170), (6, 165), (8, 100))


def test_a_free_after_a_compute_of_no_cost_still_counts_its_output_with_its_inputs():
    # x costs 0: it starts and ends at 0, but the free of w after it releases after x allocated.
    g = Graph.from_json(graph_doc([
        {"id": "w", "deps": [], "cost": 0, "memory": 7},
        {"id": "x", "deps": ["w"], "cost": 0, "memory": 3},
    ]))
    plan = _plan(("compute", 0), ("offload", 0), ("compute", 1), ("free", 1))
    with pytest.raises(InvalidPlan):  # offloaded w is not on the device for x
        simulate(g, plan, transfer=SLOW)
    plan = _plan(("compute", 0), ("compute", 1), ("free", 0), ("offload", 1), ("reload", 1), ("free", 1))
    sim = simulate(g, plan, transfer=Transfer(bandwidth=3))  # x's copies last 1
    # 0: +w 7, +x 10, -w 3; offload x [0, 1] released at 1, reload x [1, 2] allocated at 1: 3 - 3 = 0, + 3;
    # free x at 2: 0.
    assert sim.timeline.tolist() == [7, 10, 3, 0, 3, 0]
    assert (sim.peak_memory, sim.cost, sim.host_peak_memory) == (10, 2.0, 3)


def test_host_memory_counts_every_copy_until_the_step_ends():
    # a and b both go to the host: 40 + 10 bytes, even after both came back.
    plan = _plan(("compute", A), ("compute", B), ("offload", A), ("compute", C), ("offload", B), ("reload", A),
                 ("compute", D), ("free", A), ("free", C), ("free", D))
    sim = simulate(G, plan, transfer=SLOW)
    assert sim.host_peak_memory == sim.timing.host_peak_memory == 50
    assert simulate(G, checkpoint_all_plan(G)).host_peak_memory == 0


@pytest.mark.parametrize(
    ("steps", "step", "message"),
    [
        ([("compute", A), ("offload", A), ("compute", B)], 2,
         "Step 2: compute 'b' needs 'a', which was offloaded at step 1 and not reloaded."),
        ([("offload", A)], 0, "Step 0: offload 'a', but it is not resident."),
        ([("compute", A), ("offload", A), ("reload", A), ("offload", A)], 3,
         "Step 3: offload 'a', but it is already on the host (offloaded at step 1)."),
        ([("compute", A), ("reload", A)], 1, "Step 1: reload 'a', but it is not on the host; offload it first."),
        ([("compute", A), ("offload", A), ("reload", A), ("reload", A)], 3,
         "Step 3: reload 'a', but it is already resident."),
        ([("compute", A), ("offload", A), ("compute", A), ("reload", A)], 3,
         "Step 3: reload 'a', but it is already resident."),
        ([("compute", A), ("offload", A), ("free", A)], 2,
         "Step 2: free 'a', but it is not resident (it was offloaded at step 1)."),
        ([("compute", A), ("offload", A), ("compute", A), ("compute", A)], 3,
         "Step 3: compute 'a', but it is already resident."),
        ([("compute", A), ("offload", A), ("launch", A)], 2, "Step 2: unknown op 'launch'."),
        ([("compute", A), ("offload", 9)], 1, "Step 1: node index 9 is out of range."),
    ],
)
def test_invalid_plans_with_transfers_name_the_step_and_the_node(steps, step, message):
    with pytest.raises(InvalidPlan) as err:
        simulate(G, Plan.of(steps), transfer=SLOW)
    assert str(err.value) == message
    assert err.value.step == step
    if "index" not in message and "unknown" not in message:
        assert err.value.node == message.split("'")[1]


def test_a_plan_with_transfers_must_compute_every_node():
    with pytest.raises(InvalidPlan, match="never computes 'b', 'c', 'd'"):
        simulate(G, _plan(("compute", A), ("offload", A)), transfer=SLOW)


def test_a_plan_with_transfers_needs_transfer_parameters():
    with pytest.raises(InvalidRequest, match=r"step 1 is 'offload'.*Transfer\.from_profile") as err:
        simulate(G, _plan(("compute", A), ("offload", A)))
    assert err.value.field == "transfer"


def test_plan_json_reads_and_writes_offload_and_reload():
    plan = _plan(("compute", A), ("compute", B), ("offload", A), ("reload", A), ("compute", C), ("compute", D),
                 *FREE_ALL)
    doc = plan.to_json(G)
    assert doc[2:4] == [{"op": "offload", "node": "a"}, {"op": "reload", "node": "a"}]
    assert Plan.from_json(G, doc) == plan
    assert plan.has_transfers and not checkpoint_all_plan(G).has_transfers
    with pytest.raises(InvalidPlan) as err:
        Plan.from_json(G, [{"op": "swap", "node": "a"}])
    assert str(err.value) == "Step 0: must be {'op': 'compute'|'free'|'offload'|'reload'|'wait', 'node': id}."


# Plans without transfers: the walk in order, as before; the time model agrees with it.

@st.composite
def random_plans(draw, *, offload):
    """A random graph and a valid plan: values kept, freed or (with ``offload``) offloaded at random after each
    node, then computed again or reloaded when read; everything freed at the end."""
    g = draw(random_dags())
    resident: set[int] = set()
    host: set[int] = set()
    steps = []

    def materialize(u):
        if u in resident:
            return
        if u in host:
            steps.append(("reload", u))
        else:
            for w in g.deps[u]:
                materialize(w)
            steps.append(("compute", u))
        resident.add(u)

    choices = ["keep", "free", "offload"] if offload else ["keep", "free"]
    for v in range(g.size):
        materialize(v)
        for u in sorted(resident):
            choice = draw(st.sampled_from(choices))
            if choice == "offload" and u not in host:
                steps.append(("offload", u))
                host.add(u)
                resident.discard(u)
            elif choice == "free":
                steps.append(("free", u))
                resident.discard(u)
    steps.extend(("free", u) for u in sorted(resident))
    return g, Plan.of(steps), Transfer(bandwidth=draw(st.sampled_from([1, 7, 100])),
                                       latency=draw(st.sampled_from([0, 0.5])))


@settings(max_examples=300, deadline=None)
@given(random_plans(offload=False))
def test_the_time_model_reduces_to_the_walk_in_order_without_transfers(case):
    g, plan, transfer = case
    walk = simulate(g, plan, transfer=transfer)  # transfer parameters are ignored: the walk in order
    assert walk.timing is None and walk.host_peak_memory == 0
    timed = _simulate_in_time(g, plan, transfer)
    assert timed.timeline.tolist() == walk.timeline.tolist()
    assert (timed.peak_memory, timed.peak_step) == (walk.peak_memory, walk.peak_step)
    assert math.isclose(timed.cost, walk.cost, rel_tol=1e-12)
    assert timed.compute_counts.tolist() == walk.compute_counts.tolist()


@pytest.mark.parametrize("name", BENCHMARK_NAMES)
def test_checkpoint_all_on_benchmark_graphs_is_unchanged(name):
    g = benchmark_graph(name)
    sim = simulate(g, checkpoint_all_plan(g))
    assert sim.timing is None
    assert sim.peak_memory == g.checkpoint_all_peak
    assert sim.cost == g.base_cost
    timed = _simulate_in_time(g, checkpoint_all_plan(g), SLOW)
    assert timed.peak_memory == g.checkpoint_all_peak
    assert math.isclose(timed.cost, g.base_cost, rel_tol=1e-9)


# Transfer parameters and device profiles.

def test_transfer_duration_is_latency_plus_bytes_over_bandwidth():
    assert SLOW.duration(40) == 0.5 + 40 / 20 == 2.5
    assert SLOW.duration(0) == 0.5


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bandwidth": 0}, "transfer.bandwidth"),
        ({"bandwidth": -1}, "transfer.bandwidth"),
        ({"bandwidth": math.inf}, "transfer.bandwidth"),
        ({"bandwidth": math.nan}, "transfer.bandwidth"),
        ({"bandwidth": True}, "transfer.bandwidth"),
        ({"bandwidth": "fast"}, "transfer.bandwidth"),
        ({"bandwidth": 1, "latency": -0.1}, "transfer.latency"),
        ({"bandwidth": 1, "latency": math.inf}, "transfer.latency"),
    ],
)
def test_transfer_refuses_bad_numbers(kwargs, field):
    with pytest.raises(InvalidRequest) as err:
        Transfer(**kwargs)
    assert err.value.field == field


def test_profiles_give_per_direction_effective_bandwidths():
    gb = 1e9
    assert {n: p.bandwidth_bytes_per_s for n, p in TRANSFER_PROFILES.items()} == {
        "pcie4-x16": 25 * gb, "pcie5-x16": 50 * gb, "nvlink-c2c": 450 * gb}
    assert TRANSFER_PROFILES["pcie4-x16"].raw_bandwidth_bytes_per_s == 32 * gb
    assert TRANSFER_PROFILES["pcie5-x16"].raw_bandwidth_bytes_per_s == 64 * gb
    assert all(p.source for p in TRANSFER_PROFILES.values())


def test_a_profile_converts_to_the_graphs_cost_unit_only_when_told():
    # Costs in seconds: 25e9 bytes per cost unit; 1 GB takes 1e9 / 25e9 = 0.04 s.
    pcie4 = Transfer.from_profile("pcie4-x16", seconds_per_cost_unit=1.0)
    assert (pcie4.bandwidth, pcie4.latency) == (25e9, 0.0)
    assert pcie4.duration(10**9) == pytest.approx(0.04)
    # Costs in milliseconds: 50e9 B/s x 1e-3 s = 50e6 bytes per cost unit; 10 us of latency = 0.01 ms.
    pcie5 = Transfer.from_profile("pcie5-x16", seconds_per_cost_unit=1e-3, latency_s=1e-5)
    assert pcie5.bandwidth == pytest.approx(50e6) and pcie5.latency == pytest.approx(0.01)
    # 1 GB over NVLink-C2C in microseconds: 1e9 / (450e9 x 1e-6) = 2222.2 us.
    c2c = Transfer.from_profile("nvlink-c2c", seconds_per_cost_unit=1e-6)
    assert c2c.duration(10**9) == pytest.approx(1e9 / 450e3)
    with pytest.raises(InvalidRequest, match="known profiles: nvlink-c2c, pcie4-x16, pcie5-x16"):
        Transfer.from_profile("pcie6-x16", seconds_per_cost_unit=1.0)
    with pytest.raises(InvalidRequest) as err:
        Transfer.from_profile("pcie4-x16", seconds_per_cost_unit=0)
    assert err.value.field == "seconds_per_cost_unit"
    with pytest.raises(TypeError):
        Transfer.from_profile("pcie4-x16")  # type: ignore[call-arg]


def test_a_reload_waits_for_its_offload_and_the_computes_issued_before_it():
    # Issued after compute c (which ends at 6), the reload of a runs [6, 8.5]; issued before c, it runs
    # [5, 7.5]: after b, issued before it, ends at 5 (its offload [2, 4.5] ended earlier). Where the plan
    # places a reload is when it may start, as a copy stream waits on the compute stream's event.
    late = _plan(("compute", A), ("compute", B), ("offload", A), ("compute", C), ("reload", A), ("compute", D),
                 *FREE_ALL)
    early = _plan(("compute", A), ("compute", B), ("offload", A), ("reload", A), ("compute", C), ("compute", D),
                  *FREE_ALL)
    for plan, expected in ((late, (6, 8.5)), (early, (5, 7.5))):
        reload, = simulate(G, plan, transfer=SLOW).timing.stream("reload")
        assert (reload.start, reload.end) == expected


@settings(max_examples=300, deadline=None)
@given(random_plans(offload=True))
def test_random_plans_with_transfers_keep_the_streams_and_the_memory_consistent(case):
    g, plan, transfer = case
    assume(plan.has_transfers)
    sim = simulate(g, plan, transfer=transfer)
    timing = sim.timing
    assert timing is not None and sim.cost == timing.makespan
    for op in ("compute", "offload", "reload"):  # each stream runs one statement at a time, in plan order
        spans = timing.stream(op)
        assert all(s.start <= s.end for s in spans)
        assert all(p.end <= s.start for p, s in zip(spans, spans[1:], strict=False))
    computes = timing.stream("compute")
    assert sum(s.end - s.start for s in computes) == pytest.approx(math.fsum(g.cost[s.node] for s in computes))
    assert timing.makespan >= (computes[-1].end if computes else 0)
    assert all(s.released >= s.end for s in timing.stream("offload"))
    assert sim.timeline.min() >= g.fixed_memory and timing.memory[-1][1] == g.fixed_memory  # all freed
    assert sim.peak_memory == max(sim.timeline.tolist()) == max(m for _, m in timing.memory)
    assert sim.host_peak_memory == sum(int(g.memory[s.node]) for s in timing.stream("offload"))
    assert Plan.from_json(g, plan.to_json(g)) == plan


def test_a_requests_transfer_reads_in_the_graphs_units_or_from_a_profile():
    assert Transfer.from_json({"bandwidth": 20, "latency": 0.5}) == SLOW
    assert Transfer.from_json({"bandwidth": 20}).latency == 0.0
    assert Transfer.from_json(SLOW.to_json()) == SLOW
    # 50 GB/s with a cost unit of a millisecond: 5e7 bytes per unit; 2 microseconds of latency: 0.002 units.
    pcie5 = Transfer.from_json({"profile": "pcie5-x16", "seconds_per_cost_unit": 1e-3, "latency_s": 2e-6})
    assert (pcie5.bandwidth, pcie5.latency) == (5e7, pytest.approx(0.002))


@pytest.mark.parametrize(("doc", "field", "says"), [
    (20, "transfer", "must be an object"),
    ({"bandwidth": 20, "speed": 3}, "transfer", "Unknown field 'speed'"),
    ({"latency": 1}, "transfer.bandwidth", "needs 'bandwidth'"),
    ({"bandwidth": 0}, "transfer.bandwidth", "greater than 0"),
    ({"bandwidth": "fast"}, "transfer.bandwidth", "must be a number"),
    ({"profile": "pcie5-x16"}, "transfer.seconds_per_cost_unit", "seconds_per_cost_unit"),
    ({"profile": "pcie9", "seconds_per_cost_unit": 1}, "transfer.profile", "known profiles: nvlink-c2c"),
    ({"profile": ["pcie5-x16"], "seconds_per_cost_unit": 1}, "transfer.profile", "No device profile named"),
    ({"profile": "pcie5-x16", "seconds_per_cost_unit": 1, "bandwidth": 3}, "transfer", "Unknown field 'bandwidth'"),
])
def test_a_bad_transfer_says_which_field_and_what_is_expected(doc, field, says):
    with pytest.raises(InvalidRequest, match=says) as raised:
        Transfer.from_json(doc)
    assert raised.value.field == field


def test_a_wait_holds_the_computation_until_an_offload_has_released_its_memory():
    # 10 bytes per unit: a's copies last 4. a [0, 2], b [2, 5], offload a [2, 6], released at 6.
    # Without the wait, c starts at 5 while a is still on the device: 140 + 10 + 20 = 170 at 5.
    # With it, c waits until 6: -a 110, +c 130; c [6, 7]; free b at 7, 120; the reload, issued after c, runs
    # [7, 11], +a 160; d [11, 15]... d lasts 2: [11, 13], +d 165; the frees at 13.
    slow = Transfer(bandwidth=10)
    rest = [("compute", C), ("free", B), ("reload", A), ("compute", D), ("free", A), ("free", C), ("free", D)]
    unheld = simulate(G, _plan(("compute", A), ("compute", B), ("offload", A), *rest), transfer=slow)
    held = simulate(G, _plan(("compute", A), ("compute", B), ("offload", A), ("wait", A), *rest), transfer=slow)
    assert unheld.peak_memory == 170 and held.peak_memory == 165
    assert held.cost == 13.0 and [(s.start, s.end) for s in held.timing.stream("compute")] == \
        [(0, 2), (2, 5), (6, 7), (11, 13)]
    assert [(s.start, s.end) for s in held.timing.stream("wait")] == [(6, 6)]
    assert held.timeline.tolist()[:6] == [140, 150, 110, 110, 130, 120]


def test_a_wait_needs_an_offload_before_it():
    with pytest.raises(InvalidPlan, match="Step 1: wait for the offload of 'a', but it was not offloaded before"):
        simulate(G, _plan(("compute", A), ("wait", A)), transfer=SLOW)
    doc = [{"op": "compute", "node": "a"}, {"op": "offload", "node": "a"}, {"op": "wait", "node": "a"}]
    assert Plan.from_json(G, doc).steps[2] == ("wait", A)
