"""Transfer parameters and host budgets on POST /v1/solve and /v1/sweeps: they reach solve(), are part of the
job's key, and a bad one (or none, for a strategy that offloads) is a 422 that says what to give."""

from __future__ import annotations

import pytest
from factories import chain
from fastapi.testclient import TestClient
from processes import wait_until

from remat.schedules import Transfer
from remat.solvers import STRATEGIES, Outcome, Strategy

UNITS = {"bandwidth": 4.0, "latency": 0.5}


def _request(**extra) -> dict:
    return {"graph": chain(6).to_json(), "budget_ratio": 1.0, "strategy": "checkpoint-all", **extra}


@pytest.fixture
def offloader(monkeypatch: pytest.MonkeyPatch) -> str:
    """A strategy that offloads, registered in this process only (its checks run here, before any job)."""
    def never_runs(graph, budget, ctx):  # pragma: no cover - no request of these tests reaches a solver
        return Outcome(None)

    monkeypatch.setitem(STRATEGIES, "offload-test", Strategy("offload-test", "test", never_runs, offloads=True))
    return "offload-test"


def test_transfer_and_host_budget_reach_the_solve_and_its_job(client: TestClient):
    r = client.post("/v1/solve", json=_request(transfer=UNITS, host_budget=2**20))
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["transfer"] == UNITS and result["host_budget"] == 2**20 and result["host_peak_memory"] == 0
    assert result["status"] == "feasible", "a plan without copies holds no host memory"
    job = client.get(r.headers["Content-Location"]).json()
    assert job["transfer"] == UNITS and job["host_budget"] == 2**20
    plain = client.post("/v1/solve", json=_request()).json()
    assert plain["transfer"] is None and plain["host_budget"] is None and plain["host_peak_memory"] == 0


def test_a_profile_is_recorded_in_the_graphs_units_so_equal_copies_share_a_job(client: TestClient):
    profile = {"profile": "pcie5-x16", "seconds_per_cost_unit": 1e-3}
    by_profile = client.post("/v1/solve", json=_request(transfer=profile))
    expected = Transfer.from_profile("pcie5-x16", seconds_per_cost_unit=1e-3).to_json()
    by_units = client.post("/v1/solve", json=_request(transfer=expected))
    assert by_profile.status_code == by_units.status_code == 200, by_profile.text
    assert by_profile.json()["transfer"] == expected == {"bandwidth": pytest.approx(5e7), "latency": 0.0}
    assert by_profile.headers["Content-Location"] == by_units.headers["Content-Location"]


def test_transfer_and_host_budget_change_the_jobs_id(client: TestClient):
    variants = ({}, {"transfer": UNITS}, {"transfer": {**UNITS, "latency": 0.25}},
                {"transfer": UNITS, "host_budget": 0}, {"host_budget": 0})
    answers = [client.post("/v1/solve", json=_request(**extra)) for extra in variants]
    assert all(r.status_code == 200 for r in answers)
    assert len({r.headers["Content-Location"] for r in answers}) == len(answers)


@pytest.mark.parametrize(("transfer", "field", "says"), [
    ({"bandwidth": 0}, "transfer.bandwidth", "transfer.bandwidth must be greater than 0"),
    ({"bandwidth": 10, "latency": -1}, "transfer.latency", "transfer.latency must be 0 or more"),
    ({"bandwidth": "fast"}, "transfer.bandwidth", "must be a number"),
    ({"latency": 1}, "transfer.bandwidth", "'transfer' needs 'bandwidth'"),
    ({"bandwith": 10}, "transfer", "Unknown field 'bandwith' in 'transfer'"),
    ({"profile": "pcie9-x16", "seconds_per_cost_unit": 1e-3}, "transfer.profile",
     "No device profile named 'pcie9-x16'; known profiles: nvlink-c2c, pcie4-x16, pcie5-x16"),
    ({"profile": "pcie4-x16"}, "transfer.seconds_per_cost_unit", "needs 'seconds_per_cost_unit'"),
])
def test_bad_transfer_parameters_are_a_422_saying_what_to_give(client: TestClient, transfer: dict, field: str,
                                                                says: str):
    for path, body in (("/v1/solve", _request(transfer=transfer)),
                       ("/v1/sweeps", {"graph": chain(4).to_json(), "transfer": transfer})):
        r = client.post(path, json=body)
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
        assert says in r.json()["detail"] and r.json()["field"] == field


@pytest.mark.parametrize(("extra", "field"), [({"transfer": "pcie5-x16"}, "transfer"),
                                              ({"transfer": [1, 2]}, "transfer"),
                                              ({"host_budget": -1}, "host_budget"),
                                              ({"host_budget": "8GiB"}, "host_budget"),
                                              ({"host_budget": 1.5}, "host_budget")])
def test_transfer_must_be_an_object_and_host_budget_whole_bytes(client: TestClient, extra: dict, field: str):
    r = client.post("/v1/solve", json=_request(**extra))
    assert r.status_code == 422 and r.json()["field"] == field, r.text


def test_a_strategy_that_offloads_needs_a_transfer(client: TestClient, offloader: str):
    r = client.post("/v1/solve", json=_request(strategy=offloader))
    assert r.status_code == 422 and r.json()["field"] == "transfer"
    assert f"Strategy {offloader!r} moves values to host memory" in r.json()["detail"]
    assert '"profile": "pcie5-x16"' in r.json()["detail"]
    sweep = client.post("/v1/sweeps", json={"graph": chain(4).to_json(), "strategies": ["checkpoint-all", offloader]})
    assert sweep.status_code == 422 and r.json()["detail"] == sweep.json()["detail"]
    assert client.get("/v1/jobs").json()["count"] == 0, "refused before any job exists"


def test_checkmate_told_to_offload_needs_a_transfer_too(client: TestClient):
    r = client.post("/v1/solve", json=_request(strategy="checkmate", options={"offload": True}))
    assert r.status_code == 422 and r.json()["field"] == "transfer"
    assert "Strategy 'checkmate' with option 'offload' moves values to host memory" in r.json()["detail"]
    r = client.post("/v1/solve", json=_request(strategy="checkmate", options={"offload": "yes"}))
    assert r.status_code == 422 and "must be true or false" in r.json()["detail"]
    assert client.get("/v1/jobs").json()["count"] == 0


def test_strategies_say_which_offload(client: TestClient, offloader: str):
    listed = {s["name"]: s for s in client.get("/v1/strategies").json()["strategies"]}
    assert listed[offloader]["offloads"] is True
    assert all(listed[name]["offloads"] is s.offloads for name, s in STRATEGIES.items())
    assert listed["checkmate"]["offloads"] is False


def test_a_sweep_carries_the_transfer_to_every_job_and_a_default_one_leaves_offloading_strategies_out(
        client: TestClient, offloader: str):
    graph = chain(6)
    budgets = [graph.min_feasible_budget, graph.checkpoint_all_peak]
    body = {"graph": graph.to_json(), "strategies": ["checkpoint-all", "chen-sqrtn"], "budgets": budgets,
            "transfer": UNITS, "host_budget": 10**6}
    summary = client.post("/v1/sweeps", json=body).json()
    sweep = wait_until(lambda: (s := client.get(f"/v1/sweeps/{summary['id']}").json())["status"] == "succeeded" and s)
    assert len(sweep["results"]) == 4
    assert all(res["transfer"] == UNITS and res["host_budget"] == 10**6 for res in sweep["results"])
    without = client.post("/v1/sweeps", json={k: v for k, v in body.items() if k not in ("transfer", "host_budget")})
    assert without.json()["id"] != summary["id"], "the sweep's jobs differ, and so does its id"
    default = client.post("/v1/sweeps", json={"graph": chain(2).to_json(), "budgets": [10]}).json()
    strategies = {j["strategy"] for j in client.get(f"/v1/sweeps/{default['id']}").json()["jobs"]}
    assert offloader not in strategies and "checkpoint-all" in strategies
