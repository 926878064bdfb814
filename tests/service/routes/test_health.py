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


def test_openapi_documents_every_endpoint(client: TestClient):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/solve", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/jobs/{job_id}/events",
                 "/v1/strategies", "/v1/sweeps", "/v1/sweeps/{sweep_id}", "/healthz", "/readyz", "/metrics"):
        assert path in paths
    assert client.get("/docs").status_code == 200
