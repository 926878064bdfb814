"""Property-based fuzzing of the OpenAPI schema (schemathesis): no input gets a 5xx, every 4xx is a problem."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings

from remat.service import Settings, create_app

DATA_DIR = Path(tempfile.mkdtemp(prefix="remat-fuzz-"))
APP = create_app(Settings(data_dir=DATA_DIR, slots=1, default_wait_s=0, max_wait_s=0.2, max_time_limit_s=5,
                          max_queued_jobs=100_000, max_nodes=500, max_edges=5000, max_body_bytes=2**20))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def running_app() -> Iterator[None]:
    with TestClient(APP):  # the app's startup: store and executor; schemathesis then calls it in process
        yield
    shutil.rmtree(DATA_DIR, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case: schemathesis.Case):
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
    if response.status_code >= 400:
        assert response.headers["content-type"] == ["application/problem+json"], response.text
        assert response.json()["detail"]
