"""Sweeps: every strategy over a range of budgets, each point an ordinary job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from starlette.responses import JSONResponse, StreamingResponse

from remat.solvers import ResultDocument

from .._deps import IdPath, ServiceDep, TokenDep
from .._jobs import Job
from .._problems import PROBLEM_RESPONSES
from .._schemas import SweepList, SweepPublic, SweepRequest, SweepSummary
from .._service import Service

router = APIRouter(prefix="/v1/sweeps", tags=["sweeps"])


@router.post("", operation_id="create_sweep", status_code=202, response_model=SweepSummary,
             responses=PROBLEM_RESPONSES)
def create_sweep(body: SweepRequest, service: ServiceDep, token: TokenDep) -> JSONResponse:
    """Start a sweep; by default every applicable strategy at about a dozen budgets from the smallest
    feasible one to the checkpoint-all peak, plus each heuristic's natural point."""
    sweep = service.submit_sweep(body, token)
    summary = SweepSummary.of(sweep, service.sweep_jobs(sweep, with_result=False))
    return JSONResponse(summary.model_dump(mode="json"), status_code=202,
                        headers={"Location": f"/v1/sweeps/{sweep.id}"})


@router.get("", operation_id="list_sweeps", response_model=SweepList, responses=PROBLEM_RESPONSES)
def list_sweeps(service: ServiceDep, token: TokenDep, limit: Annotated[int, Query(ge=1, le=200)] = 20) -> SweepList:
    """The caller's most recent sweeps, newest first, with their jobs' counts by status."""
    sweeps = [SweepSummary.of(s, service.sweep_jobs(s, with_result=False))
              for s in service.store.list_sweeps(token, limit=limit)]
    return SweepList(sweeps=sweeps, count=len(sweeps))


@router.get("/{sweep_id}", operation_id="get_sweep", response_model=SweepPublic, responses=PROBLEM_RESPONSES)
def get_sweep(sweep_id: IdPath, service: ServiceDep, token: TokenDep,
              results: Annotated[Literal["full", "summary"], Query(
                  description="'summary' leaves each result's schedule, plan and log out: what tables and "
                              "charts need, many times smaller for large graphs")] = "full") -> StreamingResponse:
    """The sweep's status, its jobs' statuses, and every result so far (remat.result/v1).

    The answer is streamed, one result read from the store at a time, so the API holds one result, never the
    whole sweep (a large sweep's full results are tens of megabytes).
    """
    sweep = service.sweep(sweep_id, token)
    jobs = service.sweep_jobs(sweep, with_result=False)
    head = SweepPublic.of(sweep, jobs, []).model_dump(mode="json")
    return StreamingResponse(_document(head, jobs, service, full=results == "full"), media_type="application/json")


def _document(head: dict[str, Any], jobs: list[Job], service: Service, *, full: bool) -> Iterator[bytes]:
    """``head`` (a SweepPublic without results) written as JSON, its ``results`` filled as they are read: each
    ended job's result whole (``full``), one job at a time, or every result's summary."""
    del head["results"]
    yield _json(head)[:-1].encode() + b',"results":['
    ended = [j.id for j in jobs if j.status.terminal]
    if full:
        results: Iterator[ResultDocument | None] = (service.job_result(job_id) for job_id in ended)
    else:
        summaries = service.store.result_summaries(ended)
        results = (summaries.get(job_id) for job_id in ended)
    separator = b""
    for result in results:
        if result is not None:
            yield separator + _json(result.to_json(summary=not full)).encode()
            separator = b","
    yield b"]}"


def _json(value: Any) -> str:
    """``value`` as the API's JSON responses write it."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
