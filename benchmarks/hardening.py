"""The service under attack and at scale: the figures of the hardening issue, measured side by side.

Prints Markdown (headed by machine and date) for benchmarks/README.md:

1. the API's memory under ten concurrent 32 MiB bodies, without a token and (for comparison) with one;
2. Prometheus series after 10,000 requests with invented HTTP methods;
3. result size and job-page memory at 10,001 and 19,999 nodes: compact against full schedules, and the
   page's heat maps and layout now against the dense matrices and largest-first layout of before;
4. /healthz latency of a real `remat serve` while ten sweeps of a 4,001-node chain are submitted and
   planned, against idle, and what planning one such sweep in the API's threads used to cost;
5. the job store's size after a simulated day of jobs (one every 10 s), retention on and off, both stores.

    python benchmarks/hardening.py                      # everything, about ten minutes
    python benchmarks/hardening.py --only store healthz # some sections

Section 5's Redis rows need the Redis server on 127.0.0.1:6379 (database 13, keys under a fresh namespace).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from clock import Clock  # noqa: E402
from factories import chain  # noqa: E402
from processes import REDIS_URL, Processes, Server, at_once, invented_methods, memory_mb  # noqa: E402

from remat.clients.http import Client  # noqa: E402
from remat.report import job_figures  # noqa: E402
from remat.schedules import Graph, Plan, Schedule, layout_plan, simulate  # noqa: E402
from remat.service import Claim, JobStatus, JobStore, RedisStore, SolveSpec, SqliteStore  # noqa: E402
from remat.service._store import Retention  # noqa: E402
from remat.solvers import plan_sweep, solve  # noqa: E402

TOKEN = "bench-" + "t" * 26
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextmanager
def served(**env: str) -> Iterator[Server]:
    with tempfile.TemporaryDirectory() as tmp:
        procs = Processes(Path(tmp), {"REMAT_DATA_DIR": f"{tmp}/data", "REMAT_LOG_LEVEL": "warning",
                                      "REMAT_TOKENS": TOKEN, **env})
        try:
            yield procs.server()
        finally:
            procs.stop_all()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- 1. bodies ------------------------------------------------------------------------------------


def _big_body(size: int) -> bytes:
    """A JSON solve request of ``size`` bytes: a graph of far more nodes than the server allows."""
    head, tail = b'{"budget": 1, "graph": {"format": "remat.graph/v1", "nodes": [', b"]}}"
    node = b'{"id": "n%07d", "deps": [], "cost": 1, "memory": 1},'
    count = (size - len(head) - len(tail)) // len(node % 0)
    body = head + b"".join(node % i for i in range(count))[:-1] + tail
    return body + b" " * (size - len(body))


def _post_all(url: str, body: bytes, headers: dict[str, str], concurrent: int) -> list[int]:
    """POST ``body`` from ``concurrent`` clients at once; their status codes (0: the connection failed)."""
    def post() -> int:
        try:
            return httpx.post(url, content=body, timeout=300,
                              headers={"Content-Type": "application/json", **headers}).status_code
        except httpx.TransportError:
            return 0

    return at_once([post] * concurrent)


def bodies(concurrent: int = 10) -> list[dict[str, Any]]:
    """Ten bodies at once: 32 MiB without a token; at the 16 MiB cap with one, under the in-flight budget
    (32 MiB) and, for comparison, with a budget that holds all ten."""
    cases = [("32 MiB, no token", 32, {}, {}),
             ("16 MiB, a valid token", 16, AUTH, {}),
             ("16 MiB, a valid token, no in-flight budget", 16, AUTH,
              {"REMAT_MAX_BODY_BYTES_IN_FLIGHT": str(concurrent * 16 * 2**20)})]
    rows = []
    for label, mib, headers, env in cases:
        body = _big_body(mib * 2**20 - 4096)
        with served(**env) as server:
            before = memory_mb(server.pid, "VmRSS")
            started = time.perf_counter()
            statuses = _post_all(f"{server.url}/v1/solve", body, headers, concurrent)
            rows.append({"label": label, "before": before, "peak": memory_mb(server.pid, "VmHWM"),
                         "statuses": statuses, "s": time.perf_counter() - started})
    return rows


# -- 2. methods -----------------------------------------------------------------------------------


def methods(requests: int = 10_000) -> dict[str, Any]:
    with served() as server:
        started = time.perf_counter()
        invented_methods(server.port, requests)
        seconds = time.perf_counter() - started
        text = httpx.get(f"{server.url}/metrics", headers=AUTH).text
    series = [line for line in text.splitlines() if line.startswith("remat_http_requests_total{")]
    return {"requests": requests, "series": len(series), "s": seconds,
            "rows": [line for line in series if 'method="other"' in line]}


# -- 3. large results -----------------------------------------------------------------------------


def _old_downsample(matrix: np.ndarray, max_side: int = 400) -> np.ndarray:
    """The job page's heat map before: the boolean matrix padded into int64, then summed by blocks."""
    rows, cols = matrix.shape
    rs, cs = max(1, math.ceil(rows / max_side)), max(1, math.ceil(cols / max_side))
    nr, nc = math.ceil(rows / rs), math.ceil(cols / cs)
    padded = np.zeros((nr * rs, nc * cs), dtype=np.int64)
    padded[:rows, :cols] = matrix
    return padded.reshape(nr, rs, nc, cs).sum(axis=(1, 3))


def _traced(call: Callable[[], Any]) -> tuple[float, float]:
    """(peak MB allocated by Python and NumPy during ``call``, seconds of a second call without tracing, which
    slows allocation-heavy code many times)."""
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    started = time.perf_counter()
    call()
    return peak, time.perf_counter() - started


def large_results(halves: tuple[int, ...] = (5000, 9999)) -> list[dict[str, Any]]:
    rows = []
    for half in halves:
        graph = chain(half)
        result = solve(graph, budget_ratio=1.0, strategy="checkpoint-all")
        compact = json.dumps(result.to_json())
        full_bytes = len(json.dumps(result.to_json(full_schedule=True)))
        doc = json.loads(compact)
        page_mb, page_s = _traced(lambda doc=doc, graph=graph: job_figures(graph, doc))
        full_doc = json.loads(json.dumps(result.to_json(full_schedule=True)))

        def old_heat_maps(graph: Graph = graph, full_doc: dict[str, Any] = full_doc) -> None:
            schedule = Schedule.from_json(graph, full_doc["schedule"])
            _old_downsample(schedule.R), _old_downsample(schedule.S)

        old_mb, old_s = _traced(old_heat_maps)
        plan = Plan.from_json(graph, doc["plan"])
        started = time.perf_counter()
        layout_plan(graph, plan)
        old_layout_s = time.perf_counter() - started
        rows.append({"nodes": graph.size, "plan_steps": len(plan), "compact": len(compact), "full": full_bytes,
                     "page_mb": page_mb, "page_s": page_s, "old_mb": old_mb, "old_s": old_s,
                     "old_layout_s": old_layout_s, "peak": simulate(graph, plan).peak_memory})
    return rows


# -- 4. healthz while sweeps are planned ----------------------------------------------------------


def _healthz_latencies(url: str, seconds: float) -> list[float]:
    latencies = []
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=60) as http:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            assert http.get(f"{url}/healthz").status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(0.05)
    return latencies


def healthz(sweeps: int = 10, half: int = 2000, watch_s: float = 60.0) -> dict[str, Any]:
    graphs = [chain(half, cost=1.0 + k / 100) for k in range(sweeps)]  # ten distinct 4,001-node chains
    started = time.perf_counter()
    plan_sweep(graphs[0], time_limit_s=10)
    in_process_s = time.perf_counter() - started  # what one POST used to spend in an API thread
    with served(REMAT_MAX_QUEUED_JOBS="10000", REMAT_MAX_ACTIVE_JOBS_PER_TOKEN="10000",
                REMAT_MAX_SWEEP_POINTS="1000") as server:
        idle = _healthz_latencies(server.url, 10)
        posts: list[float] = []

        def submit() -> None:
            with Client(server.url, token=TOKEN, timeout_s=300) as client:
                for graph in graphs:
                    t = time.perf_counter()
                    client.sweep(graph, time_limit_s=10)
                    posts.append(time.perf_counter() - t)

        submitter = threading.Thread(target=submit)
        submitter.start()
        busy = _healthz_latencies(server.url, watch_s)
        submitter.join()
        listed = httpx.get(f"{server.url}/v1/sweeps", headers=AUTH, timeout=60).json()["sweeps"]
        points = sum(sum(s["counts"].values()) for s in listed)
        running = sum(s["counts"]["running"] + s["counts"]["succeeded"] for s in listed)
    return {"idle": idle, "busy": busy, "posts": posts, "in_process_s": in_process_s, "points": points,
            "started": running, "nodes": graphs[0].size}


# -- 5. the store after a day ---------------------------------------------------------------------


def _store_bytes(store: JobStore) -> int:
    if isinstance(store, SqliteStore):
        return sum(p.stat().st_size for p in store.path.parent.glob(store.path.name + "*"))
    assert isinstance(store, RedisStore)
    client = store.redis
    return sum(int(client.memory_usage(k) or 0) for k in client.scan_iter(match=f"{store.prefix}*", count=1000))


def a_day(kind: str, retention: Retention | None, every_s: float = 10.0, hours: float = 24.0) -> dict[str, Any]:
    """One job every ``every_s`` simulated seconds (a new 100-node graph every tenth), each solved and stored
    with its result; the maintenance's expire pass every simulated minute when ``retention`` is given."""
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        namespace = f"remat-bench-{uuid.uuid4().hex[:10]}:"
        store: JobStore = (SqliteStore(Path(tmp) / "jobs.sqlite3", clock=clock) if kind == "sqlite" else
                           RedisStore(redis.Redis.from_url(REDIS_URL, decode_responses=True), prefix=namespace,
                                      clock=clock))
        try:
            sizes = {}
            graph = chain(50)
            result = solve(graph, budget_ratio=1.0, strategy="checkpoint-all").to_json()
            last_expire = clock()
            for k in range(int(hours * 3600 / every_s)):
                if k % 10 == 0:
                    graph = chain(50, cost=1.0 + k)
                    store.put_graph(graph.sha256, graph.to_json())
                job, _ = store.submit(SolveSpec(graph.sha256, graph.checkpoint_all_peak + k, "checkpoint-all"),
                                      graph_name=graph.name, token="t")
                store.mark_running(job.id, "bench:1:0:a")
                store.mark_finished(Claim(job.id, "bench:1:0:a", 1), {**result, "budget": job.spec.budget})
                clock.advance(every_s)
                if retention is not None and clock() - last_expire >= 60:
                    store.expire(retention)
                    last_expire = clock()
                hour = (k + 1) * every_s / 3600
                if hour in (6, 12, 24):
                    sizes[int(hour)] = _store_bytes(store)
            return {"kind": kind, "retention": retention, "sizes": sizes, "jobs": store.count(JobStatus.SUCCEEDED)}
        finally:
            if isinstance(store, RedisStore):
                for key in store.redis.scan_iter(match=f"{namespace}*", count=1000):
                    store.redis.delete(key)
            store.close()


# -- printing -------------------------------------------------------------------------------------


def _print_bodies(rows: list[dict[str, Any]]) -> None:
    print("### Ten concurrent request bodies (`POST /v1/solve`, a graph of too many nodes)\n")
    print("| ten bodies of | answers | API memory before (MB) | API peak memory (MB) | growth (MB) | wall (s) |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        answers = ", ".join(f"{r['statuses'].count(s)} x {s}" for s in sorted(set(r["statuses"])))
        print(f"| {r['label']} | {answers} | {r['before']:.0f} | {r['peak']:.0f} | {r['peak'] - r['before']:.0f} | "
              f"{r['s']:.1f} |")
    growth = [max(r["peak"] - r["before"], 1.0) for r in rows]
    print(f"\nWithout a token nothing is read (401 from the headers). With one, the 32 MiB budget lets two bodies be "
          f"parsed at a time (the others wait, up to 10 s, then 503): {growth[2] / growth[1]:.1f}x less growth than "
          f"with all ten parsed at once.\n")


def _print_methods(r: dict[str, Any]) -> None:
    print(f"### {r['requests']:,} requests with invented HTTP methods (no token)\n")
    print(f"`remat_http_requests_total` series afterwards: **{r['series']}** ({r['s']:.1f} s for the flood); "
          f"the invented methods all count as one:\n")
    for line in r["rows"]:
        print(f"    {line}")
    print()


def _print_large(rows: list[dict[str, Any]]) -> None:
    print("### Large results and their job page (checkpoint-all on a training chain)\n")
    print("| nodes | plan steps | result, compact schedule (MB) | result, full schedule (MB) | ratio | "
          "page data now: peak MB / s | heat maps as before: peak MB / s | largest-first layout as before (s) |")
    print("|---:|---:|---:|---:|---:|---|---|---:|")
    for r in rows:
        print(f"| {r['nodes']:,} | {r['plan_steps']:,} | {r['compact'] / 2**20:.2f} | {r['full'] / 2**20:.1f} | "
              f"{r['full'] / r['compact']:.0f}x | {r['page_mb']:.0f} / {r['page_s']:.1f} | "
              f"{r['old_mb']:.0f} / {r['old_s']:.1f} | {r['old_layout_s']:.1f} |")
    print("\n(Page data: `job_figures`: the heat maps from the compact schedule's runs, the memory line, the "
          "recomputations and a plan-order layout; peak traced with tracemalloc, time from a run without it. Before: "
          "the full schedule into dense R and S, each padded into int64 and summed by blocks; and the page laid the "
          "plan out largest first.)\n")


def _print_healthz(r: dict[str, Any]) -> None:
    idle, busy = r["idle"], r["busy"]
    print(f"### /healthz while ten sweeps of a {r['nodes']:,}-node chain are submitted and planned\n")
    print("| | requests | p50 (ms) | p99 (ms) | max (ms) |")
    print("|---|---:|---:|---:|---:|")
    for label, values in (("idle", idle), ("during the sweeps (60 s)", busy)):
        print(f"| {label} | {len(values)} | {1000 * statistics.median(values):.1f} | "
              f"{1000 * _percentile(values, 0.99):.1f} | {1000 * max(values):.1f} |")
    print(f"\n`POST /v1/sweeps`: median {statistics.median(r['posts']):.2f} s, max {max(r['posts']):.2f} s for each "
          f"of the ten ({r['points']} jobs submitted, {r['started']} started or done within the minute). Planning "
          f"one such sweep in-process (`plan_sweep`, what the API's thread did before) takes "
          f"{r['in_process_s']:.1f} s here.\n")


def _print_store(rows: list[dict[str, Any]]) -> None:
    print("### The job store after a simulated day (one job every 10 s: 8,640 jobs, a new graph every tenth)\n")
    print("| store | retention | jobs kept | size at 6 h (MB) | at 12 h (MB) | at 24 h (MB) |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        kept = ("off" if r["retention"] is None else
                f"{r['retention'].max_age_s / 3600:g} h or {r['retention'].max_jobs:,} jobs")
        sizes = " | ".join(f"{r['sizes'][h] / 2**20:.1f}" for h in (6, 12, 24))
        print(f"| {r['kind']} | {kept} | {r['jobs']:,} | {sizes} |")
    print()


SECTIONS = ("bodies", "methods", "large", "healthz", "store")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args()
    print(f"Machine: {platform.node()}, {os.cpu_count()} CPUs (nproc), Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}; load average {os.getloadavg()[0]:.1f} at the start; "
          f"date {time.strftime('%Y-%m-%d %H:%M %Z')}.\n")
    if "bodies" in args.only:
        _print_bodies(bodies())
    if "methods" in args.only:
        _print_methods(methods())
    if "large" in args.only:
        _print_large(large_results())
    if "healthz" in args.only:
        _print_healthz(healthz())
    if "store" in args.only:
        retention = Retention(max_age_s=4 * 3600, max_jobs=100_000, max_sweeps=10_000)
        _print_store([a_day(kind, r) for kind in ("sqlite", "redis") for r in (None, retention)])


if __name__ == "__main__":
    main()
