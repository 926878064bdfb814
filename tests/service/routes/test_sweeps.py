"""POST /v1/sweeps and GET /v1/sweeps/{id}: every point an ordinary job, results as remat.result/v1."""

from __future__ import annotations

import pytest
from factories import benchmark_graph, chain
from fastapi.testclient import TestClient
from processes import wait_until

from remat.service import create_app
from remat.solvers import STRATEGIES, plan_sweep, sweep_budgets


def test_a_default_sweep_runs_every_applicable_strategy_over_the_budget_range(client: TestClient):
    """The grid of jobs it creates at once, then the heuristics' natural points, as plan_sweep finds them
    in-process (running every job, MILPs included, is left to the named-sweep test)."""
    graph = chain(10)
    r = client.post("/v1/sweeps", json={"graph": graph.to_json(), "time_limit_s": 30})
    assert r.status_code == 202, r.text
    summary = r.json()
    assert r.headers["Location"] == f"/v1/sweeps/{summary['id']}" and summary["status"] in ("queued", "running")
    plan = plan_sweep(graph, time_limit_s=30)
    assert sum(summary["counts"].values()) == len(plan.strategies) * len(sweep_budgets(graph))
    sweep = wait_until(lambda: (s := client.get(f"/v1/sweeps/{summary['id']}").json())["natural_budgets"] and s)
    assert sorted((j["strategy"], j["budget"]) for j in sweep["jobs"]) == sorted(plan.points)
    assert {"checkpoint-all", "chen-sqrtn", "griewank"} <= set(plan.strategies) <= set(STRATEGIES)
    assert min(plan.budgets) == graph.min_feasible_budget and max(plan.budgets) == graph.checkpoint_all_peak
    assert sweep["natural_budgets"] == dict(plan.natural) and set(plan.natural.values()) <= set(plan.budgets)
    assert all(res["format"] == "remat.result/v1" for res in sweep["results"])
    assert sum(sweep["counts"].values()) == len(sweep["jobs"])
    listed = client.get("/v1/sweeps").json()
    assert listed["sweeps"][0]["id"] == summary["id"]


def test_named_strategies_and_budgets(client: TestClient):
    graph = chain(6)
    budgets = [graph.min_feasible_budget, graph.checkpoint_all_peak]
    body = {"graph": graph.to_json(), "strategies": ["checkpoint-all", "chen-sqrtn"], "budgets": budgets}
    summary = client.post("/v1/sweeps", json=body).json()
    sweep = wait_until(lambda: (s := client.get(f"/v1/sweeps/{summary['id']}").json())["status"] == "succeeded" and s)
    assert sorted((j["strategy"], j["budget"]) for j in sweep["jobs"]) == sorted(
        (s, b) for s in body["strategies"] for b in budgets)
    assert all(res["format"] == "remat.result/v1" for res in sweep["results"]) and len(sweep["results"]) == 4
    again = client.post("/v1/sweeps", json=body).json()
    assert again["id"] == summary["id"] and again["status"] == "succeeded"
    brief = client.get(f"/v1/sweeps/{summary['id']}", params={"results": "summary"}).json()
    assert [{k: v for k, v in r.items() if k not in ("schedule", "plan", "log")} for r in sweep["results"]] \
        == brief["results"]
    assert client.get(f"/v1/sweeps/{summary['id']}", params={"results": "some"}).status_code == 422


def test_a_strategy_that_does_not_apply_is_refused_by_name(client: TestClient):
    body = {"graph": benchmark_graph("resnet50").to_json(), "strategies": ["chen-sqrtn"]}
    r = client.post("/v1/sweeps", json=body)
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert "node" in r.json()


def test_a_sweep_over_the_point_limit_is_refused(client: TestClient):
    graph = chain(4)
    body = {"graph": graph.to_json(), "budgets": list(range(100, 100 + 400)),
            "strategies": list(STRATEGIES)[:2]}
    r = client.post("/v1/sweeps", json=body)
    assert r.status_code == 422 and "up to 800 points" in r.json()["detail"]


def test_a_sweep_takes_no_strategy_options_and_refuses_them_before_queueing(client: TestClient):
    body = {"graph": chain(4).to_json(), "strategies": ["griewank"], "options": {"snapshots": -1}}
    r = client.post("/v1/sweeps", json=body)
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
    assert r.json()["field"] == "options"
    assert client.get("/v1/sweeps").json()["count"] == 0 and client.get("/v1/jobs").json()["jobs"] == []


def test_unknown_sweep_is_404(client: TestClient):
    assert client.get("/v1/sweeps/nope").status_code == 404


def test_the_api_never_runs_a_strategy_for_a_sweep(settings, monkeypatch: pytest.MonkeyPatch):
    """The heuristics' natural points come from their runs as jobs on the executor, not from the API's threads."""
    def refuse(*args, **kwargs):
        raise AssertionError("a strategy ran in the API process")

    monkeypatch.setattr("remat.solvers._solve.solve", refuse)
    monkeypatch.setattr("remat.solvers._sweep.solve", refuse)
    strategies = ["checkpoint-all", "chen-sqrtn", "checkpoint-last"]
    with TestClient(create_app(settings)) as c:
        r = c.post("/v1/sweeps", json={"graph": chain(8).to_json(), "strategies": strategies})
        assert r.status_code == 202, r.text
        sweep = wait_until(lambda: (s := c.get(f"/v1/sweeps/{r.json()['id']}").json())["status"] == "succeeded" and s)
    assert set(sweep["natural_budgets"]) == set(strategies)
    assert set(sweep["natural_budgets"].values()) <= {j["budget"] for j in sweep["jobs"]}
