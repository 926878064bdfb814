from factories import benchmark_graph, random_dags
from hypothesis import given, settings

from remat.schedules import _layout, checkpoint_all_plan, layout_plan
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
