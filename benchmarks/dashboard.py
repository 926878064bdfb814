"""Dashboard load times in headless Chromium, and the screenshots in docs/.

Starts `remat serve` on a free port, sweeps fcn8 and resnet50 over every registered strategy that
applies, then opens the pages in Debian's Chromium (with the code the browser tests use,
tests/browser.py) and prints, as Markdown, the time from navigation start to the page's data-ready
mark: cold (a new browser context: empty cache, Plotly compiled afresh) and warm (the page loaded
again in that context), with the main thread's CPU time of the cold load (Chrome's TaskDuration in
thread ticks, which the machine's other load does not inflate). Screenshots of the fcn8 sweep and one
of its jobs go to docs/.

    python benchmarks/dashboard.py [--runs 5] [--time-limit 20] [--data-dir DIR] [--screenshots docs]

The sweeps take several minutes (the checkmate MILP runs at every point). With ``--data-dir``, the store
is kept, and a later run reuses the finished sweeps of each graph found there instead of solving again.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser import Watched, chromium  # noqa: E402
from processes import Processes  # noqa: E402

from remat.clients.http import Client  # noqa: E402
from remat.schedules import Graph  # noqa: E402


def sweep(client: Client, url: str, name: str, time_limit_s: float | None) -> dict:
    """The newest finished sweep of graph ``name`` in the store, else a new one, once it has ended."""
    listed = httpx.get(f"{url}/v1/sweeps", params={"limit": 200}).json()["sweeps"]
    done = [s for s in listed if s["graph_name"] == name and s["status"] != "running" and s["status"] != "queued"]
    started = time.monotonic()
    if done:
        doc = client.get_sweep(done[0]["id"])
    else:
        graph = Graph.from_path(str(ROOT / "benchmarks" / "graphs" / f"{name}.json"))
        doc = client.wait_sweep(client.sweep(graph, time_limit_s=time_limit_s)["id"], poll_s=1.0)
    strategies = list(dict.fromkeys(j["strategy"] for j in doc["jobs"]))
    unsolved = [f"{j['strategy']} at {j['budget']} B {j['status']}" for j in doc["jobs"] if j["status"] != "succeeded"]
    print(f"{name}: {len(doc['jobs'])} points, {doc['status']} in {time.monotonic() - started:.0f} s"
          f"{' (reused)' if done else ''}; strategies: {', '.join(strategies)}; "
          f"not succeeded: {', '.join(unsolved) or 'none'}", file=sys.stderr)
    return doc


def showcase_job(doc: dict) -> dict:
    """The checkmate job nearest 75% of the budget range (else checkpoint-last's): a plan worth looking at."""
    budgets = sorted({j["budget"] for j in doc["jobs"]})
    target = budgets[0] + 0.75 * (budgets[-1] - budgets[0])
    for strategy in ("checkmate", "checkpoint-last"):
        jobs = [j for j in doc["jobs"] if j["strategy"] == strategy and j["status"] == "succeeded"]
        if jobs:
            return min(jobs, key=lambda j: abs(j["budget"] - target))
    return doc["jobs"][0]


def plan_steps(doc: dict, job: dict) -> int:
    return next((len(r["plan"] or []) for r in doc["results"]
                 if (r["strategy"], r["budget"]) == (job["strategy"], job["budget"])), 0)


def timings(browser, url: str, runs: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    cold, cpu, warm, ttfb = [], [], [], []
    for _ in range(runs):
        page = Watched(browser)
        try:
            cdp = page.context.new_cdp_session(page.page)
            cdp.send("Performance.enable", {"timeDomain": "threadTicks"})
            cold.append(page.open(url))
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            cpu.append(metrics["TaskDuration"] * 1000)
            ttfb.append(page.page.evaluate("performance.getEntriesByType('navigation')[0].responseStart"))
            warm.append(page.open(url))
            if page.errors:
                raise RuntimeError(f"{url}: {page.errors}")
        finally:
            page.close()
    return {"cold": statistics.median(cold), "cold_max": max(cold), "cpu": statistics.median(cpu),
            "warm": statistics.median(warm), "warm_max": max(warm), "ttfb": statistics.median(ttfb)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=20.0,
                        help="seconds per point of the resnet50 sweep (only its pages' load time matters; fcn8's "
                             "points get the server's default, 60 s)")
    parser.add_argument("--data-dir", type=Path, help="keep the job store here and reuse its finished sweeps")
    parser.add_argument("--screenshots", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data_dir or Path(tmp) / "data"
        procs = Processes(Path(tmp), {"REMAT_DATA_DIR": str(data), "REMAT_LOG_LEVEL": "warning"})
        try:
            server = procs.server()
            with Client(server.url) as client:
                sweeps = {"fcn8": sweep(client, server.url, "fcn8", None),
                          "resnet50": sweep(client, server.url, "resnet50", args.time_limit)}
            with chromium() as browser:
                shot = Watched(browser)
                shot.open(f"{server.url}/dashboard/sweeps/{sweeps['fcn8']['id']}")
                shot.screenshot("dashboard-sweep-fcn8.png", args.screenshots)
                job = showcase_job(sweeps["fcn8"])
                shot.open(f"{server.url}/dashboard/jobs/{job['id']}")
                shot.screenshot("dashboard-job-fcn8.png", args.screenshots)
                print(f"screenshots: {args.screenshots}/dashboard-sweep-fcn8.png, dashboard-job-fcn8.png "
                      f"({job['strategy']} at {job['budget']} B)", file=sys.stderr)
                shot.close()
                resnet = sweeps["resnet50"]
                longest = max(resnet["jobs"], key=lambda j: plan_steps(resnet, j))
                pages = [("sweep", f"{len(resnet['jobs'])} points", f"/dashboard/sweeps/{resnet['id']}")]
                pages += [("job", f"{j['strategy']}, {plan_steps(resnet, j)} plan steps", f"/dashboard/jobs/{j['id']}")
                          for j in (showcase_job(resnet), longest)]
                rows = [(kind, what, timings(browser, server.url + path, args.runs)) for kind, what, path in pages]
        finally:
            procs.stop_all()
    print(f"Dashboard pages of resnet50, navigation start to data-ready in ms ({args.runs} runs each). "
          f"{platform.node()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC.\n")
    print("| page | content | cold median | cold max | cold main-thread CPU | warm median | warm max | server (TTFB) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for kind, what, t in rows:
        print(f"| {kind} | {what} | {t['cold']:.0f} | {t['cold_max']:.0f} | {t['cpu']:.0f} | {t['warm']:.0f} "
              f"| {t['warm_max']:.0f} | {t['ttfb']:.0f} |")


if __name__ == "__main__":
    main()
