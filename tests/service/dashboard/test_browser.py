"""The dashboard in real headless Chromium against a real `remat serve`: it renders, draws one trace per
strategy, updates live, signs in, and logs no console error. Screenshots go to tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser import Watched
from factories import benchmark_graph, chain, offloading_plan, store_offload_job
from playwright.sync_api import Browser
from processes import Processes, Server, wait_until

from remat.clients.http import Client
from remat.schedules import Transfer, simulate
from remat.solvers import STRATEGIES, StrategyKind, plan_sweep, sweep_budgets

pytestmark = pytest.mark.browser

TOKEN = "browser-test-token-0123456789"


def heuristics_for(graph_name: str) -> list[str]:
    """The baselines that apply to a paper graph (quick enough for a test)."""
    graph = benchmark_graph(graph_name)
    applicable = plan_sweep(graph, budgets=[graph.checkpoint_all_peak]).strategies
    return [name for name in applicable if STRATEGIES[name].kind is StrategyKind.BASELINE]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("dashboard")
    procs = Processes(tmp, {"REMAT_DATA_DIR": str(tmp / "data"), "REMAT_LOG_LEVEL": "warning"})
    try:
        yield procs.server()
    finally:
        procs.stop_all()


@pytest.fixture(scope="module")
def fcn8_sweep(server: Server) -> dict:
    graph = benchmark_graph("fcn8")
    with Client(server.url) as client:
        started = client.sweep(graph, strategies=heuristics_for("fcn8"), budgets=sweep_budgets(graph, 6))
        return client.wait_sweep(started["id"], poll_s=0.3)


def test_the_sweep_page_draws_one_trace_per_strategy(server: Server, fcn8_sweep: dict, watched: Watched):
    strategies = heuristics_for("fcn8")
    watched.open(f"{server.url}/dashboard/sweeps/{fcn8_sweep['id']}")
    page = watched.page
    assert page.evaluate("document.getElementById('plot-curves').data.map(t => t.name)") == strategies
    assert page.locator("#plot-curves .legend .traces").count() == len(strategies)
    assert page.locator("#plot-curves g.trace.scatter").count() == len(strategies)
    assert page.locator("table.grid td.cell").count() == len(fcn8_sweep["jobs"])
    assert page.locator("table.grid td.best").count() >= 1
    watched.screenshot("dashboard-sweep-fcn8.png")
    page.locator("#plot-curves .legend .traces").first.click()
    wait_until(lambda: page.evaluate("document.getElementById('plot-curves')._fullData[0].visible") == "legendonly",
               timeout_s=5)
    assert watched.errors == []


def test_the_job_page_draws_heat_maps_memory_and_recomputations(server: Server, fcn8_sweep: dict,
                                                                watched: Watched):
    job = next(j for j in fcn8_sweep["jobs"] if j["strategy"] == "checkpoint-last")
    watched.open(f"{server.url}/dashboard/jobs/{job['id']}")
    page = watched.page
    assert page.evaluate("document.getElementById('plot-R').data[0].type") == "heatmap"
    assert page.evaluate("document.getElementById('plot-S').data[0].z.length") == 73
    assert page.locator("#plot-R .heatmaplayer image, #plot-R .hm image").count() >= 1
    names = page.evaluate("document.getElementById('plot-memory').data.map(t => t.name)")
    assert names[0] == "resident memory" and names[1].startswith("budget")
    assert page.evaluate("Math.max(...document.getElementById('plot-recompute').data[0].y)") > 0
    assert "arena size" in page.inner_text("section.facts")
    watched.screenshot("dashboard-job-fcn8-checkpoint-last.png")
    assert watched.errors == []


def test_the_front_page_links_sweeps_and_jobs(server: Server, fcn8_sweep: dict, watched: Watched):
    watched.page.goto(f"{server.url}/dashboard")
    watched.page.click(f"a[href='/dashboard/sweeps/{fcn8_sweep['id']}'] >> nth=0")
    watched.wait_ready()
    assert watched.page.url.endswith(f"/dashboard/sweeps/{fcn8_sweep['id']}")
    assert watched.errors == []


def test_a_running_sweep_updates_live(server: Server, watched: Watched):
    graph = benchmark_graph("resnet50")
    with Client(server.url) as client:
        started = client.sweep(graph, strategies=["checkpoint-last", "linearized-greedy"],
                               budgets=sweep_budgets(graph, 8))
    watched.open(f"{server.url}/dashboard/sweeps/{started['id']}")
    page = watched.page
    assert page.locator("#sweep-progress .live").count() == 1, "the sweep was still running when the page opened"
    page.wait_for_selector("#sweep-progress .badge.succeeded", timeout=180_000)
    assert page.locator("#sweep-progress .live").count() == 0
    assert page.evaluate("document.getElementById('plot-curves').data.every(t => t.x.length > 0)")
    assert page.locator("table.grid td.running, table.grid td.queued").count() == 0
    assert watched.errors == []


def test_signing_in_from_the_browser(processes: Processes, browser: Browser):
    server = processes.server(REMAT_TOKENS=TOKEN)
    w = Watched(browser)
    try:
        response = w.page.goto(f"{server.url}/dashboard")
        assert response is not None and response.status == 401
        w.page.fill("input[name=token]", TOKEN)
        w.page.click("button[type=submit]")
        w.page.wait_for_selector("h1:has-text('Dashboard')")
        assert w.page.url == f"{server.url}/dashboard"
        assert [e for e in w.errors if "401" not in e] == []
        cookie = next(c for c in w.context.cookies() if c["name"] == "remat_token")
        assert cookie["httpOnly"] and cookie["path"] == "/dashboard" and cookie["sameSite"] == "Strict"
    finally:
        w.close()


def test_the_job_page_of_a_plan_with_transfers_draws_three_lanes_and_memory_over_time(
        processes: Processes, watched: Watched):
    graph = chain(40, memory=2**20)
    transfer = Transfer(bandwidth=2**19, latency=0.1)
    job_id = store_offload_job(processes.tmp_path / "data", graph, transfer)
    server = processes.server()
    watched.open(f"{server.url}/dashboard/jobs/{job_id}")
    page = watched.page
    lanes = page.evaluate("document.getElementById('plot-streams').data.map(t => [t.y[0], t.x.length])")
    sim = simulate(graph, offloading_plan(graph), transfer=transfer)
    assert lanes == [[op, len(sim.timing.stream(op))] for op in ("compute", "offload", "reload")]
    assert page.locator("#plot-streams g.trace.bars").count() == 3
    assert page.locator("#plot-streams .point").count() == sum(n for _, n in lanes), "every bar is drawn"
    names = page.evaluate("document.getElementById('plot-memory').data.map(t => t.name)")
    assert names[0] == "device memory" and names[1].startswith("budget")
    assert page.locator("#plot-R").count() == 0, "no schedule, no heat maps"
    facts = page.inner_text("section.facts")
    assert "host peak memory" in facts and "39 offloads, 39 reloads" in facts and "arena size" in facts
    watched.screenshot("dashboard-job-offload-chain40.png")
    assert watched.errors == []
