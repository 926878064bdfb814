"""Max-batch searches in both job stores: the planner tries the batches :func:`remat.solvers.max_batch` tries,
one job each; records change only over the revision they were read at; cancel, failures and retention."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clock import Clock
from factories import chain

from remat.schedules import BatchedGraph, Graph, GraphLimits
from remat.service import Claim, Job, JobNotFound, JobStatus, JobStore, MaxBatchSearch
from remat.service._max_batch_steps import advance_max_batches
from remat.service._max_batches import new_max_batch
from remat.service._store import Retention
from remat.solvers import max_batch, solve

BUDGET = 50_000
LIMITS = GraphLimits()
CAP = 100
"""Queued or running jobs a token may have: more than any test here starts."""


def chain_at(batch: int) -> Graph:
    """100 bytes of activation per sample and node, 1,000 bytes of parameters."""
    return chain(8, cost=2.0 * batch, memory=100 * batch + 10, fixed_memory=1_000)


GRAPHS = {2: chain_at(2), 4: chain_at(4)}


@pytest.fixture
def store(make_store: Callable[..., JobStore]) -> JobStore:
    return make_store(lease_s=5)


def new_search(store: JobStore, strategies: tuple[str, ...] = ("checkpoint-all", "chen-greedy"),
               token: str | None = "t", max_overhead: float | None = None) -> MaxBatchSearch:
    for graph in GRAPHS.values():
        store.put_graph(graph.sha256, graph.to_json())
    search = new_max_batch({b: g.sha256 for b, g in GRAPHS.items()}, graph_name="chain8", budget=BUDGET,
                           max_overhead=max_overhead, strategies=[(s, "auto") for s in strategies],
                           time_limit_s=30, mip_gap=1e-4, token=token, now=store.clock())
    assert store.insert_max_batch(search)
    return search


def run_queued(store: JobStore, *, fail: Callable[[Job], bool] = lambda job: False) -> int:
    """Solve every queued job here, as a runner would (or fail those ``fail`` picks); how many ran."""
    ran = 0
    while (job := store.claim_next("host:1:test")) is not None:
        by = Claim(job.id, "host:1:test", job.attempts)
        if fail(job):
            store.mark_failed(by, "the solver process ended without a result (exit code 1)")
        else:
            graph = Graph.from_json(store.get_graph(job.spec.graph_sha256))
            store.mark_finished(by, solve(graph, budget=job.spec.budget, strategy=job.spec.strategy).document())
        ran += 1
    return ran


def run_to_the_end(store: JobStore, search_id: str) -> MaxBatchSearch:
    dispatched: list[Job] = []
    for _ in range(100):
        advance_max_batches(store, dispatched.append, LIMITS, max_active_jobs_per_token=CAP)
        search = store.get_max_batch(search_id)
        if search.ended:
            return search
        assert run_queued(store) >= 1, "a search that goes on always has a batch being solved"
    raise AssertionError("the search did not end")


def test_the_planner_tries_the_batches_max_batch_tries(store: JobStore):
    search = run_to_the_end(store, new_search(store).id)
    batched = BatchedGraph.from_graphs(GRAPHS)
    for s in search.strategies:
        here = max_batch(batched, BUDGET, strategy=s.strategy)
        assert s.ended is JobStatus.SUCCEEDED and s.batch == here.batch > 0
        assert [(t.batch, t.ok) for t in s.trials] == [(t.batch, t.ok) for t in here.trials]
        assert [t.max_overhead for t in s.trials] == pytest.approx([t.max_overhead for t in here.trials])
        best = store.get(s.best.job_id)   # the plan of the answer is an ordinary job's result
        assert best.result is not None and best.result.peak_memory is not None
        assert best.result.peak_memory <= BUDGET and best.spec.graph_sha256 == batched.at(s.batch).sha256
    assert search.bounds is not None and search.finished_at is not None
    assert store.active_max_batches() == [] and [s.id for s in store.list_max_batches("t")] == [search.id]


def test_a_batch_solved_before_is_judged_at_once(store: JobStore):
    """A second search of the same token whose batches are jobs it already has (another cap, the same solves)
    finds each holding a reusable result (a baseline's) and ends in one step, without running anything."""
    first = run_to_the_end(store, new_search(store, ("checkpoint-all",)).id)
    second = new_search(store, ("checkpoint-all",), max_overhead=1.0)   # another request, the same jobs
    advance_max_batches(store, lambda job: None, LIMITS, max_active_jobs_per_token=CAP)
    again = store.get_max_batch(second.id)
    assert again.ended and again.strategies[0].batch == first.strategies[0].batch
    assert [t.job_id for t in again.strategies[0].trials] == [t.job_id for t in first.strategies[0].trials]


def test_a_failed_batch_ends_its_strategy_with_the_reason(store: JobStore):
    search = new_search(store)
    advance_max_batches(store, lambda job: None, LIMITS, max_active_jobs_per_token=CAP)
    run_queued(store, fail=lambda job: job.spec.strategy == "chen-greedy")
    advance_max_batches(store, lambda job: None, LIMITS, max_active_jobs_per_token=CAP)
    greedy = store.get_max_batch(search.id).strategies[1]
    assert greedy.ended is JobStatus.FAILED and greedy.batch == 0
    assert greedy.error == f"batch {greedy.trials[0].batch}: the solver process ended without a result (exit code 1)"
    done = run_to_the_end(store, search.id)
    assert done.strategies[0].ended is JobStatus.SUCCEEDED and done.status({}) is JobStatus.SUCCEEDED


def test_a_record_changes_only_over_the_revision_it_was_read_at(store: JobStore):
    search = new_search(store)
    stale = search.revised(bounds=(1, 1))
    assert store.update_max_batch(search.id, lambda cur: search.revised() if cur.revision == 0 else None)
    assert store.update_max_batch(search.id, lambda cur: stale if cur.revision == stale.revision - 1 else None) is None
    assert store.get_max_batch(search.id).revision == 1
    with pytest.raises(JobNotFound):
        store.update_max_batch("nope", lambda cur: cur)


def test_a_step_that_loses_to_a_cancel_cancels_the_jobs_it_submitted(store: JobStore,
                                                                    monkeypatch: pytest.MonkeyPatch):
    search = new_search(store)
    real = store.update_max_batch

    def cancel_first(search_id, change):  # type: ignore[no-untyped-def]
        real(search_id, lambda cur: cur.cancelled(now=store.clock()))
        return real(search_id, change)

    monkeypatch.setattr(store, "update_max_batch", cancel_first)
    advance_max_batches(store, lambda job: None, LIMITS, max_active_jobs_per_token=CAP)
    monkeypatch.undo()
    cancelled = store.get_max_batch(search.id)
    assert cancelled.ended and {s.ended for s in cancelled.strategies} == {JobStatus.CANCELLED}
    assert cancelled.bounds is None                       # the step's record was never written
    assert store.count(JobStatus.QUEUED) == 0 and store.count(JobStatus.CANCELLED) == 2   # each strategy's first batch


def test_searches_of_other_tokens_stay_apart(store: JobStore):
    mine, theirs = new_search(store, token="t1"), new_search(store, token="t2")
    assert mine.id != theirs.id
    assert [s.id for s in store.list_max_batches("t1")] == [mine.id]
    assert [s.id for s in store.list_max_batches("t2")] == [theirs.id] and store.list_max_batches(None) == []
    assert {s.id for s in store.active_max_batches()} == {mine.id, theirs.id}


def test_expire_deletes_old_ended_searches_and_keeps_the_graphs_of_those_that_go_on(
        make_store: Callable[..., JobStore]):
    clock = Clock()
    store = make_store(clock=clock)
    day = 86400.0
    old = new_search(store, ("checkpoint-all",))
    assert store.update_max_batch(old.id, lambda cur: cur.cancelled(now=clock()))
    going = new_search(store, ("chen-greedy",))
    clock.advance(2 * day)
    expired = store.expire(Retention(max_age_s=day, max_jobs=10, max_sweeps=10))
    assert expired.max_batches == 1 and expired.graphs == 0
    with pytest.raises(JobNotFound):
        store.get_max_batch(old.id)
    assert store.get_max_batch(going.id) == going and store.active_max_batches() == [going]
    assert store.get_graph(GRAPHS[2].sha256)["name"] == "chain8"    # the search that goes on still reads them
    store.update_max_batch(going.id, lambda cur: cur.cancelled(now=clock()))
    clock.advance(2 * day)
    expired = store.expire(Retention(max_age_s=day, max_jobs=10, max_sweeps=10))
    assert (expired.max_batches, expired.graphs) == (1, 2) and store.list_max_batches("t") == []
