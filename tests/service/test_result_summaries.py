"""JobStore.result_summaries: results without their bulk, the same from both stores."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from factories import result_document

from remat.service import Claim, JobStore, SolveSpec
from remat.solvers import RESULT_BULK, ResultDocument


@pytest.fixture
def store(make_store: Callable[..., JobStore]) -> JobStore:
    return make_store()


def finished(store: JobStore, budget: int, result: ResultDocument) -> str:
    job, _ = store.submit(SolveSpec("a" * 64, budget, "checkpoint-all"), graph_name="g", token=None)
    claimed = store.mark_running(job.id, "host:1:a")
    assert claimed is not None
    store.mark_finished(Claim(job.id, "host:1:a", claimed.attempts), result)
    return job.id


def test_summaries_drop_the_bulk_and_keep_the_rest(store: JobStore):
    result = result_document(cost=3.5, peak_memory=12, overhead=1.25, schedule={"stages": [{"compute": ["a"],
                             "retain": []}]}, plan=[{"op": "compute", "node": "a"}], log=("solved",))
    done = finished(store, 100, result)
    waiting, _ = store.submit(SolveSpec("a" * 64, 200, "checkpoint-all"), graph_name="g", token=None)
    summaries = store.result_summaries([waiting.id, done, "no-such-job"])
    assert list(summaries) == [done]
    assert summaries[done] == result.summary()
    assert summaries[done].to_json(summary=True) == {k: v for k, v in result.to_json().items() if k not in RESULT_BULK}
    assert set(RESULT_BULK) == {"schedule", "plan", "log"}


def test_many_ids_are_read_in_chunks(store: JobStore):
    ids = [finished(store, b, result_document(status="optimal", cost=float(b))) for b in range(3)]
    summaries = store.result_summaries(ids + [f"x{i}" for i in range(1200)])
    assert {k: v.cost for k, v in summaries.items()} == {ids[b]: float(b) for b in range(3)}
