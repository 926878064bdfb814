import pytest
from factories import chain, graph_doc, random_dags
from hypothesis import given, settings

from remat.schedules import Graph, InvalidPlan, Plan, checkpoint_all_plan, simulate

G = Graph.from_json(graph_doc([
    {"id": "a", "deps": [], "cost": 1, "memory": 4},
    {"id": "b", "deps": ["a"], "cost": 2, "memory": 8},
    {"id": "c", "deps": ["a", "b"], "cost": 3, "memory": 16},
], fixed_memory=100))


def test_peak_is_read_right_after_each_compute():
    plan = Plan.of([("compute", 0), ("compute", 1), ("compute", 2), ("free", 0), ("free", 1), ("free", 2)])
    sim = simulate(G, plan)
    assert sim.peak_memory == 100 + 4 + 8 + 16
    assert sim.peak_step == 2
    assert sim.timeline.tolist() == [104, 112, 128, 124, 116, 100]
    assert sim.cost == 6.0


def test_recomputation_adds_cost():
    plan = Plan.of([("compute", 0), ("compute", 1), ("free", 0), ("compute", 0), ("compute", 2)])
    sim = simulate(G, plan)
    assert sim.cost == 7.0 and sim.recomputations == 1
    assert sim.compute_counts.tolist() == [2, 1, 1]


@pytest.mark.parametrize(
    ("steps", "step", "words"),
    [
        ([("compute", 1)], 0, "needs 'a'"),
        ([("compute", 0), ("compute", 0)], 1, "already resident"),
        ([("free", 0)], 0, "not resident"),
        ([("compute", 0), ("compute", 1), ("free", 0), ("compute", 2)], 3, "needs 'a'"),
        ([("compute", 0), ("launch", 1)], 1, "unknown op"),
        ([("compute", 9)], 0, "out of range"),
    ],
)
def test_invalid_plans_name_the_step(steps, step, words):
    with pytest.raises(InvalidPlan) as err:
        simulate(G, Plan.of(steps))
    assert err.value.step == step
    assert words in str(err.value)


def test_every_node_must_be_computed():
    with pytest.raises(InvalidPlan, match="never computes 'c'"):
        simulate(G, Plan.of([("compute", 0), ("compute", 1)]))


def test_plan_json_round_trip_and_errors():
    plan = checkpoint_all_plan(G)
    assert Plan.from_json(G, plan.to_json(G)) == plan
    with pytest.raises(InvalidPlan, match="not a node"):
        Plan.from_json(G, [{"op": "compute", "node": "zz"}])
    with pytest.raises(InvalidPlan, match="Step 0"):
        Plan.from_json(G, [{"op": "eat", "node": "a"}])


def test_checkpoint_all_on_a_chain_keeps_activations_until_their_gradient():
    g = chain(4, memory=10)
    sim = simulate(g, checkpoint_all_plan(g))
    # all 4 activations + loss live, then the first gradient is added
    assert sim.peak_memory == g.checkpoint_all_peak == 60
    assert sim.cost == g.base_cost


@settings(max_examples=200, deadline=None)
@given(random_dags())
def test_checkpoint_all_plan_is_valid_and_costs_base(g):
    sim = simulate(g, checkpoint_all_plan(g))
    assert sim.cost == g.base_cost
    assert sim.peak_memory >= g.min_feasible_budget
    assert sim.timeline[-1] == g.fixed_memory
