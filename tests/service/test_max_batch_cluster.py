"""A max-batch search in cluster mode: the API only records it; a worker solves each batch and steps the search,
with the record and its jobs in Redis."""

from __future__ import annotations

import pytest
import redis
from factories import chain
from processes import REDIS_URL, Processes

from remat.clients.http import Client
from remat.schedules import BatchedGraph
from remat.service import RedisStore
from remat.solvers import max_batch

pytestmark = pytest.mark.redis


def test_workers_run_a_search_to_the_answer_max_batch_gives(processes: Processes, redis_db: redis.Redis,
                                                             namespace: str):
    graphs = {b: chain(8, cost=2.0 * b, memory=100 * b + 10, fixed_memory=1_000) for b in (2, 4)}
    server = processes.server("--queue", REDIS_URL)
    processes.worker()
    with Client(server.url) as client:
        started = client.max_batch(graphs, budget=50_000, strategies=["chen-greedy"])
        doc = client.wait_max_batch(started["id"], poll_s=0.3, timeout_s=180)
    here = max_batch(BatchedGraph.from_graphs(graphs), 50_000, strategy="chen-greedy")
    (row,) = doc["strategies"]
    assert doc["status"] == "succeeded" and row["batch"] == here.batch > 0
    assert [t["batch"] for t in row["trials"]] == [t.batch for t in here.trials]
    store = RedisStore.from_url(REDIS_URL, prefix=f"{namespace}:")
    try:
        assert store.get_max_batch(started["id"]).ended and store.active_max_batches() == []
    finally:
        store.close()
