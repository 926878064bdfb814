"""Sweeps: every strategy over a range of budgets, each point an ordinary job."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.responses import JSONResponse

from .._deps import IdPath, ServiceDep, TokenDep
from .._problems import PROBLEM_RESPONSES
from .._schemas import SweepList, SweepPublic, SweepRequest, SweepSummary

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
                              "charts need, many times smaller for large graphs")] = "full") -> SweepPublic:
    """The sweep's status, its jobs' statuses, and every result so far (remat.result/v1)."""
    sweep = service.sweep(sweep_id, token)
    if results == "full":
        return SweepPublic.of(sweep, service.sweep_jobs(sweep, with_result=True))
    jobs = service.sweep_jobs(sweep, with_result=False)
    summaries = service.store.result_summaries([j.id for j in jobs])
    return SweepPublic.of(sweep, jobs, [summaries[j.id] for j in jobs if j.id in summaries])
