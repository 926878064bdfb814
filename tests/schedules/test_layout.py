import pytest
from factories import benchmark_graph, random_dags
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import InvalidRequest, Plan, Transfer, _layout, checkpoint_all_plan, layout_plan, simulate
from remat.solvers import checkpoint_last


def assert_no_overlap(layout):
    bufs = [b for b in layout.buffers if b.size]
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            live_together = a.start < b.end and b.start < a.end
            share_bytes = a.offset < b.offset + b.size and b.offset < a.offset + a.size
            assert not (live_together and share_bytes), (a, b)


@settings(max_examples=150, deadline=None)
@given(random_dags())
def test_layout_never_overlaps_live_buffers_and_covers_the_peak(g):
    lay = layout_plan(g, checkpoint_all_plan(g))
    assert_no_overlap(lay)
    assert lay.arena_size >= lay.activation_peak
    assert all(b.offset + b.size <= lay.arena_size for b in lay.buffers)


def test_plan_order_placement_is_also_sound(monkeypatch):
    g = benchmark_graph("fcn8")
    from remat.solvers import SolveContext
    plan = __import__("remat.schedules", fromlist=["plan_from_schedule"]).plan_from_schedule(
        g, checkpoint_last(g, 0, SolveContext()).schedule)
    lay = layout_plan(g, plan, largest_first_limit=0)
    assert_no_overlap(lay)
    assert lay.arena_size >= lay.activation_peak
    monkeypatch.setattr(_layout, "SIZE_ORDER_LIMIT", 0)
    assert layout_plan(g, plan) == lay


def test_layout_reuses_memory_on_a_real_graph():
    g = benchmark_graph("vgg16")
    lay = layout_plan(g, checkpoint_all_plan(g))
    assert lay.arena_size < sum(b.size for b in lay.buffers)
    assert lay.efficiency > 0.8


def _offload_until_first_read(g, chosen):
    """checkpoint-all with each chosen value offloaded right after its compute and reloaded before its first reader."""
    steps = []
    for op, v in checkpoint_all_plan(g).steps:
        if op == "compute":
            steps.extend(("reload", u) for u in g.deps[v] if u in chosen and ("reload", u) not in steps)
        steps.append((op, v))
        if op == "compute" and v in chosen:
            steps.append(("offload", v))
    return Plan.of(steps)


@settings(max_examples=100, deadline=None)
@given(random_dags(), st.data())
def test_a_plan_with_transfers_is_laid_out_in_the_order_its_streams_take_effect(g, data):
    read = [v for v in range(g.size) if g.users[v]]
    chosen = set(data.draw(st.lists(st.sampled_from(read), unique=True))) if read else set()
    plan = _offload_until_first_read(g, chosen)
    transfer = Transfer(bandwidth=data.draw(st.sampled_from([0.5, 4.0, 1e9])))
    lay = layout_plan(g, plan, transfer=transfer)
    assert len(lay.buffers) == g.size + len(chosen)  # every compute and every reload
    assert_no_overlap(lay)
    assert lay.arena_size >= lay.activation_peak == simulate(g, plan, transfer=transfer).peak_memory - g.fixed_memory


def test_a_plan_with_transfers_needs_them_to_be_laid_out():
    g = benchmark_graph("vgg16")
    with pytest.raises(InvalidRequest, match="transfer"):
        layout_plan(g, _offload_until_first_read(g, {0}))
