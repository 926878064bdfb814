"""Fixtures for the service tests: real `remat serve` / `remat worker` processes, the real Redis,
and an in-process app for the request-level tests."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from processes import REDIS_URL, Processes

from remat.service import JobStore, RedisStore, Settings, SqliteStore, create_app


@pytest.fixture
def namespace() -> str:
    """This test's own name in Redis: store key prefix ``<namespace>:`` and RQ queue ``<namespace>``."""
    return f"remat-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def processes(tmp_path: Path, namespace: str) -> Iterator[Processes]:
    env = {"REMAT_DATA_DIR": str(tmp_path / "data"), "REMAT_LOG_LEVEL": "info", "REMAT_LEASE_S": "3",
           "REMAT_CANCEL_GRACE_S": "3", "REMAT_REDIS_PREFIX": f"{namespace}:", "REMAT_QUEUE_NAME": namespace}
    procs = Processes(tmp_path, env)
    try:
        yield procs
    finally:
        procs.stop_all()


@pytest.fixture
def redis_db(namespace: str) -> Iterator[redis.Redis]:
    """The real Redis; every key of this test's namespace is deleted afterwards (prefer ``namespace`` as
    the store prefix and queue name: keys under the default ``remat:`` prefix are shared by all tests)."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("needs the Redis server on 127.0.0.1:6379 (.ci/run starts one)")
    _delete(client, "remat:*")  # what tests on the default prefix left behind
    try:
        yield client
    finally:
        _delete(client, f"*{namespace}*")
        client.close()


def _delete(client: redis.Redis, pattern: str) -> None:
    for key in client.scan_iter(match=pattern, count=1000):
        client.delete(key)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", slots=2, lease_s=3, cancel_grace_s=3, default_wait_s=10,
                    max_nodes=2000, max_edges=20000, max_time_limit_s=600, max_body_bytes=2**20)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The app in process, with its embedded executor running real solver processes."""
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., JobStore]]:
    """Opens this test's store of each kind (SQLite in tmp_path, Redis under the test's namespace) with the
    policy given (lease_s, max_attempts, share_results, clock); the test runs once per kind."""
    opened: list[JobStore] = []

    def make(**policy: Any) -> JobStore:
        if request.param == "sqlite":
            store: JobStore = SqliteStore(tmp_path / "jobs.sqlite3", **policy)
        else:
            request.getfixturevalue("redis_db")
            store = RedisStore(redis.Redis.from_url(REDIS_URL, decode_responses=True),
                               prefix=f"{request.getfixturevalue('namespace')}:", **policy)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
