"""Per-token store quotas: the bytes of a token's results and of the graphs it stored are counted in both stores,
and a request that would pass either quota is a 413 naming the setting, with no job."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from factories import chain, result_document
from fastapi.testclient import TestClient

from remat.service import Claim, JobStore, Settings, SolveSpec, create_app
from remat.service._store import Retention, Usage
from remat.solvers import ResultDocument

QUOTA = 2**16


def _finish(store: JobStore, spec: SolveSpec, token: str, result: ResultDocument) -> str:
    job, _ = store.submit(spec, graph_name="g", token=token)
    claimed = store.mark_running(job.id, "host:1:a")
    assert claimed is not None
    store.mark_finished(Claim(job.id, "host:1:a", claimed.attempts), result)
    return job.id


def test_the_store_counts_each_tokens_results_and_graphs(make_store: Callable[..., JobStore]):
    now = [1000.0]
    store = make_store(clock=lambda: now[0])
    graph = chain(4).to_json()
    store.put_graph("g1", graph, token="a")
    store.put_graph("g1", graph, token="b")  # already stored: charged to the first
    size = len(json.dumps(graph))
    assert store.usage("a") == Usage(0, size) and store.usage("b") == Usage(0, 0) and store.has_graph("g1")
    result = result_document(cost=1.0, log=("x" * 1000,))
    _finish(store, SolveSpec("g1", 10, "checkpoint-all"), "a", result)
    _finish(store, SolveSpec("g1", 11, "checkpoint-all"), "a", result)
    assert store.usage("a").result_bytes == 2 * len(json.dumps(result.to_json()))
    now[0] += 10 * 86400
    store.expire(Retention(max_age_s=86400, max_jobs=10, max_sweeps=10))
    assert store.usage("a") == Usage(0, 0) and not store.has_graph("g1"), "retention gives the bytes back"


@pytest.fixture
def quotas(settings: Settings) -> Iterator[TestClient]:
    small = settings.model_copy(update={"max_result_bytes_per_token": QUOTA, "max_graph_bytes_per_token": QUOTA})
    with TestClient(create_app(small), raise_server_exceptions=False) as c:
        yield c


def _solve(graph: dict[str, Any], budget_ratio: float = 1.0) -> dict[str, Any]:
    return {"graph": graph, "budget_ratio": budget_ratio, "strategy": "checkpoint-all", "wait_s": 30}


def test_new_graphs_past_the_graph_quota_are_refused(quotas: TestClient):
    first, second = chain(250).to_json(), chain(251).to_json()
    assert QUOTA / 2 < len(json.dumps(first)) < QUOTA, len(json.dumps(first))
    assert quotas.post("/v1/solve", json=_solve(first)).status_code == 200
    refused = quotas.post("/v1/solve", json=_solve(second))
    assert refused.status_code == 413 and refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["type"] == "urn:remat:problem:store-quota", problem
    assert f"the limit is {QUOTA} (REMAT_MAX_GRAPH_BYTES_PER_TOKEN" in problem["detail"], problem["detail"]
    assert quotas.get("/v1/jobs").json()["count"] == 1, "no job for the refused request"
    assert quotas.post("/v1/solve", json=_solve(first, 0.99)).status_code in (200, 202), "a stored graph costs nothing"


def test_once_a_tokens_results_fill_its_quota_its_submissions_are_refused(quotas: TestClient):
    graph = chain(60).to_json()
    answers = [quotas.post("/v1/solve", json={**_solve(graph), "budget_ratio": None, "budget": 10_000 + k}).status_code
               for k in range(12)]
    assert 413 in answers, answers
    refused_at = answers.index(413)
    assert set(answers[:refused_at]) <= {200, 202} and set(answers[refused_at:]) == {413}, answers
    problem = quotas.post("/v1/solve", json=_solve(graph, 0.5)).json()
    assert f"the limit is {QUOTA} (REMAT_MAX_RESULT_BYTES_PER_TOKEN" in problem["detail"], problem
    assert quotas.get("/v1/jobs").json()["count"] == refused_at
