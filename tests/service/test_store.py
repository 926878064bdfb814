"""Both job stores pass the same tests: transitions are atomic, indexes agree with records."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from processes import REDIS_URL

from remat.schedules import JobNotFound
from remat.service import JobStatus, JobStore, RedisStore, SolveSpec, SqliteStore, Sweep, SweepPoint


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    if request.param == "sqlite":
        s: JobStore = SqliteStore(tmp_path / "jobs.sqlite3", lease_s=0.5, max_attempts=2)
    else:
        request.getfixturevalue("redis_db")
        s = RedisStore(redis.Redis.from_url(REDIS_URL, decode_responses=True), lease_s=0.5, max_attempts=2,
                       prefix=f"{request.getfixturevalue('namespace')}:")
    yield s
    s.close()


def spec(budget: int = 100, strategy: str = "checkpoint-all") -> SolveSpec:
    return SolveSpec("f" * 64, budget, strategy)


def test_submit_creates_then_shares(store: JobStore):
    job, fresh = store.submit(spec(), graph_name="g", token="t1")
    assert fresh and job.status is JobStatus.QUEUED
    again, fresh_again = store.submit(spec(), graph_name="g", token="t2")
    assert not fresh_again and again.id == job.id
    assert store.count(JobStatus.QUEUED) == 1 and store.count_active("t1") == 1 and store.count_active("t2") == 0


def test_the_whole_life_of_a_job(store: JobStore):
    job, _ = store.submit(spec(), graph_name="g", token=None)
    running = store.mark_running(job.id, "host:1:a")
    assert running is not None and running.attempts == 1
    assert store.mark_running(job.id, "host:1:b") is None
    from remat.service import Claim

    by = Claim(job.id, "host:1:a", 1)
    assert store.renew(by, progress={"elapsed_s": 1.0}, solver_pid=42).solver_pid == 42
    result = {"status": "feasible", "cost": 3.0, "log": []}
    done = store.mark_finished(by, result)
    assert done.status is JobStatus.SUCCEEDED
    assert store.get(job.id).result == result and store.get(job.id, with_result=False).result is None
    assert store.count(JobStatus.SUCCEEDED) == 1 and store.count(JobStatus.RUNNING) == 0
    assert store.count_active(None) == 0
    cached, fresh = store.submit(spec(), graph_name="g", token=None)
    assert not fresh and cached.status is JobStatus.SUCCEEDED


def test_a_result_that_cannot_be_reused_is_solved_again(store: JobStore):
    from remat.service import Claim

    job, _ = store.submit(spec(), graph_name="g", token=None)
    store.mark_running(job.id, "o")
    store.mark_finished(Claim(job.id, "o", 1), {"status": "timeout", "log": []})
    later, _ = store.submit(spec(budget=7), graph_name="g", token=None)
    again, fresh = store.submit(spec(), graph_name="g", token=None)
    assert fresh and again.status is JobStatus.QUEUED and store.get(job.id).result is None
    assert [j.id for j in store.list_jobs(limit=2)] == [job.id, later.id]  # run again: newest first


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

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and store.get(job.id).owner == f"o{wins[0]}"


def test_listing_and_lookups(store: JobStore):
    ids = [store.submit(spec(budget=b), graph_name="g", token=None)[0].id for b in (1, 2, 3)]
    assert [j.id for j in store.list_jobs(limit=2)] == ids[:0:-1]
    assert [j.id for j in store.get_many([ids[2], "nope", ids[0]])] == [ids[2], ids[0]]
    assert [j.id for j in store.jobs_with_status(JobStatus.QUEUED)] == ids
    with pytest.raises(JobNotFound):
        store.get("nope")
    store.request_cancel(ids[0])
    assert [j.id for j in store.list_jobs(status=JobStatus.CANCELLED)] == [ids[0]]


def test_graphs_and_sweeps(store: JobStore):
    store.put_graph("f" * 64, {"format": "remat.graph/v1", "nodes": []})
    store.put_graph("f" * 64, {"other": True})
    assert store.get_graph("f" * 64)["format"] == "remat.graph/v1"
    sweep = Sweep("s1", "f" * 64, "g", (SweepPoint("checkpoint-all", 5, "j1"),), 1.0, None, {"checkpoint-all": 5})
    store.put_sweep(sweep)
    assert store.get_sweep("s1") == sweep and store.list_sweeps() == [sweep]
    with pytest.raises(JobNotFound):
        store.get_sweep("s2")


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
