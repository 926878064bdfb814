import json

import numpy as np
import pytest
from factories import BENCHMARK_NAMES, benchmark_graph, chain, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import (
    InvalidSchedule,
    Schedule,
    ScheduleEntries,
    checkpoint_all_plan,
    checkpoint_all_schedule,
    plan_from_schedule,
    recompute_closure,
    simulate,
)


@st.composite
def graph_and_retention(draw):
    g = draw(random_dags(max_nodes=10))
    n = g.size
    bits = draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))
    S = np.tril(np.array(bits, dtype=bool).reshape(n, n), k=-1)
    return g, S


@settings(max_examples=300, deadline=None)
@given(graph_and_retention())
def test_any_retention_gives_a_valid_plan_through_the_closure(case):
    g, S = case
    # S may only keep values that exist: a value appears in S only after a stage computed it
    R = recompute_closure(g, S)
    plan = plan_from_schedule(g, Schedule(R, S))
    sim = simulate(g, plan)
    assert sim.cost >= g.base_cost - 1e-9
    assert sim.compute_counts.sum() == R.sum() - (R & S).sum()


@settings(max_examples=200, deadline=None)
@given(random_dags())
def test_checkpoint_all_schedule_matches_checkpoint_all_plan(g):
    sim = simulate(g, plan_from_schedule(g, checkpoint_all_schedule(g)))
    ref = simulate(g, checkpoint_all_plan(g))
    assert sim.cost == ref.cost == g.base_cost
    assert sim.peak_memory == ref.peak_memory == g.checkpoint_all_peak


@pytest.mark.parametrize("name", BENCHMARK_NAMES)
def test_checkpoint_all_on_benchmarks(name):
    g = benchmark_graph(name)
    sch = checkpoint_all_schedule(g)
    assert np.array_equal(recompute_closure(g, sch.S), sch.R)
    assert simulate(g, plan_from_schedule(g, sch)).peak_memory == g.checkpoint_all_peak


def test_closure_recomputes_from_the_nearest_retained_value():
    g = chain(3)  # f0 f1 f2 loss g2 g1 g0
    n = g.size
    S = np.zeros((n, n), dtype=bool)
    S[1:, 0] = True  # keep f0 forever and each stage's own node into the next stage
    S[np.arange(1, n), np.arange(n - 1)] = True
    R = recompute_closure(g, S)
    f1, f2, g1 = g.index["f1"], g.index["f2"], g.index["g1"]
    assert R[g1, f1] and not R[g1, f2] and not R[g1, 0]


def test_json_round_trip():
    g = chain(3)
    sch = checkpoint_all_schedule(g)
    for full in (False, True):
        back = Schedule.from_json(g, sch.to_json(g, full=full))
        assert np.array_equal(back.R, sch.R) and np.array_equal(back.S, sch.S)


@given(st.integers(2, 12), st.integers(0, 2**32 - 1))
def test_both_json_forms_hold_any_schedule(half, seed):
    g = chain(half)
    rng = np.random.default_rng(seed)
    sch = Schedule(rng.random((g.size, g.size)) < 0.3, rng.random((g.size, g.size)) < 0.5)
    compact, full = sch.to_json(g), sch.to_json(g, full=True)
    for doc in (compact, full):
        back = Schedule.from_json(g, doc)
        assert np.array_equal(back.R, sch.R) and np.array_equal(back.S, sch.S)
    assert ScheduleEntries.from_json(g, compact).full_size == sch.R.sum() + sch.S.sum()
    assert Schedule.from_json(g, compact).to_json(g, full=True) == full


def test_the_compact_form_grows_with_the_plan_not_with_stages_times_nodes():
    g = chain(400)
    sch = checkpoint_all_schedule(g)
    compact, full = (len(json.dumps(sch.to_json(g, full=f))) for f in (False, True))
    assert compact * 20 < full
    first = sch.to_json(g)["stages"]
    assert first[1] == {"compute": ["f1"], "keep": ["f0"]}  # f0 is kept from stage 1 on, until its gradient


def test_compact_changes_must_agree_with_what_is_retained():
    g = chain(2)
    stages = [{"compute": [g.ids[t]]} for t in range(g.size)]
    with pytest.raises(InvalidSchedule, match="'drop' names 'f0', which is not retained") as err:
        Schedule.from_json(g, {"encoding": "changes", "stages": [stages[0], {**stages[1], "drop": ["f0"]},
                                                                 *stages[2:]]})
    assert err.value.stage == 1
    twice = [stages[0], {**stages[1], "keep": ["f0"]}, {**stages[2], "keep": ["f0"]}, *stages[3:]]
    with pytest.raises(InvalidSchedule, match="already retained"):
        Schedule.from_json(g, {"encoding": "changes", "stages": twice})
    with pytest.raises(InvalidSchedule, match="encoding"):
        Schedule.from_json(g, {"encoding": "zip", "stages": stages})


def test_schedule_errors_name_the_stage():
    g = chain(2)
    n = g.size
    R = np.eye(n, dtype=bool)
    with pytest.raises(InvalidSchedule) as err:
        plan_from_schedule(g, Schedule(R, np.zeros((n, n), dtype=bool)))
    assert err.value.stage == 1 and "needs 'f0'" in str(err.value)
    full = checkpoint_all_schedule(g)
    S = full.S.copy()
    S[2, 0] = False  # f0 dropped before stage 2 but claimed again at stage 3
    with pytest.raises(InvalidSchedule, match="not resident") as err:
        plan_from_schedule(g, Schedule(full.R, S))
    assert err.value.stage == 3 and err.value.node == "f0"
    with pytest.raises(InvalidSchedule, match="square"):
        Schedule(np.zeros((2, 3), dtype=bool), np.zeros((2, 3), dtype=bool))
    with pytest.raises(InvalidSchedule, match="stages"):
        Schedule.from_json(g, {"stages": []})
    for odd in (5, ["f0"], None):
        with pytest.raises(InvalidSchedule, match="is not a node of the graph"):
            Schedule.from_json(g, {"stages": [{"compute": [odd]}] * g.size})


def test_values_are_freed_as_early_as_the_schedule_allows():
    g = chain(3)
    plan = plan_from_schedule(g, checkpoint_all_schedule(g))
    assert plan == checkpoint_all_plan(g) or simulate(g, plan).peak_memory == g.checkpoint_all_peak
    # a value nobody reads later is freed right after its compute
    last = g.size - 1
    k = plan.steps.index(("compute", last))
    assert plan.steps[k + 1:] and ("free", last) in plan.steps[k + 1:]


def _moved_activation(g):
    """chain(2)'s schedule keeping f0 into stage 1 and offloading it there, reloading it in stage 3 for g0."""
    n = g.size  # f0 f1 loss g1 g0
    S = np.zeros((n, n), dtype=bool)
    S[1, 0] = True  # f0 held into stage 1, where it is offloaded after f1 reads it
    S[2, 1] = S[3, 1] = S[4, 1] = True  # f1 until g1; loss until g1; g1 for g0
    S[3, 2] = S[4, 3] = True
    S[4, 0] = True  # f0 back for g0, reloaded during stage 3
    offloads, reloads = np.zeros_like(S), np.zeros_like(S)
    offloads[1, 0] = reloads[3, 0] = True
    return S, offloads, reloads


def test_offloads_replace_frees_and_reloads_open_their_stage_without_a_recomputation():
    g = chain(2)
    S, offloads, reloads = _moved_activation(g)
    assert recompute_closure(g, S)[3, 0]  # without the reload, stage 3 recomputes f0 for stage 4
    R = recompute_closure(g, S, reloads=reloads)
    assert not R[3, 0] and R.sum() == g.size
    plan = plan_from_schedule(g, Schedule(R, S), offloads=offloads, reloads=reloads)
    names = [f"{op} {g.ids[v]}" for op, v in plan.steps]
    assert names == ["compute f0", "compute f1", "offload f0", "compute loss", "reload f0", "compute g1",
                     "free loss", "free f1", "compute g0", "free g1", "free f0", "free g0"]


def test_an_offloaded_value_cannot_be_kept_into_the_next_stage():
    g = chain(2)
    S, offloads, reloads = _moved_activation(g)
    S[2, 0] = True
    with pytest.raises(InvalidSchedule, match="Stage 1: 'f0' is offloaded, but S keeps it into stage 2"):
        plan_from_schedule(g, Schedule(recompute_closure(g, S, reloads=reloads), S), offloads=offloads,
                           reloads=reloads)


def test_with_waits_the_stage_after_an_offload_begins_by_waiting_for_it():
    g = chain(2)
    S, offloads, reloads = _moved_activation(g)
    schedule = Schedule(recompute_closure(g, S, reloads=reloads), S)
    plan = plan_from_schedule(g, schedule, offloads=offloads, reloads=reloads, waits=True)
    names = [f"{op} {g.ids[v]}" for op, v in plan.steps]
    assert names[:5] == ["compute f0", "compute f1", "offload f0", "wait f0", "compute loss"]
    without = plan_from_schedule(g, schedule, offloads=offloads, reloads=reloads)
    assert [step for step in plan.steps if step[0] != "wait"] == list(without.steps)
