"""Cluster mode: `remat serve --queue` replicas and `remat worker` processes on the real Redis."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis
from factories import chain
from processes import REDIS_URL, Processes, alive, brief, cancel_when_running, wait_until

from remat.clients.http import Client
from remat.service import JobStatus, RedisStore

pytestmark = pytest.mark.redis


@pytest.fixture
def store(redis_db: redis.Redis, namespace: str) -> RedisStore:
    return RedisStore.from_url(REDIS_URL, prefix=f"{namespace}:")


def _owner_pid(owner: str) -> int:
    return int(owner.split(":")[1])


def test_jobs_run_on_workers_and_every_replica_sees_them(processes: Processes, store: RedisStore):
    first, second = processes.server("--queue", REDIS_URL), processes.server("--queue", REDIS_URL)
    workers = [processes.worker(), processes.worker()]
    with Client(first.url) as a, Client(second.url) as b:
        result = a.solve(chain(30), budget_ratio=0.5, strategy="chen-greedy")
        assert result.status == "feasible" and result.peak_memory is not None and result.peak_memory <= result.budget
        jobs = [a.submit(chain(n), budget_ratio=0.5, strategy="checkpoint-last") for n in range(10, 30)]
        final = [b.wait(j["id"], timeout_s=60) for j in jobs]
    assert {j["status"] for j in final} == {"succeeded"}
    owners = {_owner_pid(store.get(j["id"]).owner) for j in jobs}
    assert owners <= {w.pid for w in workers}


def test_a_worker_killed_in_the_middle_of_a_solve_leads_to_a_retry(processes: Processes, store: RedisStore):
    server = processes.server("--queue", REDIS_URL)
    workers = {w.pid: w for w in (processes.worker(), processes.worker())}
    with Client(server.url) as client:
        job = client.submit(chain(700), budget_ratio=0.3, strategy="chen-greedy", time_limit_s=120)
        running = wait_until(lambda: (j := store.get(job["id"], with_result=False)).solver_pid and j)
        workers[_owner_pid(running.owner)].kill()
        wait_until(lambda: not alive(running.solver_pid), timeout_s=10)
        final = client.wait(job["id"], timeout_s=120)
    assert final["status"] == "succeeded" and final["attempts"] == 2, brief(final)
    [note] = final["history"]  # on this host the reaper sees the pid is gone; elsewhere, the lease runs out
    assert note.startswith(f"attempt 1: the process running it ({running.owner})") and note.endswith("queued again")
    assert _owner_pid(store.get(job["id"]).owner) != _owner_pid(running.owner)


def test_when_no_attempt_is_left_the_failure_is_visible(processes: Processes, store: RedisStore):
    server = processes.server("--queue", REDIS_URL, REMAT_MAX_ATTEMPTS="1")
    worker = processes.worker()
    with Client(server.url) as client:
        job = client.submit(chain(700), budget_ratio=0.3, strategy="chen-greedy", time_limit_s=120)
        wait_until(lambda: store.get(job["id"], with_result=False).solver_pid)
        worker.kill()
        final = client.wait(job["id"], timeout_s=30)
    assert final["status"] == "failed" and "attempt 1 of 1" in final["error"] and "giving up" in final["error"]


def test_a_job_queued_without_a_queue_message_gets_one(processes: Processes, store: RedisStore):
    """The API died between storing a job and enqueuing it: maintenance sends the message."""
    graph = chain(15)
    store.put_graph(graph.sha256, graph.to_json())
    from remat.service import SolveSpec

    job, fresh = store.submit(SolveSpec(graph.sha256, graph.checkpoint_all_peak, "checkpoint-all"),
                              graph_name=graph.name, token=None)
    assert fresh
    processes.worker()
    server = processes.server("--queue", REDIS_URL)
    with Client(server.url) as client:
        assert client.wait(job.id, timeout_s=30)["status"] == "succeeded"


def test_jobs_queued_while_the_api_is_down_still_run_and_a_queued_job_can_be_cancelled(
        processes: Processes, store: RedisStore):
    server = processes.server("--queue", REDIS_URL)
    with Client(server.url) as client:
        jobs = [client.submit(chain(n), budget_ratio=0.5, strategy="checkpoint-last") for n in range(10, 15)]
        doomed = client.submit(chain(99), budget_ratio=0.5, strategy="checkpoint-last")
        assert client.cancel(doomed["id"])["status"] == "cancelled"
        assert client.cancel(doomed["id"])["status"] == "cancelled"  # again: a no-op, not a 500
    server.kill()
    processes.worker()
    wait_until(lambda: all(store.get(j["id"]).status is JobStatus.SUCCEEDED for j in jobs), timeout_s=60)
    with Client(processes.server("--queue", REDIS_URL).url) as client:
        assert {client.job(j["id"])["status"] for j in jobs} == {"succeeded"}
        assert client.job(doomed["id"])["status"] == "cancelled" and client.job(doomed["id"])["attempts"] == 0


def test_cancel_reaches_the_worker_and_stops_the_solve(processes: Processes, store: RedisStore):
    server = processes.server("--queue", REDIS_URL)
    processes.worker()
    with Client(server.url) as client:
        final, pid = cancel_when_running(client, store, chain(900), "checkmate")
    assert final["status"] == "cancelled" and not alive(pid), brief(final)
    assert final["result"] is None or final["result"]["status"] == "cancelled"


def test_a_workers_heartbeat_says_whether_its_maintenance_runs(processes: Processes, store: RedisStore, tmp_path):
    """What the image's HEALTHCHECK and the workers' liveness probe run: `remat healthcheck`."""
    beat = tmp_path / "heartbeat"
    worker = processes.worker(REMAT_HEARTBEAT_FILE=str(beat))
    env = {**os.environ, "REMAT_HEARTBEAT_FILE": str(beat)}

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "remat.clients.cli", "healthcheck", "--max-age", "3"],
                              env=env, capture_output=True, text=True, timeout=30)

    assert "healthy" in wait_until(lambda: (done := check()).returncode == 0 and done).stdout
    worker.kill()
    failed = wait_until(lambda: (done := check()).returncode == 2 and done, timeout_s=15)
    assert "Unhealthy: the last maintenance pass was" in failed.stderr
