"""The service under load and under faults, with real `remat serve` / `remat worker` processes.

Prints Markdown tables (headed by machine and date) for benchmarks/README.md:

1. latency of a cached result (sequential p50/p99, and requests/s from 20 concurrent clients);
2. small solves per second, embedded executor (one slot per core) against two RQ workers;
3. time from ``POST /v1/jobs/{id}/cancel`` to the solver process being gone;
4. the fault drills (kill -9 of the API or of a worker mid-solve) and how many jobs were lost.

    python benchmarks/service.py            # everything, a few minutes
    python benchmarks/service.py --quick    # fewer requests and jobs

Cluster rows need the Redis server on 127.0.0.1:6379 (database 13, keys under a fresh namespace).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from factories import benchmark_graph, chain  # noqa: E402
from processes import REDIS_URL, Processes, alive, wait_until  # noqa: E402

from remat.clients.http import TERMINAL, Client  # noqa: E402
from remat.service import Job, JobStore, RedisStore, SqliteStore  # noqa: E402
from remat.solvers import STRATEGIES, ResultDocument  # noqa: E402


class Setup:
    """One deployment under test: embedded, or an API with two workers on Redis."""

    def __init__(self, procs: Processes, namespace: str, *, cluster: bool) -> None:
        self.procs, self.namespace, self.cluster = procs, namespace, cluster
        self.args = ("--queue", REDIS_URL) if cluster else ()
        self.workers = [procs.worker(), procs.worker()] if cluster else []
        self.server = procs.server(*self.args)
        self.store: JobStore = (RedisStore.from_url(REDIS_URL, prefix=f"{namespace}:") if cluster else
                                SqliteStore(procs.tmp_path / "data" / "jobs.sqlite3"))

    @property
    def name(self) -> str:
        return "cluster, 2 workers" if self.cluster else f"embedded, {min(4, os.cpu_count() or 1)} slots"

    def restart_server(self) -> None:
        self.server.kill()
        self.server = self.procs.server(*self.args)


@contextmanager
def deployment(*, cluster: bool) -> Iterator[Setup]:
    namespace = f"remat-bench-{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as tmp:
        env = {"REMAT_DATA_DIR": f"{tmp}/data", "REMAT_LOG_LEVEL": "warning", "REMAT_REDIS_PREFIX": f"{namespace}:",
               "REMAT_QUEUE_NAME": namespace, "REMAT_LEASE_S": "5"}
        procs = Processes(Path(tmp), env)
        try:
            yield Setup(procs, namespace, cluster=cluster)
        finally:
            procs.stop_all()
            if cluster:
                _forget(namespace)


def _forget(namespace: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"*{namespace}*", count=1000):
        client.delete(key)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cached_latency(setup: Setup, requests: int) -> dict[str, Any]:
    """Identical solve requests (each validated in full, then answered from the store) and job lookups."""
    body = {"graph": benchmark_graph("fcn8").to_json(), "budget_ratio": 0.9, "strategy": "linearized-greedy"}
    url = f"{setup.server.url}/v1/solve"
    with httpx.Client(timeout=60) as http:
        first = http.post(url, json=body)
        assert first.status_code == 200
        job_url = f"{setup.server.url}{first.headers['content-location']}"
        cpu = _cpu_s(setup.server.pid)
        solve_s = _timed(lambda: http.post(url, json=body), requests)
        cpu_per_solve = (_cpu_s(setup.server.pid) - cpu) / requests
        get_s = _timed(lambda: http.get(job_url), requests)

    def post(_: int) -> int:
        with httpx.Client(timeout=60) as http:
            return sum(http.post(url, json=body).status_code == 200 for _ in range(requests // 20))

    started = time.perf_counter()
    with ThreadPoolExecutor(20) as pool:
        answered = sum(pool.map(post, range(20)))
    rate = answered / (time.perf_counter() - started)
    return {"p50_ms": 1000 * statistics.median(solve_s), "p99_ms": 1000 * _percentile(solve_s, 0.99),
            "get_p50_ms": 1000 * statistics.median(get_s), "get_p99_ms": 1000 * _percentile(get_s, 0.99),
            "cpu_ms": 1000 * cpu_per_solve,
            "rate": rate, "n": requests}


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used, from /proc: a measure the machine's load does not skew."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(call: Callable[[], httpx.Response], times: int) -> list[float]:
    latencies = []
    for _ in range(times):
        started = time.perf_counter()
        assert call().status_code == 200
        latencies.append(time.perf_counter() - started)
    return latencies


def small_solves(setup: Setup, jobs: int) -> dict[str, Any]:
    graph = benchmark_graph("vgg16")
    bodies = [{"graph": graph.to_json(), "budget": graph.min_feasible_budget + i, "strategy": "checkpoint-last",
               "wait_s": 60} for i in range(jobs)]

    def post(body: dict[str, Any]) -> float:
        r = httpx.post(f"{setup.server.url}/v1/solve", json=body, timeout=120)
        assert r.status_code == 200, r.text
        return float(r.json()["solve_time_s"])

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        solve_times = list(pool.map(post, bodies))
    wall = time.perf_counter() - started
    return {"rate": jobs / wall, "wall_s": wall, "solve_ms": 1000 * statistics.median(solve_times), "n": jobs}


def _milp_running(job: dict[str, Any]) -> bool:
    """The MILP engine runs: its progress carries a proved lower bound (the baselines' progress has none)."""
    return (job["progress"] or {}).get("lower_bound") is not None


def cancel_to_gone(setup: Setup, strategy: str, graph: Any, *, hang: bool) -> dict[str, Any]:
    """Seconds from the cancel request to the solver process being gone (and how the job ended)."""
    with Client(setup.server.url) as client:
        job = client.submit(graph, budget_ratio=0.5, strategy=strategy, time_limit_s=600)
        pid = wait_until(lambda: setup.store.get(job["id"], with_result=False).solver_pid, timeout_s=60)
        if hang:
            os.kill(pid, signal.SIGSTOP)
        else:
            wait_until(lambda: _milp_running(client.job(job["id"])), timeout_s=180, interval_s=0.2)
        started = time.perf_counter()
        client.cancel(job["id"])
        wait_until(lambda: not alive(pid), timeout_s=60, interval_s=0.01)
        gone = time.perf_counter() - started
        final = client.wait(job["id"], timeout_s=30, poll_s=0.1)
    kept = final["result"] is not None and ResultDocument.from_json(final["result"]).plan is not None
    return {"gone_s": gone, "status": final["status"], "plan_kept": kept}


def fault_drill(setup: Setup, crash: Callable[[Setup, Job], str], queued: int, *, drill: int) -> dict[str, Any]:
    """One long job running and ``queued`` small ones waiting; ``crash`` kills something; count the losses.

    ``drill`` makes each drill's jobs new ones (identical requests would be answered from the store).
    """
    with Client(setup.server.url) as client:
        long_job = client.submit(chain(700 + drill), budget_ratio=0.3, strategy="chen-greedy", time_limit_s=300)
        first = 20 + 100 * drill
        jobs = [long_job] + [client.submit(chain(n), budget_ratio=0.5, strategy="checkpoint-last", time_limit_s=60)
                             for n in range(first, first + queued)]
        wait_until(lambda: setup.store.get(long_job["id"], with_result=False).solver_pid, timeout_s=60)
    what = crash(setup, setup.store.get(long_job["id"], with_result=False))
    with Client(setup.server.url) as client:
        final = [client.wait(j["id"], timeout_s=300) for j in jobs]
    return {"what": what, "jobs": len(jobs), "succeeded": sum(j["status"] == "succeeded" for j in final),
            "lost": sum(j["status"] not in TERMINAL for j in final),
            "retried": sum(j["attempts"] > 1 for j in final)}


def kill_api(setup: Setup, running: Job) -> str:
    setup.restart_server()
    return "kill -9 the API mid-solve, restart it"


def kill_worker(setup: Setup, running: Job) -> str:
    pid = int((running.owner or "").split(":")[1])
    next(w for w in setup.workers if w.pid == pid).kill()
    return "kill -9 the worker running the solve"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer requests and jobs")
    args = parser.parse_args()
    requests, jobs = (200, 40) if args.quick else (1000, 200)
    print(f"Machine: {os.cpu_count()} CPUs (nproc), Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}; load average {os.getloadavg()[0]:.1f} at the start; "
          f"date {time.strftime('%Y-%m-%d %H:%M %Z')}.\n")
    results: dict[str, dict[str, Any]] = {}
    for cluster in (False, True):
        with deployment(cluster=cluster) as setup:
            row: dict[str, Any] = {"cached": cached_latency(setup, requests), "solves": small_solves(setup, jobs)}
            row["cancel_hung"] = cancel_to_gone(setup, "griewank", chain(900), hang=True)
            if "checkmate" in STRATEGIES:
                row["cancel_milp"] = cancel_to_gone(setup, "checkmate", benchmark_graph("mobilenet"), hang=False)
            row["faults"] = [fault_drill(setup, kill_api, 9, drill=0)]
            if cluster:
                row["faults"].append(fault_drill(setup, kill_worker, 9, drill=1))
            results[setup.name] = row
    _print(results, requests, jobs)


def _print(results: dict[str, dict[str, Any]], requests: int, jobs: int) -> None:
    print("| deployment | cached POST /v1/solve p50 / p99 (ms) | API CPU per cached POST (ms) | "
          "GET /v1/jobs/{id} p50 / p99 (ms) | "
          f"cached solves/s, 20 clients | small solves/s ({jobs} vgg16 solves, 8 clients) | median solve (ms) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        c, s = r["cached"], r["solves"]
        print(f"| {name} | {c['p50_ms']:.1f} / {c['p99_ms']:.1f} | {c['cpu_ms']:.1f} | "
              f"{c['get_p50_ms']:.1f} / {c['get_p99_ms']:.1f} | {c['rate']:.0f} | {s['rate']:.1f} | "
              f"{s['solve_ms']:.1f} |")
    print(f"\n({requests} sequential requests each for p50/p99: fcn8 linearized-greedy, answered from the store; "
          "a POST validates the whole graph again.)\n")
    print("| deployment | cancel of | cancel to solver gone (s) | job ends | best plan kept |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        for key, label in (("cancel_milp", "checkmate on mobilenet, annealing with a helper process"),
                           ("cancel_hung", "a hung solver (SIGSTOP), killed after the 5 s grace")):
            if key in r:
                c = r[key]
                print(f"| {name} | {label} | {c['gone_s']:.2f} | {c['status']} | {'yes' if c['plan_kept'] else 'no'} |")
    print("\n| deployment | fault | jobs | succeeded | retried | lost |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        for f in r["faults"]:
            print(f"| {name} | {f['what']} | {f['jobs']} | {f['succeeded']} | {f['retried']} | {f['lost']} |")


if __name__ == "__main__":
    main()
