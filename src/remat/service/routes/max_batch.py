"""Max-batch searches: the largest batch each strategy fits on a device, every batch tried an ordinary job."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from .._deps import IdPath, ServiceDep, TokenDep
from .._max_batch_schemas import MaxBatchList, MaxBatchPublic, MaxBatchRequest, MaxBatchSummary
from .._problems import PROBLEM_RESPONSES

router = APIRouter(prefix="/v1/max-batch", tags=["max-batch"])

ResultForm = Annotated[Literal["full", "summary"], Query(
    description="'summary' leaves the chosen result's schedule, plan and log out")]


@router.post("", operation_id="create_max_batch", status_code=202, response_model=MaxBatchSummary,
             responses=PROBLEM_RESPONSES)
def create_max_batch(body: MaxBatchRequest, service: ServiceDep, token: TokenDep) -> JSONResponse:
    """Start a search for the largest batch each strategy fits in ``budget`` bytes, at most one extra forward
    pass (or ``max_overhead``) over the step's base cost; by default every strategy that applies."""
    search = service.submit_max_batch(body, token)
    summary = MaxBatchSummary.of(search, service.max_batch_jobs(search))
    return JSONResponse(summary.model_dump(mode="json"), status_code=202,
                        headers={"Location": f"/v1/max-batch/{search.id}"})


@router.get("", operation_id="list_max_batches", response_model=MaxBatchList, responses=PROBLEM_RESPONSES)
def list_max_batches(service: ServiceDep, token: TokenDep,
                     limit: Annotated[int, Query(ge=1, le=200)] = 20) -> MaxBatchList:
    """The caller's most recent max-batch searches, newest first."""
    searches = [MaxBatchSummary.of(s, service.max_batch_jobs(s))
                for s in service.store.list_max_batches(token, limit=limit)]
    return MaxBatchList(max_batches=searches, count=len(searches))


@router.get("/{search_id}", operation_id="get_max_batch", response_model=MaxBatchPublic, responses=PROBLEM_RESPONSES)
async def get_max_batch(search_id: IdPath, service: ServiceDep, token: TokenDep,
                        result: ResultForm = "full") -> JSONResponse:
    """Each strategy's largest batch so far and the batches it tried; the chosen plan's remat.result/v1."""
    search = await run_in_threadpool(service.max_batch, search_id, token)
    return JSONResponse(await run_in_threadpool(service.max_batch_document, search, full_result=result == "full"))


@router.post("/{search_id}/cancel", operation_id="cancel_max_batch", response_model=MaxBatchSummary,
             responses=PROBLEM_RESPONSES)
def cancel_max_batch(search_id: IdPath, service: ServiceDep, token: TokenDep) -> MaxBatchSummary:
    """End the search now: each strategy still searching keeps the largest batch found so far and the jobs of the
    batches being solved are cancelled; a no-op once it has ended."""
    search = service.cancel_max_batch(search_id, token)
    return MaxBatchSummary.of(search, service.max_batch_jobs(search))

