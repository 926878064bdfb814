"""`remat worker` against a Redis that goes away, and a worker killed under its solve (issue 31, finding 5).

Each test runs its own redis-server on a free port (:class:`RedisServer`), never the shared one: the
outage is a SHUTDOWN SAVE, then a start on the same port and data. The outage lasts OUTAGE_S (6 s,
not the 20 s of the finding: the worker's behaviour is the same once its backoff has reached its cap,
REMAT_RECONNECT_MAX_WAIT_S, set to 2 s here).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import chain
from processes import Processes, RedisServer, alive, brief, descendants, wait_until

from remat.clients.http import Client
from remat.service import RedisStore
from remat.solvers import SOLVE_GRACE_S

pytestmark = [pytest.mark.redis,
              pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server on the PATH")]

OUTAGE_S = 6.0
"""Seconds each test keeps its Redis down."""
RECONNECT = {"REMAT_RECONNECT_MAX_WAIT_S": "2"}


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _store(own_redis: RedisServer, namespace: str) -> RedisStore:
    return RedisStore.from_url(own_redis.url, prefix=f"{namespace}:")


def _still_running(process, seconds: float) -> None:  # type: ignore[no-untyped-def]
    """Fails as soon as ``process`` exits within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.popen.poll() is None, f"the worker exited ({process.popen.returncode}):\n{process.output()}"
        time.sleep(0.2)


def test_a_worker_outlives_a_redis_outage_and_runs_the_jobs_after_it(processes: Processes, own_redis: RedisServer,
                                                                      namespace: str):
    server = processes.server("--queue", own_redis.url)
    worker = processes.worker(queue=own_redis.url, **RECONNECT)
    store = _store(own_redis, namespace)
    with Client(server.url) as client:
        assert client.solve(chain(20), budget_ratio=0.5, strategy="chen-greedy").status == "feasible"
        running = client.submit(chain(900), budget_ratio=0.5, strategy="checkmate", time_limit_s=10, convergence=None)
        wait_until(lambda: store.get(running["id"], with_result=False).solver_pid, timeout_s=30)
        own_redis.stop()
        _still_running(worker, OUTAGE_S)
        own_redis.start()
        back = time.monotonic()
        jobs = [client.submit(chain(n), budget_ratio=0.5, strategy="checkpoint-last") for n in range(10, 16)]
        final = [client.wait(j["id"], timeout_s=60) for j in jobs]
        ran_s = time.monotonic() - back
        interrupted = client.wait(running["id"], timeout_s=60)
    assert {j["status"] for j in final} == {"succeeded"}, [brief(j) for j in final]
    assert interrupted["status"] == "succeeded", brief(interrupted)
    assert worker.popen.poll() is None
    log = worker.output()
    assert log.count(f"Redis at {own_redis.url} is unreachable") == 1 and "Traceback" not in log, log
    print(f"outage {OUTAGE_S:g} s; the 6 jobs queued after it ran in {ran_s:.1f} s; the job running through it "
          f"took {interrupted['attempts']} attempt(s)")


def test_a_worker_started_while_redis_is_down_waits_for_it(processes: Processes, own_redis: RedisServer):
    own_redis.stop()
    worker = processes.worker(queue=own_redis.url, **RECONNECT)
    _still_running(worker, OUTAGE_S / 2)
    own_redis.start()
    server = processes.server("--queue", own_redis.url)
    with Client(server.url) as client:
        job = client.submit(chain(12), budget_ratio=0.5, strategy="checkpoint-last")
        assert client.wait(job["id"], timeout_s=30)["status"] == "succeeded"
    assert worker.popen.poll() is None


@pytest.mark.parametrize("url, shown", [("redis://:hunter2-secret@127.0.0.1:1/0", "redis://***@127.0.0.1:1/0"),
                                         ("redis://127.0.0.1:1/0?password=hunter2-secret",
                                          "redis://127.0.0.1:1/0?password=***")])
def test_a_worker_says_once_what_it_waits_for_and_shows_no_password(processes: Processes, url: str, shown: str):
    worker = processes.worker(queue=url, **RECONNECT)
    wait_until(lambda: "is unreachable" in worker.output(), timeout_s=30)
    _still_running(worker, 3.0)
    log = worker.output()
    assert log.count(f"Redis at {shown} is unreachable") == 1 and "the worker waits for it" in log, log
    assert "hunter2" not in log and "Traceback" not in log, log


def test_a_worker_stops_on_sigterm_while_redis_is_down(processes: Processes, own_redis: RedisServer):
    worker = processes.worker(queue=own_redis.url, **RECONNECT)
    wait_until(lambda: "Listening on" in worker.output(), timeout_s=30)
    own_redis.stop()
    wait_until(lambda: "is unreachable" in worker.output(), timeout_s=30)
    worker.kill(signal.SIGTERM)
    assert worker.popen.wait(15) == 0, worker.output()


def test_no_solver_process_outlives_its_worker_killed_mid_solve(processes: Processes, own_redis: RedisServer,
                                                                 namespace: str):
    """The solver is frozen first (SIGSTOP), as one stuck in C code that holds the interpreter would be: its
    listening thread cannot see the pipe close, so only the kernel can end it."""
    server = processes.server("--queue", own_redis.url)
    worker = processes.worker(queue=own_redis.url)
    store = _store(own_redis, namespace)
    with Client(server.url) as client:
        job = client.submit(chain(900), budget_ratio=0.5, strategy="checkmate", time_limit_s=120, convergence=None)
        solver = wait_until(lambda: store.get(job["id"], with_result=False).solver_pid, timeout_s=30)
    time.sleep(1.0)  # its helpers have started
    started = descendants(worker.pid)
    assert solver in started
    os.kill(solver, signal.SIGSTOP)
    worker.kill()
    killed = time.monotonic()
    try:
        wait_until(lambda: not any(alive(pid) for pid in started), timeout_s=SOLVE_GRACE_S, interval_s=0.05)
        print(f"every process the worker started was gone {time.monotonic() - killed:.2f} s after its kill -9")
    finally:
        for pid in filter(alive, started):
            os.kill(pid, signal.SIGKILL)
