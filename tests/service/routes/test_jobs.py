"""GET /v1/jobs, /v1/jobs/{id}, cancel, and the server-sent events of a job."""

from __future__ import annotations

import json

import pytest
from factories import chain
from fastapi.testclient import TestClient
from processes import wait_until

from remat.solvers import solve


def _submit(client: TestClient, n: int = 8, **extra) -> dict:
    body = {"graph": chain(n).to_json(), "budget_ratio": 1.0, "strategy": "checkpoint-all", "wait_s": 0, **extra}
    r = client.post("/v1/solve", json=body)
    assert r.status_code == 202, r.text
    return r.json()


def test_a_job_can_be_looked_up_and_listed(client: TestClient):
    job = _submit(client)
    done = wait_until(lambda: (j := client.get(f"/v1/jobs/{job['id']}").json())["status"] == "succeeded" and j)
    assert done["result"]["status"] == "feasible" and done["started_at"] and done["finished_at"]
    assert done["progress"] is None or done["progress"]["elapsed_s"] >= 0
    listing = client.get("/v1/jobs", params={"status": "succeeded"}).json()
    assert listing["count"] == 1 and listing["jobs"][0]["id"] == job["id"] and listing["jobs"][0]["result"] is None


def test_an_unknown_job_is_a_404_problem(client: TestClient):
    for r in (client.get("/v1/jobs/nope"), client.post("/v1/jobs/nope/cancel"), client.get("/v1/jobs/nope/events")):
        assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
        assert r.json()["job_id"] == "nope"


def test_cancelling_a_finished_job_changes_nothing(client: TestClient):
    job = _submit(client)
    wait_until(lambda: client.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded")
    r = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "succeeded"


def test_events_stream_the_job_until_it_ends(client: TestClient):
    job = _submit(client, n=40, budget_ratio=0.6, strategy="checkpoint-last")
    events = []
    with client.stream("GET", f"/v1/jobs/{job['id']}/events") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        event: dict = {}
        for line in r.iter_lines():
            if line:
                key, _, value = line.partition(": ")
                event[key] = value
            elif event:
                events.append(event)
                event = {}
    assert events[-1]["event"] == "end" and json.loads(events[-1]["data"])["status"] == "succeeded"
    assert [int(e["id"]) for e in events] == list(range(1, len(events) + 1))


def test_results_carry_the_compact_schedule_and_the_full_one_on_request(client: TestClient,
                                                                        monkeypatch: pytest.MonkeyPatch):
    job = _submit(client, n=8)
    wait_until(lambda: client.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded")
    compact = client.get(f"/v1/jobs/{job['id']}").json()["result"]["schedule"]
    full = client.get(f"/v1/jobs/{job['id']}", params={"schedule": "full"}).json()["result"]["schedule"]
    expected = solve(chain(8), budget_ratio=1.0, strategy="checkpoint-all").to_json(full_schedule=True)
    assert compact["encoding"] == "changes" and full == expected["schedule"]
    monkeypatch.setattr("remat.service._service.FULL_SCHEDULE_MAX_IDS", 10)
    r = client.get(f"/v1/jobs/{job['id']}", params={"schedule": "full"})
    assert r.status_code == 422 and "compact form" in r.json()["detail"] and r.json()["field"] == "schedule"
