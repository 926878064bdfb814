"""Bearer tokens, per-token and queue limits: 401, 429 and 503 as problem documents."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from factories import benchmark_graph, chain
from fastapi.testclient import TestClient
from processes import wait_until

from remat.service import Settings, create_app

TOKEN = "tok-" + "a" * 28
OTHER = "tok-" + "b" * 28


@pytest.fixture
def secured(settings: Settings) -> Iterator[TestClient]:
    limited = settings.model_copy(update={"tokens": [TOKEN, OTHER], "max_active_jobs_per_token": 2, "slots": 1})
    with TestClient(create_app(Settings.model_validate(limited.model_dump())), raise_server_exceptions=False) as c:
        yield c


def _body(n: int, **extra) -> dict:
    return {"graph": chain(n).to_json(), "budget_ratio": 0.5, "strategy": "checkpoint-last", "wait_s": 0, **extra}


@pytest.mark.parametrize("header", [None, "Bearer wrong-token-wrong-token", f"Basic {TOKEN}", "Bearer "])
def test_requests_without_a_valid_token_are_refused(secured: TestClient, header: str | None):
    headers = {"Authorization": header} if header is not None else {}
    for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/solve"), ("GET", "/v1/strategies"),
                         ("GET", "/metrics"), ("POST", "/v1/sweeps"), ("GET", "/v1/jobs/x/events")):
        r = secured.request(method, path, headers=headers, json=_body(3))
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.headers["www-authenticate"].startswith("Bearer")


def test_a_valid_token_is_accepted_and_health_stays_open(secured: TestClient):
    assert secured.get("/v1/strategies", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert secured.get("/metrics", headers={"Authorization": f"bearer {OTHER}"}).status_code == 200
    assert secured.get("/healthz").status_code == 200 and secured.get("/readyz").status_code == 200


def test_the_openapi_document_does_not_leak_tokens(secured: TestClient):
    text = secured.get("/openapi.json").text
    assert TOKEN not in text and OTHER not in text


def test_each_token_has_its_own_cap_on_active_jobs(secured: TestClient):
    mine = {"Authorization": f"Bearer {TOKEN}"}
    long_ones = [secured.post("/v1/solve", json=_body(n), headers=mine) for n in (300, 301)]
    assert [r.status_code for r in long_ones] == [202, 202]
    r = secured.post("/v1/solve", json=_body(302), headers=mine)
    if r.status_code != 429:  # one of the two finished already; the third one fills the cap again
        r = secured.post("/v1/solve", json=_body(303), headers=mine)
    assert r.status_code == 429 and r.headers["content-type"] == "application/problem+json"
    assert int(r.headers["retry-after"]) > 0
    again = secured.post("/v1/solve", json=_body(300), headers=mine)  # joins its job instead of counting twice
    assert again.status_code in (200, 202)
    assert secured.post("/v1/solve", json=_body(304), headers={"Authorization": f"Bearer {OTHER}"}).status_code == 202


def test_a_full_queue_answers_503_with_retry_after(settings: Settings):
    tight = Settings.model_validate({**settings.model_dump(), "max_queued_jobs": 1, "max_sweep_points": 1, "slots": 1})
    with TestClient(create_app(tight), raise_server_exceptions=False) as c:
        answers = [c.post("/v1/solve", json=_body(n)) for n in range(400, 406)]
        refused = [r for r in answers if r.status_code == 503]
        assert refused and all(r.status_code == 202 for r in answers if r not in refused)
        for r in refused:
            assert r.headers["retry-after"] == "5" and r.headers["content-type"] == "application/problem+json"
            assert "queue is full" in r.json()["detail"]


def test_a_sweep_is_refused_for_a_full_queue(settings: Settings):
    tight = Settings.model_validate({**settings.model_dump(), "max_queued_jobs": 1, "max_sweep_points": 1, "slots": 1})
    with TestClient(create_app(tight), raise_server_exceptions=False) as c:
        busy = c.post("/v1/solve", json={**_body(3), "graph": benchmark_graph("rl500").to_json(),
                                         "budget_ratio": 0.8, "strategy": "checkmate", "time_limit_s": 30,
                                         "convergence": None}).json()
        wait_until(lambda: c.get(f"/v1/jobs/{busy['id']}").json()["status"] == "running")
        assert c.post("/v1/solve", json=_body(401)).status_code == 202  # waits behind it: the queue is full
        r = c.post("/v1/sweeps", json={"graph": chain(8).to_json(), "strategies": ["checkpoint-all"],
                                       "budgets": [10**6]})
        assert r.status_code == 503 and "queue is full" in r.json()["detail"]
        assert c.get("/v1/sweeps").json()["count"] == 0
        c.post(f"/v1/jobs/{busy['id']}/cancel")
