"""A token's caps hold for every job it starts, a max-batch search's later batches included, and for its searches.

With 10 active jobs allowed per token, 30 searches were accepted and the token reached 17 active jobs: the
maintenance submitted the searches' batches without admitting them. Each strategy of a search now holds a slot
from admission until it ends, and the maintenance submits a batch only within the cap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from factories import chain
from fastapi.testclient import TestClient
from processes import wait_until

from remat.schedules import Graph, GraphLimits
from remat.service import Claim, Job, JobStore, Settings, SolveSpec, create_app
from remat.service._max_batch_steps import advance_max_batches
from remat.service._max_batches import new_max_batch
from remat.service._sweep_completion import complete_sweeps
from remat.service._sweeps import new_sweep
from remat.service._token_load import token_load
from remat.solvers import solve

BUDGET = 50_000
CAP = 3


def chain_at(batch: int) -> Graph:
    return chain(8, cost=2.0 * batch, memory=100 * batch + 10, fixed_memory=1_000)


def search_body(k: int, strategies: tuple[str, ...] = ("checkpoint-all",)) -> dict[str, Any]:
    """The k-th distinct search (its budget differs by k bytes)."""
    return {"graphs": [{"batch": b, "graph": chain_at(b).to_json()} for b in (2, 4)], "budget": BUDGET + k,
            "strategies": list(strategies)}


@pytest.fixture
def capped(settings: Settings) -> Iterator[TestClient]:
    tight = settings.model_copy(update={"max_active_jobs_per_token": CAP, "max_searches_per_token": 20})
    with TestClient(create_app(tight), raise_server_exceptions=False) as c:
        yield c


def _watch(store: JobStore, stop: threading.Event, seen: list[int]) -> None:
    while not stop.is_set():
        seen.append(store.count_active(None))
        stop.wait(0.01)


def test_searches_later_batches_never_take_a_token_past_its_cap(capped: TestClient):
    store = capped.app.state.service.store  # type: ignore[attr-defined]
    seen: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(store, stop, seen))
    watcher.start()
    try:
        answers = [capped.post("/v1/max-batch", json=search_body(k)) for k in range(8)]
        accepted = [r.json()["id"] for r in answers if r.status_code == 202]
        refused = [r for r in answers if r.status_code != 202]
        assert len(accepted) == CAP, [r.status_code for r in answers]
        assert all(r.status_code == 429 and "REMAT_MAX_ACTIVE_JOBS_PER_TOKEN" in r.json()["detail"]
                   for r in refused), refused[0].text
        solo = capped.post("/v1/solve", json={"graph": chain(4).to_json(), "budget_ratio": 1.0, "wait_s": 0,
                                              "strategy": "checkpoint-all"})
        assert solo.status_code == 429, "the searches hold every slot between their batches"
        for search_id in accepted:
            wait_until(lambda sid=search_id: capped.get(f"/v1/max-batch/{sid}").json()["status"] == "succeeded",
                       timeout_s=120, interval_s=0.2)
    finally:
        stop.set()
        watcher.join()
    assert max(seen) <= CAP, f"the token reached {max(seen)} active jobs"
    docs = [capped.get(f"/v1/max-batch/{s}").json() for s in accepted]
    assert all(len(d["strategies"][0]["trials"]) >= 2 for d in docs), "every search solved several batches"
    assert capped.post("/v1/max-batch", json=search_body(100)).status_code == 202, "ended searches free their slots"


def test_a_token_has_at_most_its_searches_going_on(settings: Settings):
    few = settings.model_copy(update={"max_searches_per_token": 2, "slots": 1})
    with TestClient(create_app(few), raise_server_exceptions=False) as c:
        assert [c.post("/v1/max-batch", json=search_body(k)).status_code for k in range(2)] == [202, 202]
        third = c.post("/v1/max-batch", json=search_body(2))
        assert third.status_code == 429 and third.headers["Retry-After"], third.text
        assert "2 max-batch searches going on; the limit is 2 (REMAT_MAX_SEARCHES_PER_TOKEN" in third.json()["detail"]
        again = c.post("/v1/max-batch", json=search_body(0))
        assert again.status_code == 200 or again.status_code == 202, "the same search is answered as it stands"


def _fill(store: JobStore, token: str, count: int) -> list[Job]:
    """``count`` queued jobs of ``token`` on another graph."""
    graph = chain(3)
    store.put_graph(graph.sha256, graph.to_json())
    return [store.submit(SolveSpec(graph.sha256, 10_000 + k, "checkpoint-all", "auto", 30, 1e-4),
                         graph_name="c3", token=token)[0] for k in range(count)]


def test_the_planner_submits_a_batch_only_within_the_tokens_cap(make_store: Callable[..., JobStore]):
    store = make_store()
    graphs = {2: chain_at(2), 4: chain_at(4)}
    for graph in graphs.values():
        store.put_graph(graph.sha256, graph.to_json())
    search = new_max_batch({b: g.sha256 for b, g in graphs.items()}, graph_name="chain8", budget=BUDGET,
                           max_overhead=None, strategies=[("checkpoint-all", "auto"), ("chen-greedy", "auto")],
                           time_limit_s=30, mip_gap=1e-4, token="t", now=store.clock())
    assert store.insert_max_batch(search)
    assert token_load(store, "t").held_slots == 2, "each strategy holds a slot before its first batch"
    direct = _fill(store, "t", CAP)
    advance_max_batches(store, lambda job: None, GraphLimits(), max_active_jobs_per_token=CAP)
    waiting = store.get_max_batch(search.id)
    assert store.count_active("t") == CAP and [len(s.trials) for s in waiting.strategies] == [0, 0], "both wait"
    revision = waiting.revision
    advance_max_batches(store, lambda job: None, GraphLimits(), max_active_jobs_per_token=CAP)
    assert store.get_max_batch(search.id).revision == revision, "a pass that changes nothing writes nothing"
    store.request_cancel(direct[0].id)
    advance_max_batches(store, lambda job: None, GraphLimits(), max_active_jobs_per_token=CAP)
    stepped = store.get_max_batch(search.id)
    assert store.count_active("t") == CAP, "one batch took the one free slot"
    assert [len(s.trials) for s in stepped.strategies] == [1, 0]
    load = token_load(store, "t")
    assert (load.active_jobs, load.held_slots, load.searches) == (CAP, 1, 1)


def test_a_sweeps_natural_points_wait_for_room_under_the_cap(make_store: Callable[..., JobStore]):
    store = make_store()
    graph = chain(6)
    store.put_graph(graph.sha256, graph.to_json())
    top = graph.checkpoint_all_peak
    jobs = []
    for strategy in ("checkpoint-all", "chen-sqrtn"):
        job, _ = store.submit(SolveSpec(graph.sha256, top, strategy), graph_name="c6", token="t")
        claimed = store.mark_running(job.id, "host:1:a")
        assert claimed is not None
        store.mark_finished(Claim(job.id, "host:1:a", claimed.attempts),
                            solve(graph, budget=top, strategy=strategy).document())
        jobs.append(job)
    sweep = new_sweep(jobs, graph_name="c6", token="t", now=store.clock(), planned=False)
    store.put_sweep(sweep)
    direct = _fill(store, "t", CAP - 1)  # room for one job; the natural points need two
    assert complete_sweeps(store, lambda job: None, max_active_jobs_per_token=CAP) == []
    assert not store.get_sweep(sweep.id).planned and store.count_active("t") == CAP - 1
    store.request_cancel(direct[0].id)
    [planned] = complete_sweeps(store, lambda job: None, max_active_jobs_per_token=CAP)
    assert planned.planned and len(planned.points) == 4 and store.count_active("t") == CAP
