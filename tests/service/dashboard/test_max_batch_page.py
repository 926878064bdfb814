"""The dashboard's max-batch page: bars per strategy (the paper's Figure 6), the table, live updates, links."""

from __future__ import annotations

import json
import re

from factories import chain
from fastapi.testclient import TestClient
from processes import wait_until

from remat.schedules import Graph
from remat.service import Settings, create_app

STRATEGIES = ["checkpoint-all", "chen-greedy", "checkmate"]
TOKEN = "max-batch-page-token-0123456789"


def page_data(html: str) -> dict:
    """What the page carries for its script: its figures and the URL it polls."""
    found = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', html, re.S)
    assert found
    return json.loads(found.group(1))


def chain_at(batch: int) -> Graph:
    return chain(8, cost=2.0 * batch, memory=100 * batch + 10, fixed_memory=1_000)


def start(client: TestClient, **headers: str) -> dict:
    body = {"graphs": [{"batch": b, "graph": chain_at(b).to_json()} for b in (2, 4)], "budget": 50_000,
            "strategies": STRATEGIES, "time_limit_s": 30}
    r = client.post("/v1/max-batch", json=body, headers=headers)
    assert r.status_code == 202, r.text
    return r.json()


def test_the_page_draws_a_bar_per_strategy_and_updates_until_the_search_ends(client: TestClient):
    started = start(client)
    page = f"/dashboard/max-batch/{started['id']}"
    first = page_data(client.get(page).text)
    assert first["poll"] == f"{page}/data" or started["status"] == "succeeded"
    last = wait_until(lambda: (u := client.get(f"{page}/data").json())["poll"] is None and u, timeout_s=120)
    doc = client.get(f"/v1/max-batch/{started['id']}").json()
    bars = last["figures"]["batches"]["data"][0]
    assert bars["type"] == "bar" and bars["x"] == STRATEGIES
    assert bars["y"] == [s["batch"] for s in doc["strategies"]] and min(bars["y"]) > 0
    assert bars["text"][0] == f"{bars['y'][0]} (1.00x)"
    r = client.get(page)
    assert r.status_code == 200 and page_data(r.text)["figures"] == last["figures"]
    assert r.text.count("<tr>") - 1 == len(STRATEGIES)          # a row per strategy under the header
    for s in doc["strategies"]:
        assert f'href="/dashboard/jobs/{s["job_id"]}"' in r.text   # each batch links to its plan
    assert re.search(r'class="cell best"><a href="/dashboard/jobs/' + doc["chosen"]["job_id"], r.text)
    assert "The plan to use" in r.text and "updating live" not in r.text
    front = client.get("/dashboard").text
    assert f'href="{page}"' in front


def test_another_tokens_search_is_not_shown(settings: Settings):
    secured = Settings.model_validate({**settings.model_dump(), "tokens": [TOKEN, TOKEN[::-1]]})
    with TestClient(create_app(secured), raise_server_exceptions=False) as client:
        started = start(client, Authorization=f"Bearer {TOKEN}")
        page = f"/dashboard/max-batch/{started['id']}"
        assert client.get(page, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get(page, headers={"Authorization": f"Bearer {TOKEN[::-1]}"}).status_code == 404
        assert client.get(f"{page}/data", headers={"Authorization": f"Bearer {TOKEN[::-1]}"}).status_code == 404
        assert client.get(page, headers={"Accept": "text/html"}).status_code == 401
        client.post(f"/v1/max-batch/{started['id']}/cancel", headers={"Authorization": f"Bearer {TOKEN}"})
    assert client.get("/dashboard/max-batch/nope").status_code in (401, 404)
