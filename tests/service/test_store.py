"""Both job stores pass the same tests: transitions are atomic, indexes agree with records, tokens stay apart,
claims are fair, and retention deletes what it no longer keeps."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from clock import Clock
from factories import result_document
from processes import REDIS_URL, at_once

from remat.service import (
    Claim,
    JobNotFound,
    JobStatus,
    JobStore,
    RedisStore,
    SolveSpec,
    SqliteStore,
    Sweep,
    SweepPoint,
    _jobs,
)
from remat.service._store import Retention


@pytest.fixture
def store(make_store: Callable[..., JobStore]) -> JobStore:
    return make_store(lease_s=0.5, max_attempts=2)


def spec(budget: int = 100, strategy: str = "checkpoint-all", graph: str = "f" * 64) -> SolveSpec:
    return SolveSpec(graph, budget, strategy)


def finish(store: JobStore, job_id: str, status: str = "feasible") -> None:
    claimed = store.mark_running(job_id, "host:1:a")
    assert claimed is not None
    store.mark_finished(Claim(job_id, "host:1:a", claimed.attempts), result_document(status=status, cost=1.0))


def test_one_tokens_identical_requests_share_a_job_and_tokens_never_do(store: JobStore):
    job, fresh = store.submit(spec(), graph_name="g", token="t1")
    assert fresh and job.status is JobStatus.QUEUED
    again, fresh_again = store.submit(spec(), graph_name="g", token="t1")
    assert not fresh_again and again.id == job.id
    theirs, fresh_theirs = store.submit(spec(), graph_name="g", token="t2")
    assert fresh_theirs and theirs.id != job.id
    assert store.count(JobStatus.QUEUED) == 2 and store.count_active("t1") == store.count_active("t2") == 1
    assert [j.id for j in store.list_jobs("t1")] == [job.id] and [j.id for j in store.list_jobs("t2")] == [theirs.id]
    assert store.list_jobs(None) == []


def test_a_reusable_result_answers_another_tokens_request_with_a_copy(make_store: Callable[..., JobStore]):
    store = make_store()
    mine, _ = store.submit(spec(), graph_name="g", token="t1")
    finish(store, mine.id)
    theirs, fresh = store.submit(spec(), graph_name="g", token="t2")
    assert not fresh and theirs.id != mine.id and theirs.status is JobStatus.SUCCEEDED and theirs.attempts == 0
    assert store.get(theirs.id).result == store.get(mine.id).result
    assert store.get(mine.id).token == "t1" and [j.id for j in store.list_jobs("t2")] == [theirs.id]


def test_results_are_not_shared_when_sharing_is_off(make_store: Callable[..., JobStore]):
    store = make_store(share_results=False)
    mine, _ = store.submit(spec(), graph_name="g", token="t1")
    finish(store, mine.id)
    theirs, fresh = store.submit(spec(), graph_name="g", token="t2")
    assert fresh and theirs.status is JobStatus.QUEUED


def test_another_tokens_result_that_cannot_be_reused_is_left_alone(store: JobStore):
    mine, _ = store.submit(spec(), graph_name="g", token="t1")
    finish(store, mine.id, status="timeout")
    theirs, fresh = store.submit(spec(), graph_name="g", token="t2")
    assert fresh and theirs.status is JobStatus.QUEUED
    kept = store.get(mine.id)
    assert kept.status is JobStatus.SUCCEEDED and kept.token == "t1"
    assert kept.result is not None and kept.result.status == "timeout"


def test_claims_take_turns_between_tokens(make_store: Callable[..., JobStore]):
    """One slot, a token with five queued jobs and one with two: the second does not wait for the first's five."""
    clock = Clock()
    store = make_store(clock=clock)
    for budget in range(5):
        store.submit(spec(budget), graph_name="g", token="busy")
        clock.advance(1)
    for budget in range(2):
        store.submit(spec(budget), graph_name="g", token="late")
        clock.advance(1)
    order = []
    while (job := store.claim_next("host:1:slot")) is not None:
        order.append(job.token)
        store.mark_finished(Claim(job.id, "host:1:slot", 1), result_document())
        clock.advance(1)
    assert order == ["busy", "late", "busy", "late", "busy", "busy", "busy"]


def test_a_token_with_fewer_running_jobs_goes_first(make_store: Callable[..., JobStore]):
    clock = Clock()
    store = make_store(clock=clock)
    for budget in range(3):
        store.submit(spec(budget), graph_name="g", token="busy")
    store.submit(spec(), graph_name="g", token="late")
    assert [store.claim_next(f"host:1:s{i}").token for i in range(3)] == ["busy", "late", "busy"]


def test_the_whole_life_of_a_job(store: JobStore):
    job, _ = store.submit(spec(), graph_name="g", token=None)
    running = store.mark_running(job.id, "host:1:a")
    assert running is not None and running.attempts == 1
    assert store.mark_running(job.id, "host:1:b") is None
    by = Claim(job.id, "host:1:a", 1)
    assert store.renew(by, progress={"elapsed_s": 1.0}, solver_pid=42).solver_pid == 42
    result = result_document(cost=3.0)
    done = store.mark_finished(by, result)
    assert done.status is JobStatus.SUCCEEDED
    assert store.get(job.id).result == result and store.get(job.id, with_result=False).result is None
    assert store.count(JobStatus.SUCCEEDED) == 1 and store.count(JobStatus.RUNNING) == 0
    assert store.count_active(None) == 0
    cached, fresh = store.submit(spec(), graph_name="g", token=None)
    assert not fresh and cached.status is JobStatus.SUCCEEDED


def test_a_result_that_cannot_be_reused_is_solved_again(store: JobStore):
    job, _ = store.submit(spec(), graph_name="g", token=None)
    store.mark_running(job.id, "o")
    store.mark_finished(Claim(job.id, "o", 1), result_document(status="timeout"))
    later, _ = store.submit(spec(budget=7), graph_name="g", token=None)
    again, fresh = store.submit(spec(), graph_name="g", token=None)
    assert fresh and again.status is JobStatus.QUEUED and store.get(job.id).result is None
    assert [j.id for j in store.list_jobs(None, limit=2)] == [job.id, later.id]  # run again: newest first


def test_reap_requeues_then_fails_jobs_whose_lease_ran_out(store: JobStore):
    job, _ = store.submit(spec(), graph_name="g", token=None)
    store.mark_running(job.id, "elsewhere:1:a")
    assert store.reap() == []
    time.sleep(0.6)
    [again] = store.reap()
    assert again.status is JobStatus.QUEUED and again.attempts == 1
    store.mark_running(job.id, "elsewhere:1:a")
    time.sleep(0.6)
    assert store.reap() == []
    assert store.get(job.id).status is JobStatus.FAILED


def test_only_one_of_many_concurrent_claims_wins(store: JobStore):
    job, _ = store.submit(spec(), graph_name="g", token=None)
    wins = []

    def claim(i: int) -> None:
        if store.mark_running(job.id, f"o{i}") is not None:
            wins.append(i)

    at_once([lambda i=i: claim(i) for i in range(8)])
    assert len(wins) == 1 and store.get(job.id).owner == f"o{wins[0]}"


def test_listing_and_lookups(store: JobStore):
    ids = [store.submit(spec(budget=b), graph_name="g", token=None)[0].id for b in (1, 2, 3)]
    assert [j.id for j in store.list_jobs(None, limit=2)] == ids[:0:-1]
    assert [j.id for j in store.get_many([ids[2], "nope", ids[0]])] == [ids[2], ids[0]]
    assert [j.id for j in store.jobs_with_status(JobStatus.QUEUED)] == ids
    with pytest.raises(JobNotFound):
        store.get("nope")
    store.request_cancel(ids[0])
    assert [j.id for j in store.list_jobs(None, status=JobStatus.CANCELLED)] == [ids[0]]


def test_graphs_and_sweeps(store: JobStore):
    store.put_graph("f" * 64, {"format": "remat.graph/v1", "nodes": []})
    store.put_graph("f" * 64, {"other": True})
    assert store.get_graph("f" * 64)["format"] == "remat.graph/v1"
    sweep = Sweep("s1", "f" * 64, "g", (SweepPoint("checkpoint-all", 5, "j1"),), 1.0, None, {"checkpoint-all": 5})
    store.put_sweep(sweep)
    assert store.get_sweep("s1") == sweep and store.list_sweeps(None) == [sweep] and store.list_sweeps("t") == []
    with pytest.raises(JobNotFound):
        store.get_sweep("s2")


def test_a_sweep_is_unplanned_until_its_new_record_says_otherwise(store: JobStore):
    sweep = Sweep("s1", "f" * 64, "g", (SweepPoint("chen-sqrtn", 5, "j1"),), 1.0, "t", planned=False)
    store.put_sweep(sweep)
    assert store.unplanned_sweeps() == [sweep] and store.list_sweeps("t") == [sweep]
    planned = Sweep("s1", "f" * 64, "g", (SweepPoint("chen-sqrtn", 5, "j1"), SweepPoint("chen-sqrtn", 3, "j2")),
                    1.0, "t", {"chen-sqrtn": 3}, planned=True)
    store.replace_sweep(planned)
    assert store.unplanned_sweeps() == [] and store.get_sweep("s1") == planned
    store.replace_sweep(Sweep("gone", "f" * 64, "g", (), 1.0))
    with pytest.raises(JobNotFound):
        store.get_sweep("gone")


def test_expire_deletes_old_and_surplus_ended_jobs_and_sweeps_and_graphs_nothing_needs(
        make_store: Callable[..., JobStore]):
    clock = Clock()
    store = make_store(clock=clock)
    day, hour = 86400.0, 3600.0
    store.put_graph("a" * 64, {"nodes": "old"})
    old, _ = store.submit(spec(1, graph="a" * 64), graph_name="g", token="t")
    finish(store, old.id)
    store.put_sweep(Sweep("old-sweep", "a" * 64, "g", (SweepPoint("checkpoint-all", 1, old.id),), clock(), "t"))
    clock.advance(2 * day)
    store.put_graph("b" * 64, {"nodes": "new"})
    recent = []
    for budget in range(2, 6):
        job, _ = store.submit(spec(budget, graph="b" * 64), graph_name="g", token="t")
        finish(store, job.id)
        recent.append(job.id)
        clock.advance(1)
    waiting, _ = store.submit(spec(99, graph="b" * 64), graph_name="g", token="t")
    clock.advance(2 * hour)

    expired = store.expire(Retention(max_age_s=day, max_jobs=3, max_sweeps=10))
    assert (expired.jobs, expired.sweeps, expired.graphs) == (2, 1, 1)  # the old job and the oldest recent one
    for gone in (old.id, recent[0]):
        with pytest.raises(JobNotFound):
            store.get(gone)
    assert [j.id for j in store.list_jobs("t")] == [waiting.id, *recent[:0:-1]]
    assert store.get(waiting.id).status is JobStatus.QUEUED and store.count(JobStatus.SUCCEEDED) == 3
    with pytest.raises(JobNotFound):
        store.get_graph("a" * 64)  # nothing refers to it any more
    assert store.get_graph("b" * 64) == {"nodes": "new"}
    assert store.list_sweeps("t") == [] and store.cached_result(spec(1, graph="a" * 64).key) is None
    again, fresh = store.submit(spec(1, graph="a" * 64), graph_name="g", token="t")
    assert fresh and again.status is JobStatus.QUEUED
    assert store.expire(Retention(max_age_s=day, max_jobs=3, max_sweeps=10)) == type(expired)()


class _FailingCommit:
    """A connection whose next COMMIT fails, as a full disk or a busy database would make it."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return self.conn.execute(sql, *args)

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction


def test_a_failed_commit_releases_the_sqlite_write_lock(tmp_path: Path):
    store = SqliteStore(tmp_path / "jobs.sqlite3")
    job, _ = store.submit(spec(), graph_name="g", token=None)
    real = store._conn()
    store._local.conn = _FailingCommit(real)
    with pytest.raises(sqlite3.OperationalError):
        store.request_cancel(job.id)
    assert not real.in_transaction
    other = sqlite3.connect(tmp_path / "jobs.sqlite3", timeout=0.5, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # would wait for the lock, then fail, had the transaction stayed open
    other.execute("ROLLBACK")
    store._local.conn = real
    assert store.get(job.id).status is JobStatus.QUEUED


@pytest.mark.redis
def test_redis_indexes_records_written_before_tenancy(redis_db: redis.Redis, namespace: str):
    """A store written by the previous release (records, no per-token indexes) is indexed by migrate()."""
    store = RedisStore(redis.Redis.from_url(REDIS_URL, decode_responses=True), prefix=f"{namespace}:")
    job = _jobs.new_job(spec(), graph_name="g", token=None, now=1.0)
    store.redis.set(store.key_for("job", job.id), json.dumps(job.to_record()))
    assert store.list_jobs(None) == []
    store.migrate()
    assert [j.id for j in store.list_jobs(None)] == [job.id]
    assert store.claim_next("host:1:a").id == job.id
    store.close()


def test_sqlite_upgrades_a_store_of_the_previous_release(tmp_path: Path):
    """A file written by the previous release (schema 1) keeps its jobs: they list, claim and expire as new ones."""
    from remat.service._sqlite import _MIGRATIONS

    conn = sqlite3.connect(tmp_path / "jobs.sqlite3", isolation_level=None)
    conn.executescript(_MIGRATIONS[0] + "; PRAGMA user_version = 1")
    job = _jobs.new_job(spec(), graph_name="g", token=None, now=1.0)
    conn.execute("INSERT INTO jobs (id, status, token, created_at, queued_at, record) VALUES (?, ?, ?, ?, ?, ?)",
                 (job.id, job.status.value, None, 1.0, 1.0, json.dumps(job.to_record())))
    conn.close()
    store = SqliteStore(tmp_path / "jobs.sqlite3")
    assert [j.id for j in store.list_jobs(None)] == [job.id]
    assert store.claim_next("host:1:a").id == job.id
    SqliteStore(tmp_path / "jobs.sqlite3").close()  # opening it again changes nothing
    store.close()


def test_a_jobs_transfer_and_host_budget_are_stored_with_it_and_outlive_the_store(
        make_store: Callable[..., JobStore]):
    offloading = SolveSpec("f" * 64, 100, "checkpoint-all", transfer={"bandwidth": 4.0, "latency": 0.5},
                           host_budget=64)
    store = make_store()
    job, fresh = store.submit(offloading, graph_name="g", token="t1")
    plain, _ = store.submit(spec(), graph_name="g", token="t1")
    assert fresh and job.id != plain.id
    finish(store, job.id)
    store.close()
    reopened = make_store()  # a restart: a new store on the same file or Redis prefix
    back = reopened.get(job.id)
    assert back.spec == offloading and back.spec.transfer == {"bandwidth": 4.0, "latency": 0.5}
    assert back.spec.host_budget == 64 and back.status is JobStatus.SUCCEEDED
    assert reopened.submit(offloading, graph_name="g", token="t1") == (back, False), "its result is reused"
