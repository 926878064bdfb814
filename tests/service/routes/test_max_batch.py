"""POST /v1/max-batch and GET /v1/max-batch/{id}: the largest batch of each strategy, each batch an ordinary job
of the caller, answered as remat.solvers.max_batch answers in-process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from factories import benchmark_graph, chain
from fastapi.testclient import TestClient
from processes import wait_until

from remat.schedules import BatchedGraph, Graph
from remat.service import Settings, create_app
from remat.solvers import max_batch, sweep_strategies

BUDGET = 50_000
TOKEN = "tok-" + "m" * 28
OTHER = "tok-" + "n" * 28
ENDED = ("succeeded", "failed", "cancelled")


def chain_at(batch: int, n: int = 8) -> Graph:
    """100 bytes of activation per sample and node, 1,000 bytes of parameters."""
    return chain(n, cost=2.0 * batch, memory=100 * batch + 10, fixed_memory=1_000)


def body(graphs: dict[int, Graph] | None = None, **extra: Any) -> dict[str, Any]:
    graphs = graphs or {2: chain_at(2), 4: chain_at(4)}
    return {"graphs": [{"batch": b, "graph": g.to_json()} for b, g in graphs.items()], "budget": BUDGET, **extra}


def finished(client: TestClient, search_id: str, headers: dict[str, str] | None = None,
             timeout_s: float = 120) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        doc = client.get(f"/v1/max-batch/{search_id}", headers=headers).json()
        return doc if doc["status"] in ENDED else None

    done: dict[str, Any] = wait_until(ended, timeout_s=timeout_s, interval_s=0.3)
    return done


def test_each_strategy_gets_the_batch_max_batch_finds_in_process(client: TestClient):
    strategies = ["checkpoint-all", "chen-greedy", "checkmate"]
    r = client.post("/v1/max-batch", json=body(strategies=strategies, time_limit_s=30))
    assert r.status_code == 202, r.text
    started = r.json()
    assert r.headers["Location"] == f"/v1/max-batch/{started['id']}" and started["status"] in ("queued", "running")
    doc = finished(client, started["id"])
    assert doc["format"] == "remat.max-batch/v1" and doc["status"] == "succeeded" and doc["batches"] == [2, 4]
    batched = BatchedGraph.from_graphs({2: chain_at(2), 4: chain_at(4)})
    rows = {s["strategy"]: s for s in doc["strategies"]}
    assert list(rows) == strategies
    for name in ("checkpoint-all", "chen-greedy"):
        here = max_batch(batched, BUDGET, strategy=name)
        assert rows[name]["batch"] == here.batch > 0
        assert [(t["batch"], t["ok"]) for t in rows[name]["trials"]] == [(t.batch, t.ok) for t in here.trials]
    everything, greedy, ours = (rows[s]["batch"] for s in strategies)
    assert ours > greedy > everything, "checkmate fits more than the heuristic, which fits more than no remat"
    assert doc["checkpoint_all"] == {"strategy": "checkpoint-all", "batch": everything}
    assert doc["best_baseline"] == {"strategy": "chen-greedy", "batch": greedy}
    assert rows["checkmate"]["vs_checkpoint_all"] == pytest.approx(ours / everything)
    assert rows["checkmate"]["vs_best_baseline"] == pytest.approx(ours / greedy)
    chosen = doc["chosen"]
    assert (chosen["strategy"], chosen["batch"], chosen["job_id"]) == ("checkmate", ours, rows["checkmate"]["job_id"])
    result = chosen["result"]
    assert result["format"] == "remat.result/v1" and result["plan"] and result["peak_memory"] <= BUDGET
    assert result["overhead"] <= rows["checkmate"]["trials"][-1]["max_overhead"] * (1 + 1e-9)
    assert result["graph_sha256"] == batched.at(ours).sha256
    job = client.get(f"/v1/jobs/{chosen['job_id']}").json()       # every batch tried is one of the caller's jobs
    assert job["status"] == "succeeded" and job["budget"] == BUDGET
    brief = client.get(f"/v1/max-batch/{started['id']}", params={"result": "summary"}).json()
    assert brief["chosen"]["result"]["overhead"] == result["overhead"] and "plan" not in brief["chosen"]["result"]
    again = client.post("/v1/max-batch", json=body(strategies=strategies, time_limit_s=30))
    assert again.status_code == 202 and again.json()["id"] == started["id"] and again.json()["status"] == "succeeded"
    listed = client.get("/v1/max-batch").json()
    assert listed["count"] == 1 and listed["max_batches"][0]["id"] == started["id"]


def test_a_cost_cap_gives_a_smaller_batch(client: TestClient):
    free = client.post("/v1/max-batch", json=body(strategies=["chen-greedy"])).json()
    capped = client.post("/v1/max-batch", json=body(strategies=["chen-greedy"], max_overhead=1.01)).json()
    assert free["id"] != capped["id"]
    free_batch = finished(client, free["id"])["strategies"][0]["batch"]
    row = finished(client, capped["id"])["strategies"][0]
    assert 0 < row["batch"] < free_batch and row["overhead"] <= 1.01
    assert {t["max_overhead"] for t in row["trials"]} == {1.01}


@pytest.mark.parametrize(("change", "status", "words"), [
    ({"graphs": [{"batch": 2, "graph": chain_at(2).to_json()}]}, 422, "two or more batch sizes"),
    ({"graphs": [{"batch": 2, "graph": chain_at(2).to_json()}] * 2}, 422, "two graphs at batch 2"),
    ({"graphs": [{"batch": 2, "graph": chain_at(2).to_json()}, {"batch": 4, "graph": chain_at(4, n=9).to_json()}]},
     422, "have different nodes"),
    ({"graphs": [{"batch": 2, "graph": chain_at(2).to_json()}, {"batch": 4, "graph": chain_at(4).to_json()},
                 {"batch": 8, "graph": chain(8, cost=16.0, memory=1_000, fixed_memory=1_000).to_json()}]},
     422, "its memory is not affine"),
    ({"graphs": [{"batch": 0, "graph": chain_at(2).to_json()}, {"batch": 4, "graph": chain_at(4).to_json()}]},
     422, "graphs.batch"),
    ({"max_overhead": 0.5}, 422, "max_overhead"),
    ({"budget": -1}, 422, "budget"),
    ({"strategies": ["no-such-strategy"]}, 422, "no-such-strategy"),
    ({"time_limit_s": 10**6}, 422, "this server allows at most"),
    ({"backend": "nope", "strategies": ["checkmate"]}, 422, "nope"),
    ({"extra": 1}, 422, "extra"),
    ({"options": {"snapshots": -1}, "strategies": ["griewank"]}, 422, "options"),
    ({"transfer": {"bandwidth": 1e6}}, 422, "plans without copies to host memory"),
    ({"host_budget": 10}, 422, "plans without copies to host memory"),
])
def test_bad_requests_are_refused_before_anything_runs(client: TestClient, change: dict[str, Any], status: int,
                                                       words: str):
    r = client.post("/v1/max-batch", json={**body(), **change})
    assert r.status_code == status and r.headers["content-type"] == "application/problem+json", r.text
    assert words in r.json()["detail"] or words in str(r.json().get("errors")), r.json()
    assert client.get("/v1/max-batch").json()["count"] == 0 and client.get("/v1/jobs").json()["count"] == 0


def test_a_bad_node_is_named_with_its_graph(client: TestClient):
    doc = chain_at(4).to_json()
    doc["nodes"][3]["cost"] = -1
    r = client.post("/v1/max-batch", json={**body(), "graphs": [{"batch": 2, "graph": chain_at(2).to_json()},
                                                                 {"batch": 4, "graph": doc}]})
    assert r.status_code == 422 and r.json()["node"] == "f3"
    assert r.json()["detail"].startswith("graphs.1.graph node 'f3' (#3): field 'cost'")


def test_a_strategy_that_does_not_apply_is_refused_by_name(client: TestClient):
    batched = BatchedGraph.proportional(benchmark_graph("resnet50"), batch=256)
    r = client.post("/v1/max-batch", json={**body({128: batched.at(128), 256: batched.at(256)}),
                                           "strategies": ["chen-sqrtn"]})
    assert r.status_code == 422 and r.json()["type"].endswith("strategy-not-applicable") and "node" in r.json()


def test_by_default_every_strategy_that_applies_is_searched_and_cancel_ends_it(client: TestClient):
    batched = BatchedGraph.proportional(benchmark_graph("vgg16"), batch=256)
    graphs = {128: batched.at(128), 256: batched.at(256)}
    started = client.post("/v1/max-batch", json={**body(graphs), "budget": 16 * 2**30, "time_limit_s": 120}).json()
    search_id = started["id"]

    def solving_checkmate() -> dict[str, Any] | None:
        doc = client.get(f"/v1/max-batch/{search_id}").json()
        row = next(s for s in doc["strategies"] if s["strategy"] == "checkmate")
        return doc if row["trials"] and row["trials"][-1]["status"] == "running" else None

    doc = wait_until(solving_checkmate, timeout_s=60, interval_s=0.3)
    assert [s["strategy"] for s in doc["strategies"]] == sweep_strategies(graphs[128])
    r = client.post(f"/v1/max-batch/{search_id}/cancel")
    assert r.status_code == 200 and r.json()["status"] in ("succeeded", "cancelled")
    doc = client.get(f"/v1/max-batch/{search_id}").json()
    assert {s["status"] for s in doc["strategies"]} <= {"succeeded", "cancelled"}
    checkmate = next(s for s in doc["strategies"] if s["strategy"] == "checkmate")
    assert checkmate["status"] == "cancelled" and checkmate["error"] == "cancelled"
    job_id = checkmate["trials"][-1]["job_id"]
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled", timeout_s=30)
    assert client.post(f"/v1/max-batch/{search_id}/cancel").json()["status"] == doc["status"]   # a no-op now
    again = client.post("/v1/max-batch", json={**body(graphs), "budget": 16 * 2**30, "time_limit_s": 120})
    assert again.json()["id"] == search_id and again.json()["status"] in ("queued", "running"), "begun afresh"
    client.post(f"/v1/max-batch/{search_id}/cancel")


def test_an_unknown_search_is_a_404(client: TestClient):
    assert client.get("/v1/max-batch/nope").status_code == 404
    assert client.post("/v1/max-batch/nope/cancel").status_code == 404


def test_the_api_never_runs_a_strategy_for_a_search(settings: Settings, monkeypatch: pytest.MonkeyPatch):
    """Every batch is solved as a job by the executor's children, not in the API's threads."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a strategy ran in the API process")

    monkeypatch.setattr("remat.solvers._solve.solve", refuse)
    monkeypatch.setattr("remat.solvers._max_batch.solve", refuse)
    with TestClient(create_app(settings)) as c:
        r = c.post("/v1/max-batch", json=body(strategies=["checkpoint-all", "chen-greedy"]))
        assert r.status_code == 202, r.text
        doc = finished(c, r.json()["id"])
    assert doc["status"] == "succeeded" and all(s["batch"] > 0 for s in doc["strategies"])


def test_a_search_goes_on_after_a_restart(settings: Settings):
    with TestClient(create_app(settings)) as c:
        started = c.post("/v1/max-batch", json=body(strategies=["checkpoint-all"])).json()
    with TestClient(create_app(settings)) as c:
        doc = finished(c, started["id"])
    assert doc["status"] == "succeeded" and doc["strategies"][0]["batch"] > 0


@pytest.fixture
def secured(settings: Settings) -> Iterator[TestClient]:
    tokens = settings.model_copy(update={"tokens": [TOKEN, OTHER]})
    with TestClient(create_app(Settings.model_validate(tokens.model_dump())), raise_server_exceptions=False) as c:
        yield c


def test_a_token_sees_only_its_own_searches(secured: TestClient):
    mine, theirs = {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": f"Bearer {OTHER}"}
    request = body(strategies=["checkpoint-all"])
    assert secured.post("/v1/max-batch", json=request).status_code == 401
    started = secured.post("/v1/max-batch", json=request, headers=mine).json()
    search_id = started["id"]
    for method, path in (("GET", f"/v1/max-batch/{search_id}"), ("POST", f"/v1/max-batch/{search_id}/cancel")):
        assert secured.request(method, path, headers=theirs).status_code == 404
    assert secured.get("/v1/max-batch", headers=theirs).json()["count"] == 0
    other = secured.post("/v1/max-batch", json=request, headers=theirs).json()
    assert other["id"] != search_id
    doc = finished(secured, search_id, headers=mine)
    job_id = doc["strategies"][0]["job_id"]
    assert secured.get(f"/v1/jobs/{job_id}", headers=mine).status_code == 200
    assert secured.get(f"/v1/jobs/{job_id}", headers=theirs).status_code == 404
    assert [s["id"] for s in secured.get("/v1/max-batch", headers=mine).json()["max_batches"]] == [search_id]
