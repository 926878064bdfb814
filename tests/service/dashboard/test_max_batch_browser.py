"""The max-batch page in real headless Chromium against a real `remat serve`: the bars of the paper's Figure 6
update live until the search ends, the table links each plan, and no console error is logged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser import Watched
from factories import chain
from processes import Processes, Server

from remat.clients.http import Client

pytestmark = pytest.mark.browser

STRATEGIES = ["checkpoint-all", "chen-greedy", "checkmate"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("max-batch-page")
    procs = Processes(tmp, {"REMAT_DATA_DIR": str(tmp / "data"), "REMAT_LOG_LEVEL": "warning"})
    try:
        yield procs.server()
    finally:
        procs.stop_all()


def test_the_bars_grow_live_and_link_the_plans(server: Server, watched: Watched):
    graphs = {b: chain(8, cost=2.0 * b, memory=100 * b + 10, fixed_memory=1_000) for b in (2, 4)}
    with Client(server.url) as client:
        started = client.max_batch(graphs, budget=50_000, strategies=STRATEGIES, time_limit_s=10)
    watched.open(f"{server.url}/dashboard/max-batch/{started['id']}")
    page = watched.page
    assert page.locator("#max-batch-progress .live").count() == 1, "the search was still going when the page opened"
    page.wait_for_selector("#max-batch-progress .badge.succeeded", timeout=180_000)
    assert page.locator("#max-batch-progress .live").count() == 0
    assert page.evaluate("document.getElementById('plot-batches').data[0].x") == STRATEGIES
    assert page.locator("#plot-batches g.trace.bars path").count() == len(STRATEGIES)
    with Client(server.url) as client:
        doc = client.get_max_batch(started["id"])
    heights = page.evaluate("document.getElementById('plot-batches').data[0].y")
    assert heights == [s["batch"] for s in doc["strategies"]] and heights[-1] > heights[0] > 0
    assert page.locator("#max-batch-table tbody tr").count() == len(STRATEGIES)
    watched.screenshot("dashboard-max-batch-chain8.png")
    page.click("#max-batch-table td.best a")
    watched.wait_ready()
    assert page.url.endswith(f"/dashboard/jobs/{doc['chosen']['job_id']}")
    assert watched.errors == []


def test_the_front_page_links_the_search(server: Server, watched: Watched):
    with Client(server.url) as client:
        search_id = client.max_batch({b: chain(6, memory=b) for b in (1, 2)}, budget=10_000,
                                     strategies=["checkpoint-all"])["id"]
    watched.page.goto(f"{server.url}/dashboard")
    watched.page.click(f"a[href='/dashboard/max-batch/{search_id}'] >> nth=0")
    watched.wait_ready()
    assert watched.page.url.endswith(f"/dashboard/max-batch/{search_id}") and watched.errors == []
