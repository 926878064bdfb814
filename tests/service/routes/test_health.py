"""Health, readiness, metrics, the strategy listing and the OpenAPI document."""

from __future__ import annotations

from fastapi.testclient import TestClient

from remat.solvers import STRATEGIES, available_backends


def test_health_and_readiness(client: TestClient):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}


def test_metrics_count_requests_by_route_template_and_jobs_by_status(client: TestClient):
    client.get("/v1/jobs/abc")
    text = client.get("/metrics").text
    assert 'remat_http_requests_total{method="GET",route="/v1/jobs/{job_id}",status="404"} 1.0' in text
    assert 'remat_jobs{status="queued"} 0.0' in text


def test_strategies_lists_the_registry_and_installed_backends(client: TestClient):
    listing = client.get("/v1/strategies").json()
    assert [s["name"] for s in listing["strategies"]] == list(STRATEGIES)
    assert listing["installed_backends"] == list(available_backends()) and "highs" in listing["installed_backends"]
    assert "highs" in next(s for s in listing["strategies"] if s["name"] == "checkmate")["backends"]
    checkmate = next(s for s in listing["strategies"] if s["name"] == "checkmate")
    assert checkmate["options"]["path"]["accepts"] == "one of 'anneal', 'anneal-milp', 'milp'"
    assert checkmate["options"]["warm_start"]["accepts"] == "true or false"


def test_openapi_documents_every_endpoint(client: TestClient):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/solve", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/jobs/{job_id}/events",
                 "/v1/strategies", "/v1/sweeps", "/v1/sweeps/{sweep_id}", "/healthz", "/readyz", "/metrics"):
        assert path in paths
    assert client.get("/docs").status_code == 200


def test_an_unreachable_store_makes_the_service_unready_and_answers_503(settings):
    from remat.service import Settings, create_app

    down = Settings.model_validate({**settings.model_dump(), "queue_url": "redis://127.0.0.1:1/0"})
    with TestClient(create_app(down), raise_server_exceptions=False) as c:
        assert c.get("/healthz").status_code == 200
        ready = c.get("/readyz")
        assert ready.status_code == 503 and ready.headers["content-type"] == "application/problem+json"
        r = c.post("/v1/solve", json={"graph": {"format": "remat.graph/v1", "nodes": [
            {"id": "a", "deps": [], "cost": 1, "memory": 1}]}, "budget": 10, "strategy": "checkpoint-all"})
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert r.json()["type"] == "urn:remat:problem:store-unreachable"


def test_a_full_redis_is_a_503_not_a_500(client: TestClient, monkeypatch):
    import redis

    def full(*args, **kwargs):
        raise redis.exceptions.OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'.")

    monkeypatch.setattr(client.app.state.service.store, "put_graph", full)
    r = client.post("/v1/solve", json={"graph": {"format": "remat.graph/v1", "nodes": [
        {"id": "a", "deps": [], "cost": 1, "memory": 1}]}, "budget": 10, "strategy": "checkpoint-all"})
    assert r.status_code == 503 and r.headers["retry-after"] == "5" and "full" in r.json()["detail"]
