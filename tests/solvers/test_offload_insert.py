"""Adding transfers to a plan: the idle intervals found, the plans built, and what they simulate to.

The hand-made graph H (factories.three_layers; no fixed memory), a chain of three layers and its backward:

    x1: cost 1, 100 bytes            loss: cost 1, 1 byte, reads x3
    x2: cost 2,  10 bytes, reads x1  g3: cost 2, 10 bytes, reads loss and x3
    x3: cost 2,  10 bytes, reads x2  g2: cost 2, 10 bytes, reads g3 and x2
                                     g1: cost 1, 10 bytes, reads g2 and x1

Its checkpoint-all plan, by step: 0 compute x1, 1 compute x2, 2 compute x3, 3 compute loss, 4 compute g3,
5 free x3, 6 free loss, 7 compute g2, 8 free x2, 9 free g3, 10 compute g1, 11 free x1, 12 free g2, 13 free g1.
Cost 11, peak 131 (x1, x2, x3, loss and g3 while g3 runs). At 50 bytes per cost unit a copy of x1 lasts 2,
one of x2 0.2.
"""

import pytest
from factories import chain, graph_doc, random_dags, three_layers
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import Graph, Transfer, checkpoint_all_plan, plan_from_schedule, simulate
from remat.solvers.baselines import checkpoint_last_schedule
from remat.solvers.offload import Computes, IdleInterval, idle_intervals, insert_transfers

H = three_layers()
X1, X2, X3, LOSS, G3, G2, G1 = range(7)
PLAN = checkpoint_all_plan(H)
LINK = Transfer(bandwidth=50)
X1_GAP = IdleInterval(X1, after=1, before=10, bytes=100, cost=7.0)  # x3, loss, g3 and g2 run in between
X2_GAP = IdleInterval(X2, after=2, before=7, bytes=10, cost=3.0)  # loss and g3


def _names(plan):
    return [(op, H.ids[v]) for op, v in plan.steps]


def test_the_plan_and_its_numbers_without_transfers():
    sim = simulate(H, PLAN)
    assert (sim.cost, sim.peak_memory) == (11.0, 131)


def test_idle_intervals_are_the_gaps_with_a_compute_between_two_touches_in_the_order_they_end():
    # x1 is read by x2 right after its compute (no gap), then idle until g1; x2 read by x3, idle until g2.
    # x3 (loss, g3), loss (g3), g3 (g2) and g2 (g1) are read by the very next compute.
    assert idle_intervals(H, PLAN) == [X2_GAP, X1_GAP]


def test_a_reload_just_in_time_hides_behind_the_compute_before_the_read():
    reload_step = Computes(H, PLAN).steps_back(X1_GAP.after, X1_GAP.before, 1)
    assert reload_step == 7  # compute g2
    plan = insert_transfers(PLAN, [(X1_GAP, reload_step)])
    assert _names(plan) == [
        ("compute", "x1"), ("compute", "x2"), ("offload", "x1"), ("compute", "x3"), ("compute", "loss"),
        ("compute", "g3"), ("free", "x3"), ("free", "loss"), ("reload", "x1"), ("compute", "g2"),
        ("free", "x2"), ("free", "g3"), ("compute", "g1"), ("free", "x1"), ("free", "g2"), ("free", "g1")]
    sim = simulate(H, plan, transfer=LINK)
    # x1 [0, 1], x2 [1, 3]; the offload [1, 3] releases x1 at 3; x3 [3, 5], loss [5, 6], g3 [6, 8];
    # the reload, issued after g3, runs [8, 10] beside g2 [8, 10]; g1 [10, 11]: nothing exposed.
    assert [(s.start, s.end) for s in sim.timing.stream("reload")] == [(8, 10)]
    assert sim.cost == 11.0
    # while g2 runs, x1 is back: x2, g3, x1 and g2, 130; before, 31 at most (x2, x3, loss, g3).
    assert (sim.peak_memory, sim.host_peak_memory) == (130, 100)


def test_a_reload_at_the_read_holds_less_memory_and_exposes_its_copy():
    plan = insert_transfers(PLAN, [(X1_GAP, X1_GAP.before)])
    sim = simulate(H, plan, transfer=LINK)
    # the reload waits for g2 (ends 10) and runs [10, 12]; g1 [12, 13]; x2 and g3 are gone when x1 comes back.
    assert sim.cost == 13.0
    assert sim.peak_memory == 120  # x1, g2 and g1


def test_two_moves_on_one_plan():
    reload_x2 = Computes(H, PLAN).steps_back(X2_GAP.after, X2_GAP.before, 1)
    assert reload_x2 == 4  # compute g3
    plan = insert_transfers(PLAN, [(X1_GAP, X1_GAP.before), (X2_GAP, reload_x2)])
    assert _names(plan)[:8] == [("compute", "x1"), ("compute", "x2"), ("offload", "x1"), ("compute", "x3"),
                                ("offload", "x2"), ("compute", "loss"), ("reload", "x2"), ("compute", "g3")]
    sim = simulate(H, plan, transfer=LINK)
    # offload x2 [3, 3.2], released at 5 when x3 (issued before it) ends; reload x2 after loss: [6, 6.2],
    # ready long before g2 [8, 10]; x1 as in the test above: [10, 12], g1 [12, 13].
    assert [(s.start, s.end, s.released) for s in sim.timing.stream("offload")] == [(1, 3, 3), (3, 3.2, 5)]
    assert [(s.start, s.end) for s in sim.timing.stream("reload")] == [(6, 6.2), (10, 12)]
    assert sim.cost == 13.0
    # 5: x2 leaves, loss comes: x3, loss = 11; 6: x2 back, g3: 31; 10: x1 back after x2 and g3 left: 110; g1: 120
    assert [m for _, m in sim.timing.memory] == [100, 110, 20, 11, 31, 30, 110, 120, 0]
    assert (sim.peak_memory, sim.host_peak_memory) == (120, 110)


def test_a_node_moved_twice_is_offloaded_once_then_freed():
    # a is read by d and by f, with c and e between: two gaps, one host copy.
    g = Graph.from_json(graph_doc([
        {"id": "a", "deps": [], "cost": 1, "memory": 50},
        {"id": "b", "deps": ["a"], "cost": 1, "memory": 5},
        {"id": "c", "deps": ["b"], "cost": 1, "memory": 5},
        {"id": "d", "deps": ["c", "a"], "cost": 1, "memory": 5},
        {"id": "e", "deps": ["d"], "cost": 1, "memory": 5},
        {"id": "f", "deps": ["e", "a"], "cost": 1, "memory": 5},
    ]))
    plan = checkpoint_all_plan(g)
    gaps = idle_intervals(g, plan)
    assert [(g.ids[i.node], plan.steps[i.after], plan.steps[i.before]) for i in gaps] == [
        ("a", ("compute", 1), ("compute", 3)), ("a", ("compute", 3), ("compute", 5))]
    moved = insert_transfers(plan, [(gap, gap.before) for gap in gaps])
    ops_on_a = [op for op, v in moved.steps if v == 0]
    assert ops_on_a == ["compute", "offload", "reload", "free", "reload", "free"]
    sim = simulate(g, moved, transfer=Transfer(bandwidth=50))  # each copy of a lasts 1
    # a [0, 1], b [1, 2], c [2, 3]; offload a [1, 2]; reload a after c: [3, 4]; d [4, 5]; a freed at 5;
    # e [5, 6]; reload a [6, 7]; f [7, 8].
    assert sim.cost == 8.0
    assert sim.host_peak_memory == 50


def test_plans_that_recompute_have_their_gaps_moved_too():
    g = chain(4, memory=10)
    plan = plan_from_schedule(g, checkpoint_last_schedule(g))
    base = simulate(g, plan)
    gaps = idle_intervals(g, plan)
    assert gaps and base.recomputations > 0
    moved = insert_transfers(plan, [(gap, gap.before) for gap in gaps])
    sim = simulate(g, moved, transfer=Transfer(bandwidth=10, latency=0.5))
    assert sim.compute_counts.tolist() == base.compute_counts.tolist()
    assert sim.host_peak_memory == 10 * len({gap.node for gap in gaps})


def test_a_wait_goes_before_the_reloads_and_the_compute_it_holds():
    slow = Transfer(bandwidth=10)  # x1's copies last 10, x2's 1
    moves = [(X1_GAP, X1_GAP.before), (X2_GAP, 4)]
    plan = insert_transfers(PLAN, moves, waits=[(X1, 3), (X1, 4)])
    assert _names(plan)[4:10] == [("offload", "x2"), ("wait", "x1"), ("compute", "loss"), ("wait", "x1"),
                                  ("reload", "x2"), ("compute", "g3")]
    held = simulate(H, plan, transfer=slow)
    free = simulate(H, insert_transfers(PLAN, moves), transfer=slow)
    # x1's copy [1, 11]. Without the wait, loss [5, 6] and g3 [6, 8] run beside it: x1, x2 (its copy
    # queued behind x1's), x3, loss and g3 make 131. With it, loss waits until x1 is gone: [11, 12], then
    # 21 (x2 left at 12 with its copy [11, 12]); x2's reload [12, 13] for g2; g1 waits for x1's [16, 26].
    assert (free.peak_memory, free.cost) == (131, 26.0)
    assert (held.peak_memory, held.cost) == (120, 27.0)
    assert [(s.start, s.end) for s in held.timing.stream("wait")] == [(11, 11), (12, 12)]  # the 2nd costs nothing
    assert [m for _, m in held.timing.memory] == [100, 110, 120, 21, 31, 30, 110, 120, 0]


def test_a_wait_must_follow_the_offload_of_its_node():
    moves = [(X1_GAP, X1_GAP.before)]
    for node, step in [(X2, 4), (X1, 1), (X1, 5), (X1, len(PLAN))]:  # not offloaded; before it; a free; no step
        with pytest.raises(ValueError, match=f"A wait for node {node} must come before a compute after its offload"):
            insert_transfers(PLAN, moves, waits=[(node, step)])


def test_reload_placement_by_cost():
    computes = Computes(H, PLAN)
    # the computes after x1's gap opens: x3 (2), loss (1), g3 (2), g2 (2) before g1 at step 10
    assert computes.ahead(1, 10, 0.0) == 10
    assert computes.ahead(1, 10, 2.0) == 7  # g2 alone covers 2
    assert computes.ahead(1, 10, 3.0) == 4  # g3 and g2 cover 4
    assert computes.ahead(1, 10, 7.0) == 2  # all four
    assert computes.ahead(1, 10, 100.0) == 2  # no more to hide behind: the first compute after the gap opens
    assert computes.steps_back(1, 10, 0) == 10
    assert computes.steps_back(1, 10, 9) == 2
    assert computes.cost_between(1, 10) == 7.0


def test_bad_moves_are_refused():
    with pytest.raises(ValueError, match="before a compute in steps 2..10"):
        insert_transfers(PLAN, [(X1_GAP, 1)])
    with pytest.raises(ValueError, match="before a compute"):
        insert_transfers(PLAN, [(X1_GAP, 8)])  # a free
    with pytest.raises(ValueError, match="moved twice"):
        insert_transfers(PLAN, [(X1_GAP, 10), (X1_GAP, 7)])
    moved = insert_transfers(PLAN, [(X1_GAP, 10)])
    with pytest.raises(ValueError, match="already moves values"):
        idle_intervals(H, moved)
    with pytest.raises(ValueError, match="already moves values"):
        insert_transfers(moved, [])
    with pytest.raises(ValueError, match="not a compute"):
        Computes(H, PLAN).cost_between(1, 8)


@st.composite
def _plans_and_moves(draw):
    g = draw(random_dags(max_nodes=14, training=True))
    remat = draw(st.booleans())
    plan = plan_from_schedule(g, checkpoint_last_schedule(g)) if remat else checkpoint_all_plan(g)
    gaps = idle_intervals(g, plan)
    chosen = draw(st.lists(st.sampled_from(gaps), unique=True)) if gaps else []
    computes = Computes(g, plan)
    moves = [(gap, draw(st.sampled_from([s for s in computes.steps if gap.after < s <= gap.before])))
             for gap in chosen]
    offloaded = {}  # node -> the step its offload follows
    for gap in sorted(chosen, key=lambda gap: gap.after):
        offloaded.setdefault(gap.node, gap.after)
    waits = [(v, draw(st.sampled_from([s for s in computes.steps if s > after])))
             for v, after in offloaded.items() if draw(st.booleans())]
    transfer = Transfer(bandwidth=draw(st.sampled_from([1.0, 10.0, 1000.0])), latency=draw(st.sampled_from([0, 1])))
    return g, plan, moves, waits, transfer


@settings(max_examples=150, deadline=None)
@given(_plans_and_moves())
def test_any_moves_give_a_valid_plan_that_computes_the_same_and_needs_no_more_memory(case):
    g, plan, moves, waits, transfer = case
    base = simulate(g, plan)
    moved = insert_transfers(plan, moves, waits)
    sim = simulate(g, moved, transfer=transfer)
    assert sim.compute_counts.tolist() == base.compute_counts.tolist()
    assert sim.peak_memory <= base.peak_memory
    assert sim.cost >= base.cost - 1e-9
    assert sim.host_peak_memory == sum(int(g.memory[v]) for v in {gap.node for gap, _ in moves})
    assert sum(op == "reload" for op, _ in moved.steps) == len(moves)
    assert len(moved) == len(plan) + len(moves) * 2 + len(waits)

