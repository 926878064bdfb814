"""The service read as an attacker would: a real `remat serve` (uvicorn) with two tokens, real workers, the real Redis.

Each test is one finding of the hardening issue: tenants kept apart, nothing read before the token,
label values bounded, no code from the queue, large graphs in bounded space, old records expired.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import httpx
import pytest
import redis
from attack_payloads import Gadget
from factories import chain
from processes import REDIS_URL, Processes, Server, at_once, invented_methods, memory_mb, wait_until
from rq import Callback, Queue
from rq.serializers import JSONSerializer
from rq.webhook import Webhook

from remat.clients.http import Client, ServiceError
from remat.service._cluster import PERFORM

ALICE = "alice-" + "a" * 26
BOB = "bob-" + "b" * 28
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def server(processes: Processes) -> Server:
    return processes.server(REMAT_TOKENS=f"{ALICE},{BOB}")


def _finished(client: Client, **options) -> dict:
    return client.wait(client.submit(chain(8), **options)["id"], timeout_s=60)


def test_a_token_cannot_read_list_cancel_follow_or_wipe_another_tokens_jobs(server: Server):
    with Client(server.url, token=ALICE) as alice, Client(server.url, token=BOB) as bob:
        done = _finished(alice, budget_ratio=1.0, strategy="checkpoint-all")
        running = alice.submit(chain(900), budget_ratio=0.5, strategy="griewank", time_limit_s=300)
        for attempt in (lambda i: bob.job(i), lambda i: bob.cancel(i), lambda i: next(bob.events(i))):
            for job_id in (done["id"], running["id"]):
                with pytest.raises(ServiceError) as refused:
                    attempt(job_id)
                assert refused.value.status == 404
        assert bob.jobs() == [] and {j["id"] for j in alice.jobs()} == {done["id"], running["id"]}
        assert alice.job(running["id"])["status"] in ("queued", "running")

        alice.cancel(running["id"])
        stopped = alice.wait(running["id"], timeout_s=30)
        again = bob.submit(chain(900), budget_ratio=0.5, strategy="griewank", time_limit_s=300)
        assert again["id"] != running["id"] and alice.job(running["id"]) == stopped  # not wiped, not run again
        bob.cancel(again["id"])

        shared = bob.solve(chain(8), budget_ratio=1.0, strategy="checkpoint-all")  # a copy of a reusable result
        bobs = {j["id"] for j in bob.jobs()}
        assert shared.to_json() == done["result"] and len(bobs) == 2 and again["id"] in bobs and done["id"] not in bobs


def test_a_token_cannot_see_another_tokens_sweeps_or_pages(server: Server):
    with Client(server.url, token=ALICE) as alice, Client(server.url, token=BOB) as bob:
        sweep = alice.sweep(chain(5), strategies=["checkpoint-all"], budgets=[10**6])
        job = alice.wait(alice.get_sweep(sweep["id"])["jobs"][0]["id"], timeout_s=60)
        with pytest.raises(ServiceError, match="404"):
            bob.get_sweep(sweep["id"])
        assert httpx.get(f"{server.url}/v1/sweeps", headers={"Authorization": f"Bearer {BOB}"}).json()["count"] == 0
    pages = (f"/dashboard/sweeps/{sweep['id']}", f"/dashboard/jobs/{job['id']}", f"/dashboard/jobs/{job['id']}/data")
    for path in pages:
        assert httpx.get(server.url + path, cookies={"remat_token": BOB}).status_code == 404, path
        assert httpx.get(server.url + path, cookies={"remat_token": ALICE}).status_code == 200, path
    index = httpx.get(f"{server.url}/dashboard", cookies={"remat_token": BOB}).text
    assert sweep["id"] not in index and job["id"] not in index


def test_a_body_without_a_token_is_refused_before_it_is_read(server: Server):
    """Ten 32 MiB bodies without a token: each gets 401 before a byte of it is sent; the server's memory stays."""
    def attack() -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(f"POST /v1/solve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {32 * 2**20 - 1}\r\n\r\n".encode())
            answer = s.recv(64)  # nothing of the body sent yet
            try:
                for _ in range(512):
                    s.sendall(b"[" + b"1," * 32767)
            except OSError:
                pass  # the server may close the connection
            return answer

    before = memory_mb(server.pid)
    answers = at_once([attack] * 10)
    assert len(answers) == 10 and all(a.startswith(b"HTTP/1.1 401") for a in answers), answers
    assert memory_mb(server.pid) - before < 20
    login = httpx.post(f"{server.url}/dashboard/login", content=b"token=" + b"x" * 2**20,
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert login.status_code == 413


def test_invented_http_methods_add_no_metric_series(server: Server):
    invented_methods(server.port, 10_000)
    text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {ALICE}"}).text
    series = [line for line in text.splitlines() if line.startswith("remat_http_requests_total{")]
    assert 'remat_http_requests_total{method="other",route="unmatched",status="401"} 10000.0' in series
    assert len(series) <= 3, series


@pytest.mark.redis
def test_nothing_put_on_the_queue_runs_but_remat_tickets(processes: Processes, redis_db: redis.Redis, namespace: str,
                                                         tmp_path: Path):
    """Whoever reaches Redis may queue pickles, other functions, callbacks and webhooks: none of them runs."""
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "REMAT_TEST_MARKER_DIR": str(markers)}
    server = processes.server("--queue", REDIS_URL, REMAT_TOKENS=ALICE, **env)
    worker = processes.worker(**env)
    hook = socket.create_server(("127.0.0.1", 0))
    hook.settimeout(0.1)
    pickled = Queue(namespace, connection=redis_db)
    pickled.enqueue_call("attack_payloads.payload", args=(Gadget(),), meta={"gadget": Gadget()})
    as_json = Queue(namespace, connection=redis_db, serializer=JSONSerializer)
    as_json.enqueue_call("attack_payloads.payload")
    as_json.enqueue_call("os.system", args=(f"touch {markers}/system-ran",))
    as_json.enqueue_call(PERFORM, args=("extra",))
    as_json.enqueue_call(PERFORM, on_success=Callback("attack_payloads.callback"),
                         on_failure=Callback("attack_payloads.callback"),
                         webhooks=[Webhook(f"http://127.0.0.1:{hook.getsockname()[1]}/", "finished"),
                                   Webhook(f"http://127.0.0.1:{hook.getsockname()[1]}/", "failed")])
    with Client(server.url, token=ALICE) as client:  # the worker got past all of them and still runs jobs
        assert client.solve(chain(6), budget_ratio=1.0, strategy="checkpoint-all").status == "feasible"
    wait_until(lambda: as_json.count == 0 and pickled.count == 0, timeout_s=30)
    with pytest.raises(TimeoutError):
        hook.accept()
    hook.close()
    assert list(markers.iterdir()) == [] and worker.popen.poll() is None
    assert "is not a remat ticket" in worker.output()


@pytest.mark.slow
def test_a_10000_node_result_and_its_job_page_stay_within_a_few_megabytes(server: Server):
    graph = chain(5000)  # 10,001 nodes
    before = memory_mb(server.pid)
    with Client(server.url, token=ALICE, timeout_s=120) as alice:
        job = alice.wait(alice.submit(graph, budget_ratio=1.0, strategy="checkpoint-all")["id"], timeout_s=300)
        assert job["status"] == "succeeded" and job["result"]["status"] == "feasible"
        answer = httpx.get(f"{server.url}/v1/jobs/{job['id']}", headers={"Authorization": f"Bearer {ALICE}"})
        full = httpx.get(f"{server.url}/v1/jobs/{job['id']}", params={"schedule": "full"},
                         headers={"Authorization": f"Bearer {ALICE}"})
    page = httpx.get(f"{server.url}/dashboard/jobs/{job['id']}", cookies={"remat_token": ALICE}, timeout=120)
    assert page.status_code == 200 and '"heatmap"' in page.text
    assert len(answer.content) < 3 * 2**20 and len(page.content) < 3 * 2**20
    assert full.status_code == 422 and "compact form" in full.json()["detail"]  # 25 million ids, refused
    assert json.loads(answer.content)["result"]["schedule"]["encoding"] == "changes"
    assert memory_mb(server.pid) - before < 300  # the dense n x n heat maps alone were 1.6 GB


@pytest.mark.parametrize("mode", ["embedded", pytest.param("cluster", marks=pytest.mark.redis)])
def test_ended_jobs_are_deleted_once_retention_is_over(processes: Processes, mode: str, request):
    args = ("--queue", REDIS_URL) if mode == "cluster" else ()
    env = {"REMAT_TOKENS": ALICE, "REMAT_RETENTION_S": "2", "REMAT_EXPIRE_INTERVAL_S": "0.5"}
    server = processes.server(*args, **env)
    if mode == "cluster":
        request.getfixturevalue("redis_db")
        processes.worker(**env)
    with Client(server.url, token=ALICE) as alice:
        job = _finished(alice, budget_ratio=1.0, strategy="checkpoint-all")
        assert job["status"] == "succeeded"
        wait_until(lambda: not alice.jobs(), timeout_s=30)
        with pytest.raises(ServiceError, match="404"):
            alice.job(job["id"])
    if mode == "cluster":
        namespace = request.getfixturevalue("namespace")
        left = [k.decode() for k in redis.Redis.from_url(REDIS_URL).scan_iter(match=f"{namespace}:*")]
        assert not [k for k in left if any(part in k for part in (":job:", ":result:", ":graph:", ":cache:"))], left
    else:
        import sqlite3

        db = sqlite3.connect(processes.tmp_path / "data" / "jobs.sqlite3")
        assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM graphs").fetchone()[0] == 0


def test_a_token_in_a_dashboard_link_signs_nobody_in_and_stays_out_of_the_access_log(server: Server):
    r = httpx.get(f"{server.url}/dashboard", params={"token": ALICE}, headers={"Accept": "text/html"},
                  follow_redirects=False)
    assert r.status_code == 401 and "remat_token" not in r.headers.get("set-cookie", "")
    time.sleep(0.5)
    assert ALICE not in server.output() and "token=***" in server.output()
