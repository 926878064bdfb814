"""The embedded service as users run it: `remat serve` (uvicorn) on a free port, real solver processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from factories import benchmark_graph, chain
from processes import Processes, alive, brief, cancel_when_running, wait_until

from remat.clients.http import Client
from remat.service import JobStatus, SqliteStore
from remat.solvers import STRATEGIES


def test_remat_solve_against_a_server_writes_the_result(processes: Processes, tmp_path):
    server = processes.server()
    graph_file = tmp_path / "chain.json"
    graph_file.write_text(json.dumps(chain(12).to_json()))
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "remat.clients.cli", "solve", str(graph_file), "--budget-ratio", "0.6",
           "--strategy", "chen-greedy", "--server", server.url, "--output", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["strategy"] == "chen-greedy" and result["status"] == "feasible"
    assert result["peak_memory"] <= result["budget"] and "chen-greedy" in done.stdout


def test_a_restart_loses_no_job_queued_or_running(processes: Processes):
    """kill -9 the API while one job runs and others wait; after a restart every job completes."""
    server = processes.server("--slots", "1")
    with Client(server.url) as client:
        jobs = [client.submit(chain(n), budget_ratio=0.3, strategy="chen-greedy", time_limit_s=120)
                for n in (700, 20, 21, 22, 23)]
    store = SqliteStore(processes.tmp_path / "data" / "jobs.sqlite3")
    running = wait_until(lambda: store.get(jobs[0]["id"], with_result=False).solver_pid and
                         store.get(jobs[0]["id"], with_result=False))
    assert running.status is JobStatus.RUNNING and all(
        store.get(j["id"]).status is JobStatus.QUEUED for j in jobs[1:])
    server.kill()
    wait_until(lambda: not alive(running.solver_pid), timeout_s=10)  # no orphan solver survives its API

    restarted = processes.server("--slots", "1")
    with Client(restarted.url) as client:
        final = [client.wait(j["id"], timeout_s=120) for j in jobs]
    assert [j["status"] for j in final] == ["succeeded"] * len(jobs)
    assert final[0]["attempts"] == 2 and final[0]["history"] == [
        f"attempt 1: the process running it ({running.owner}) exited; queued again"]
    assert final[0]["result"]["status"] == "feasible" and not final[0]["error"]
    assert all(j["attempts"] == 1 for j in final[1:]), brief(final)


def test_a_graceful_stop_puts_the_running_job_back_without_counting_the_attempt(processes: Processes):
    server = processes.server("--slots", "1")
    with Client(server.url) as client:  # a checkmate search runs to its limit: still running when the server stops
        job = client.submit(chain(700), budget_ratio=0.3, strategy="checkmate", time_limit_s=10, convergence=None)
    store = SqliteStore(processes.tmp_path / "data" / "jobs.sqlite3")
    pid = wait_until(lambda: store.get(job["id"], with_result=False).solver_pid)
    server.stop()
    assert not alive(pid)
    assert store.get(job["id"]).status is JobStatus.QUEUED
    with Client(processes.server().url) as client:
        final = client.wait(job["id"], timeout_s=120)
    assert final["status"] == "succeeded" and final["attempts"] == 1, brief(final)
    assert "shut down" in final["history"][0]


def _milp_running(job: dict) -> bool:
    """The MILP engine runs: its progress carries a proved lower bound (the baselines' progress has none)."""
    return (job["progress"] or {}).get("lower_bound") is not None


def test_cancel_kills_a_hung_solver_after_the_grace_period(processes: Processes):
    """A solver stuck where it cannot see the stop request (here: stopped with SIGSTOP) is killed, group and all."""
    server = processes.server()
    store = SqliteStore(processes.tmp_path / "data" / "jobs.sqlite3")
    with Client(server.url) as client:
        job = client.submit(chain(900), budget_ratio=0.5, strategy="griewank", time_limit_s=300)
        pid = wait_until(lambda: store.get(job["id"], with_result=False).solver_pid)
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        client.cancel(job["id"])
        final = client.wait(job["id"], timeout_s=20, poll_s=0.1)
        elapsed = time.monotonic() - started
    assert final["status"] == "cancelled" and final["result"] is None, brief(final)
    assert "did not return a plan within 3 s and was killed" in final["error"]
    assert 3 <= elapsed < 10 and not alive(pid)


@pytest.mark.skipif("checkmate" not in STRATEGIES, reason="needs the checkmate strategy")
def test_cancel_stops_a_checkmate_solve_which_returns_its_best_plan(processes: Processes):
    server = processes.server()
    store = SqliteStore(processes.tmp_path / "data" / "jobs.sqlite3")
    with Client(server.url) as client:
        final, pid = cancel_when_running(client, store, benchmark_graph("mobilenet"), "checkmate", ready=_milp_running)
    assert final["status"] == "cancelled" and not alive(pid)
    result = final["result"]
    assert result["status"] == "cancelled" and result["plan"] and result["peak_memory"] <= result["budget"]


def test_bounded_load_of_new_and_cached_requests(processes: Processes):
    """200 requests from 20 concurrent clients: 40 distinct solves, each asked 5 times."""
    server = processes.server()
    bodies = [{"graph": chain(n).to_json(), "budget_ratio": 0.5, "strategy": "checkpoint-last", "wait_s": 30}
              for n in range(5, 45)] * 5

    def post(body: dict) -> httpx.Response:
        return httpx.post(f"{server.url}/v1/solve", json=body, timeout=60)

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(post, bodies))
    assert sorted({r.status_code for r in answers}) == [200]
    by_graph: dict[str, set[str]] = {}
    for r in answers:
        by_graph.setdefault(r.json()["graph_name"], set()).add(r.headers["content-location"])
    assert len(by_graph) == 40 and all(len(jobs) == 1 for jobs in by_graph.values())
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'remat_jobs{status="succeeded"} 40.0' in metrics and "remat_cache_hits_total 160.0" in metrics


@pytest.mark.parametrize("args, message", [
    (["serve", "--host", "0.0.0.0"], "Refusing to listen on 0.0.0.0 without authentication"),
    (["worker"], "A worker needs a queue"),
    (["serve", "--data-dir", "/proc/no-such-dir"], "No such file or directory"),
    (["serve", "--port", "70000"], "Setting 'port' (REMAT_PORT)"),
])
def test_commands_that_cannot_start_say_why_in_one_line(args: list[str], message: str):
    done = subprocess.run([sys.executable, "-m", "remat.clients.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "REMAT_QUEUE_URL": "", "REMAT_TOKENS": ""})
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert "hunter2" not in done.stderr + done.stdout
