"""POST /v1/solve: results that simulate as reported, shared jobs, and a 4xx problem for every bad request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import benchmark_graph, chain, graph_doc, stacked_blocks
from fastapi.testclient import TestClient
from option_values import OPTION_IDS, OPTIONS, bad_values

from remat.schedules import Graph, Plan, simulate
from remat.service import Settings, create_app
from remat.solvers import Option, Strategy, solve


def _request(graph: Graph | dict, **extra) -> dict:
    doc = graph.to_json() if isinstance(graph, Graph) else graph
    return {"graph": doc, "budget_ratio": 1.0, "strategy": "checkpoint-all", **extra}


def test_a_solve_returns_a_result_whose_plan_simulates_as_reported(client: TestClient):
    graph = benchmark_graph("vgg16")
    r = client.post("/v1/solve", json=_request(graph, budget_ratio=0.9, strategy="chen-greedy"))
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["format"] == "remat.result/v1" and result["strategy"] == "chen-greedy"
    assert result["graph_sha256"] == graph.sha256 and result["status"] == "feasible"
    sim = simulate(graph, Plan.from_json(graph, result["plan"]))
    assert (sim.cost, sim.peak_memory) == (result["cost"], result["peak_memory"])
    assert result["peak_memory"] <= result["budget"] == -(-9 * graph.checkpoint_all_peak // 10)
    job = client.get(r.headers["Content-Location"]).json()
    assert job["status"] == "succeeded" and job["result"] == result and job["attempts"] == 1


def test_identical_requests_share_a_job_and_a_deterministic_result_is_reused(client: TestClient):
    graph = chain(6)
    first = client.post("/v1/solve", json=_request(graph, strategy="checkpoint-last"))
    again = client.post("/v1/solve", json=_request(graph, strategy="checkpoint-last"))
    in_bytes = client.post("/v1/solve", json={**_request(graph, strategy="checkpoint-last"),
                                              "budget_ratio": None, "budget": graph.checkpoint_all_peak})
    assert first.status_code == again.status_code == in_bytes.status_code == 200
    assert len({r.headers["Content-Location"] for r in (first, again, in_bytes)}) == 1
    assert again.json() == first.json()
    metrics = client.get("/metrics").text
    assert "remat_cache_hits_total 2.0" in metrics


def test_without_waiting_the_answer_is_202_with_the_job(client: TestClient):
    r = client.post("/v1/solve", json=_request(chain(30), wait_s=0, strategy="checkpoint-last", budget_ratio=0.5))
    assert r.status_code == 202
    job = r.json()
    assert r.headers["Location"] == f"/v1/jobs/{job['id']}" and job["status"] in ("queued", "running", "succeeded")
    assert job["links"]["cancel"] == f"/v1/jobs/{job['id']}/cancel"


def test_options_reach_the_strategy_and_are_part_of_the_jobs_key(client: TestClient):
    graph = benchmark_graph("vgg16")
    pinned = {"segment_budget": graph.checkpoint_all_peak // 4}  # a worse plan than the search finds
    plain = client.post("/v1/solve", json=_request(graph, strategy="chen-greedy"))
    first = client.post("/v1/solve", json=_request(graph, strategy="chen-greedy", options=pinned))
    again = client.post("/v1/solve", json=_request(graph, strategy="chen-greedy", options=pinned))
    assert plain.status_code == first.status_code == again.status_code == 200, first.text
    assert first.headers["Content-Location"] == again.headers["Content-Location"] != plain.headers["Content-Location"]
    job = client.get(first.headers["Content-Location"]).json()
    assert job["options"] == pinned and client.get(plain.headers["Content-Location"]).json()["options"] == {}
    local = solve(graph, budget_ratio=1.0, strategy="chen-greedy", options=pinned).to_json()
    assert first.json()["plan"] == local["plan"] != plain.json()["plan"]


def test_a_solve_stops_when_converged_unless_asked_to_run_to_its_limit(client: TestClient):
    graph = benchmark_graph("rl250")
    request = _request(graph, strategy="checkmate", budget_ratio=0.9, time_limit_s=120, wait_s=120)
    converging = client.post("/v1/solve", json=request)
    assert converging.status_code == 200, converging.text
    assert converging.json()["solve_time_s"] < 60 and "stopped when converged" in converging.json()["log"][-1]
    job = client.get(converging.headers["Content-Location"]).json()
    assert job["convergence"] == {"window_s": 2.0, "tolerance": 0.0025, "gap_per_window": 0.01, "max_windows": 9.0,
                                   "horizon_s": 18.0}
    to_the_limit = client.post("/v1/solve", json={**request, "time_limit_s": 3, "convergence": None})
    assert to_the_limit.status_code == 200, to_the_limit.text
    # the search leaves a few milliseconds per thousand nodes before the limit to simulate its best plan
    assert to_the_limit.json()["solve_time_s"] >= 2.9
    assert not any("stopped when converged" in line for line in to_the_limit.json()["log"])
    assert client.get(to_the_limit.headers["Content-Location"]).json()["convergence"] is None


def test_an_unknown_option_is_a_422_naming_it(client: TestClient):
    r = client.post("/v1/solve", json=_request(chain(3), strategy="checkmate", options={"path": "milp", "rouns": 2}))
    assert r.status_code == 422 and r.json()["field"] == "options"
    assert "'rouns'" in r.json()["detail"] and "path, warm_start" in r.json()["detail"]


@pytest.mark.parametrize("strategy, name, option", OPTIONS, ids=OPTION_IDS)
def test_every_bad_option_value_is_a_422_naming_what_it_accepts_and_queues_nothing(
        client: TestClient, strategy: Strategy, name: str, option: Option):
    for value in bad_values(option):
        r = client.post("/v1/solve", json=_request(chain(3), strategy=strategy.name, options={name: value}))
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", (value, r.text)
        assert r.json()["field"] == "options"
        assert r.json()["detail"] == f"Option {name!r} of {strategy.name} must be {option.accepts}, got {value!r}."
    assert client.get("/v1/jobs").json()["jobs"] == []


def _nodes(changes: dict | None = None) -> list[dict]:
    nodes = [{"id": "a", "deps": [], "cost": 1, "memory": 4}, {"id": "b", "deps": ["a"], "cost": 1, "memory": 4},
             {"id": "c", "deps": ["b"], "cost": 1, "memory": 4, "kind": "backward"}]
    for (node, field), value in (changes or {}).items():
        nodes[node][field] = value
    return nodes


BAD_GRAPHS = {
    "unknown dep": (graph_doc(_nodes({(1, "deps"): ["zz"]})), "b", "deps"),
    "later dep": (graph_doc(_nodes({(1, "deps"): ["c"]})), "b", "deps"),
    "self dep": (graph_doc(_nodes({(1, "deps"): ["b"]})), "b", "deps"),
    "cycle": (graph_doc(_nodes({(0, "deps"): ["b"]})), "a", "deps"),
    "duplicate id": (graph_doc(_nodes({(2, "id"): "a"})), "a", "id"),
    "negative cost": (graph_doc(_nodes({(1, "cost"): -1})), "b", "cost"),
    "negative memory": (graph_doc(_nodes({(2, "memory"): -3})), "c", "memory"),
    "fractional memory": (graph_doc(_nodes({(2, "memory"): 1.5})), "c", "memory"),
    "memory too large": (graph_doc(_nodes({(0, "memory"): 2**70})), "a", "memory"),
    "cost not a number": (graph_doc(_nodes({(0, "cost"): "cheap"})), "a", "cost"),
    "bad kind": (graph_doc(_nodes({(0, "kind"): "sideways"})), "a", "kind"),
    "empty id": (graph_doc(_nodes({(0, "id"): ""})), None, "id"),
    "missing memory": (graph_doc([{"id": "a", "deps": [], "cost": 1}]), "a", "memory"),
    "empty graph": (graph_doc([]), None, "nodes"),
    "wrong format": ({**graph_doc(_nodes()), "format": "remat.graph/v2"}, None, "format"),
    "negative fixed memory": (graph_doc(_nodes(), fixed_memory=-1), None, "fixed_memory"),
    "nodes not a list": ({**graph_doc([]), "nodes": {"a": 1}}, None, "nodes"),
    "too many nodes": (graph_doc([{"id": f"n{i}", "deps": [], "cost": 1, "memory": 1} for i in range(2001)]),
                       None, "nodes"),
    "too many edges": (graph_doc([{"id": f"n{i}", "deps": [f"n{j}" for j in range(max(0, i - 150), i)], "cost": 1,
                                   "memory": 1} for i in range(300)]), None, "deps"),
}


@pytest.mark.parametrize("case", BAD_GRAPHS, ids=list(BAD_GRAPHS))
def test_an_invalid_graph_gets_a_422_problem_naming_node_and_field(client: TestClient, case: str):
    doc, node, field = BAD_GRAPHS[case]
    r = client.post("/v1/solve", json=_request(doc))
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == 422 and problem["title"] and problem["detail"]
    assert problem.get("node") == node
    assert field in (problem.get("field") or "")
    if node:
        assert repr(node) in problem["detail"]


def test_non_finite_numbers_in_json_are_refused(client: TestClient):
    for token in ("NaN", "Infinity", "-Infinity"):
        body = json.dumps(_request(graph_doc(_nodes()))).replace('"cost": 1,', f'"cost": {token},', 1)
        r = client.post("/v1/solve", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["node"] == "a" and r.json()["field"].endswith("cost"), r.text


BAD_REQUESTS = {
    "both budgets": ({"budget": 10, "budget_ratio": 0.5}, 422, None),
    "no budget": ({"budget_ratio": None}, 422, None),
    "negative budget": ({"budget_ratio": None, "budget": -1}, 422, "budget"),
    "zero ratio": ({"budget_ratio": 0}, 422, "budget_ratio"),
    "unknown strategy": ({"strategy": "magic"}, 422, None),
    "strategy not applicable": ({"strategy": "chen-sqrtn", "graph": benchmark_graph("resnet50").to_json()}, 422, None),
    "unknown backend": ({"backend": "cplex"}, 422, "backend"),
    "time limit over the cap": ({"time_limit_s": 10_000}, 422, "time_limit_s"),
    "negative time limit": ({"time_limit_s": -1}, 422, "time_limit_s"),
    "gap of one": ({"mip_gap": 1}, 422, "mip_gap"),
    "unknown field": ({"budget_ration": 0.5}, 422, "budget_ration"),
    "graph missing": ({"graph": None}, 422, "graph"),
    "unknown option": ({"strategy": "chen-greedy", "options": {"rounds": 3}}, 422, "options"),
    "tolerance of one": ({"convergence": {"window_s": 2, "tolerance": 1}}, 422, "convergence.tolerance"),
    "window of zero": ({"convergence": {"window_s": 0}}, 422, "convergence.window_s"),
    "horizon of zero": ({"convergence": {"horizon_s": 0}}, 422, "convergence.horizon_s"),
    "convergence of a number": ({"convergence": 2}, 422, "convergence"),
    "option of a list": ({"strategy": "chen-greedy", "options": {"segment_budget": [1]}}, 422, None),
}


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=list(BAD_REQUESTS))
def test_a_malformed_request_gets_a_4xx_problem(client: TestClient, case: str):
    changes, status, field = BAD_REQUESTS[case]
    body = {**_request(chain(3)), **changes}
    r = client.post("/v1/solve", json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["detail"]
    if field:
        assert r.json()["field"] == field


def test_a_backend_this_service_lacks_is_a_422_not_a_failed_job(client: TestClient, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("remat.service._service.available_backends", lambda: ("highs", "cbc"))
    r = client.post("/v1/solve", json=_request(chain(3), strategy="checkmate", backend="gurobi"))
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert "'gurobi' is not installed on this service; installed: highs, cbc" in r.json()["detail"]
    assert client.get("/v1/jobs").json()["jobs"] == []


def test_a_strategy_or_path_that_outgrows_the_graph_is_a_422_naming_its_limit(client: TestClient):
    r = client.post("/v1/solve", json=_request(stacked_blocks(100), strategy="checkmate-lp"))  # 1,003 nodes
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["field"] == "strategy" and problem["detail"].startswith(
        "Strategy 'checkmate-lp' takes graphs of at most 700 nodes (")
    assert "this one has 1,003. Use 'checkmate'" in problem["detail"]
    whole = client.post("/v1/solve", json=_request(stacked_blocks(100), strategy="checkmate", options={"path": "milp"}))
    assert whole.status_code == 422 and whole.json()["field"] == "options"
    assert whole.json()["detail"].startswith("Path 'milp' builds the whole MILP, which takes graphs of at most 700")
    assert client.get("/v1/jobs").json()["jobs"] == []
    listed = {s["name"]: s for s in client.get("/v1/strategies").json()["strategies"]}
    assert listed["checkmate-lp"]["max_nodes"] == 700 and listed["checkmate"]["max_nodes"] is None


def test_by_default_the_service_reads_graphs_above_the_old_cap(tmp_path: Path):
    graph = stacked_blocks(2500)  # 25,003 nodes, over the 20,000 once allowed: refused by the strategy, not the caps
    with TestClient(create_app(Settings(data_dir=tmp_path / "data", slots=1)), raise_server_exceptions=False) as c:
        r = c.post("/v1/solve", json=_request(graph, strategy="griewank"))
    assert r.status_code == 422 and r.json()["field"] == "strategy", r.text
    assert "takes graphs of at most 5,000 nodes" in r.json()["detail"]


def test_unparseable_json_is_a_400_problem(client: TestClient):
    r = client.post("/v1/solve", content=b'{"graph": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json"


def test_an_oversized_body_is_a_413_problem(client: TestClient):
    big = chain(1500).to_json()
    big["padding"] = "x" * 2**20
    r = client.post("/v1/solve", json=_request(big))
    assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"


def test_unknown_routes_and_methods_are_problems_too(client: TestClient):
    assert client.get("/v1/nothing").headers["content-type"] == "application/problem+json"
    r = client.get("/v1/solve")
    assert r.status_code == 405 and r.headers["content-type"] == "application/problem+json"


def test_a_streamed_body_that_grows_too_large_is_a_413_problem(client: TestClient):
    def chunks():
        yield b'{"graph": {"format": "remat.graph/v1", "name": "'
        for _ in range(40):
            yield b"x" * 32768
        yield b'", "nodes": []}, "budget_ratio": 1.0}'

    r = client.post("/v1/solve", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"


def test_a_solve_without_a_plan_carries_the_leanest_plans_peak_to_its_page(client: TestClient):
    graph = benchmark_graph("rl100")  # no plan known at 0.6 of its peak
    r = client.post("/v1/solve", json=_request(graph, strategy="checkmate", budget_ratio=0.6, time_limit_s=2,
                                               options={"path": "anneal"}))
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["status"] == "timeout" and result["budget"] < result["smallest_peak"] <= graph.checkpoint_all_peak
    job_id = r.headers["Content-Location"].rsplit("/", 1)[-1]
    page = client.get(f"/dashboard/jobs/{job_id}")
    assert page.status_code == 200 and "<dt>leanest plan found</dt>" in page.text
