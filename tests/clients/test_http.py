"""The HTTP client against a real `remat serve`: results, jobs, events, sweeps, and errors as ServiceError."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import chain
from processes import Processes

from remat.clients.cli import main
from remat.clients.http import Client, ServiceError
from remat.schedules import RematError, Transfer
from remat.solvers import DEFAULT_CONVERGENCE, Convergence


@pytest.fixture
def server_url(tmp_path: Path) -> Iterator[str]:
    procs = Processes(tmp_path, {"REMAT_DATA_DIR": str(tmp_path / "data")})
    try:
        yield procs.server().url
    finally:
        procs.stop_all()


def test_solve_submit_wait_and_events(server_url: str):
    graph = chain(25)
    with Client(server_url) as client:
        result = client.solve(graph, budget_ratio=0.5, strategy="checkpoint-last")
        assert result.status == "feasible" and result.graph_sha256 == graph.sha256
        job = client.submit(graph.to_json(), budget_ratio=0.5, strategy="checkpoint-last")
        assert job["status"] == "succeeded" and job["result"] == result.to_json()  # reused, not solved again
        fresh = client.submit(graph, budget_ratio=0.7, strategy="checkpoint-last")
        events = list(client.events(fresh["id"]))
        assert events[-1]["event"] == "end" and events[-1]["data"]["status"] == "succeeded"
        assert client.jobs(status="succeeded")[0]["id"] in (job["id"], fresh["id"])


def test_a_solve_carries_the_strategys_options(server_url: str):
    graph = chain(25)
    with Client(server_url) as client:
        job = client.submit(graph, budget_ratio=0.5, strategy="griewank", options={"snapshots": 2})
        assert client.wait(job["id"], timeout_s=60)["options"] == {"snapshots": 2}
        result = client.solve(graph, budget_ratio=0.5, strategy="griewank", options={"snapshots": 2})
        assert result.to_json() == client.job(job["id"])["result"]
        with pytest.raises(ServiceError, match="'snapshot'") as refused:
            client.solve(graph, budget_ratio=0.5, strategy="griewank", options={"snapshot": 2})
        assert refused.value.status == 422


def test_sweeps(server_url: str):
    graph = chain(5)
    budgets = [graph.min_feasible_budget, graph.checkpoint_all_peak]
    with Client(server_url) as client:
        started = client.sweep(graph, strategies=["checkpoint-all", "checkpoint-last"], budgets=budgets)
        sweep = client.wait_sweep(started["id"], poll_s=0.2)
    assert sweep["status"] == "succeeded" and len(sweep["results"]) == 4


def test_refusals_and_failures_are_service_errors_with_the_servers_detail(server_url: str):
    with Client(server_url) as client:
        with pytest.raises(ServiceError) as refused:
            client.solve(chain(3), budget_ratio=0.5, strategy="no-such-strategy")
        assert refused.value.status == 422 and "no-such-strategy" in str(refused.value)
        assert isinstance(refused.value, RematError) and refused.value.problem["status"] == 422
        with pytest.raises(ServiceError, match="404"):
            client.job("nope")
    with Client("http://127.0.0.1:1") as client:
        with pytest.raises(ServiceError, match="Cannot reach"):
            client.strategies()
        with pytest.raises(ServiceError, match="Cannot reach"):  # the event stream too
            next(client.events("any"))


def test_a_refusal_for_lack_of_room_is_tried_again_after_its_retry_after(tmp_path: Path):
    procs = Processes(tmp_path, {"REMAT_DATA_DIR": str(tmp_path / "data"), "REMAT_MAX_ACTIVE_JOBS_PER_TOKEN": "1",
                                 "REMAT_RETRY_AFTER_S": "1"})
    try:
        url = procs.server("--slots", "1").url
        with Client(url, retry_s=0) as impatient, Client(url, retry_s=30) as patient:
            busy = impatient.submit(chain(900), budget_ratio=0.5, strategy="checkmate", time_limit_s=300,
                                    convergence=None)
            with pytest.raises(ServiceError) as refused:
                impatient.submit(chain(5), budget_ratio=1.0, strategy="checkpoint-all")
            assert refused.value.status == 429
            with pytest.raises(ServiceError, match="has not ended within 0.5 s"):
                impatient.result(busy["id"], timeout_s=0.5)
            threading.Timer(2.0, impatient.cancel, args=(busy["id"],)).start()
            started = time.monotonic()
            result = patient.solve(chain(5), budget_ratio=1.0, strategy="checkpoint-all")
            assert result.status == "feasible" and time.monotonic() - started >= 1.5
    finally:
        procs.stop_all()


def test_copy_times_and_host_budgets_reach_the_server_from_the_client_and_the_cli(
        server_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    graph = chain(5)
    transfer = Transfer(bandwidth=2.0, latency=0.25)
    with Client(server_url) as client:
        result = client.solve(graph, budget_ratio=1.0, strategy="checkpoint-all", transfer=transfer, host_budget=8)
        assert result.transfer == transfer and result.host_budget == 8
        profile = {"profile": "pcie4-x16", "seconds_per_cost_unit": 1.0}
        job = client.wait(client.submit(graph, budget_ratio=1.0, strategy="checkpoint-all", transfer=profile)["id"])
        assert job["transfer"] == Transfer.from_profile("pcie4-x16", seconds_per_cost_unit=1.0).to_json()
        with pytest.raises(ServiceError, match="No device profile named 'pcie9'") as refused:
            client.solve(graph, budget_ratio=1.0, strategy="checkpoint-all",
                         transfer={"profile": "pcie9", "seconds_per_cost_unit": 1})
        assert refused.value.status == 422 and refused.value.problem["field"] == "transfer.profile"
        budgets = [graph.checkpoint_all_peak]
        sweep = client.wait_sweep(client.sweep(graph, strategies=["checkpoint-all"], budgets=budgets,
                                               transfer=transfer, host_budget=8)["id"], poll_s=0.2)
        assert [(r["transfer"], r["host_budget"]) for r in sweep["results"]] == [(transfer.to_json(), 8)]
    path = tmp_path / "chain5.json"
    path.write_text(json.dumps(graph.to_json()))
    out = tmp_path / "result.json"
    assert main(["solve", str(path), "--budget-ratio", "1", "--strategy", "checkpoint-all", "--server", server_url,
                 "--bandwidth", "2", "--latency", "0.25", "--host-budget", "8", "-o", str(out)]) == 0
    assert "host peak 0 B / host budget 8 B" in capsys.readouterr().out
    assert json.loads(out.read_text()) == result.to_json(), "the same request: the same job, its result reused"


def test_the_convergence_rule_reaches_the_server_from_the_client_and_the_cli(
        server_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    graph = chain(5)
    rules = {"default": DEFAULT_CONVERGENCE, "none": None, "slow": Convergence(window_s=5, tolerance=0.01)}
    with Client(server_url) as client:
        jobs = {name: client.wait(client.submit(graph, budget_ratio=1.0, strategy="checkpoint-all",
                                                convergence=rule)["id"]) for name, rule in rules.items()}
        assert {name: job["convergence"] for name, job in jobs.items()} == {
            "default": DEFAULT_CONVERGENCE.to_json(), "none": None,
            "slow": {"window_s": 5.0, "tolerance": 0.01, "gap_per_window": 0.01, "max_windows": 9.0,
                     "horizon_s": 18.0}}
        path = tmp_path / "chain5.json"
        path.write_text(json.dumps(graph.to_json()))
        for flags, rule in (([], "default"), (["--run-to-limit"], "none")):
            assert main(["solve", str(path), "--budget-ratio", "1", "--strategy", "checkpoint-all", "--server",
                         server_url, "--json", *flags]) == 0
            assert json.loads(capsys.readouterr().out) == jobs[rule]["result"], "the same request: the same job"
        assert len(client.jobs()) == 3


def test_max_batch_searches(server_url: str):
    graphs = {b: chain(8, cost=2.0 * b, memory=100 * b + 10, fixed_memory=1_000) for b in (2, 4)}
    with Client(server_url) as client:
        started = client.max_batch(graphs, budget=50_000, strategies=["checkpoint-all"])
        polled: list[str] = []
        doc = client.wait_max_batch(started["id"], poll_s=0.2, on_poll=lambda d: polled.append(d["status"]))
        assert doc["status"] == polled[-1] == "succeeded" and doc["chosen"]["result"]["plan"]
        assert doc["convergence"] == DEFAULT_CONVERGENCE.to_json()
        assert client.get_max_batch(started["id"], summary=True)["chosen"]["result"].get("plan") is None
        assert client.cancel_max_batch(started["id"])["status"] == "succeeded"     # it has ended: a no-op
        with pytest.raises(ServiceError, match="two or more batch sizes") as refused:
            client.max_batch({2: graphs[2]}, budget=50_000)
        assert refused.value.status == 422
